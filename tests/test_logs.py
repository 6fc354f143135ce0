"""Worker output reaches the driver, prefixed with who printed it."""

from __future__ import annotations

import logging
import os
import sys

import pytest

import meshrt
from meshrt import Actor, endpoint, this_host
from tests.helpers import wait_until


def _collect(capsys, needle: str) -> str:
    seen = []

    def arrived():
        captured = capsys.readouterr()
        seen.append(captured.out + captured.err)
        return needle in "".join(seen)

    wait_until(arrived, timeout=10)
    return "".join(seen)


def test_worker_output_is_prefixed(rt, capsys):
    @meshrt.remote
    class Talker:
        def say(self, text):
            import os

            print(text)
            print("oops", file=sys.stderr)
            return os.getpid()

    pid = meshrt.get(Talker.remote().say.remote("hello from the actor"))
    out = _collect(capsys, f"(Talker pid={pid}) oops")
    assert f"(Talker pid={pid}) hello from the actor" in out

    @meshrt.remote
    def shout():
        import os

        print("task speaking")
        return os.getpid()

    pid = meshrt.get(shout.remote())
    assert f"(shout pid={pid}) task speaking" in _collect(capsys, "task speaking")


def test_an_actor_with_its_own_repr_is_named_by_it(rt, capsys):
    """As in Ray: a class's __repr__ tells the actors of a pool apart in the output."""
    @meshrt.remote
    class Shard:
        def __init__(self, index):
            self.index = index

        def __repr__(self):
            return f"Shard(index={self.index})"

        def say(self, text):
            import os

            print(text)
            return os.getpid()

    pids = meshrt.get([Shard.remote(i).say.remote(f"shard {i} here") for i in range(2)])
    out = _collect(capsys, "shard 1 here") + _collect(capsys, "shard 0 here")
    assert f"(Shard(index=0) pid={pids[0]}) shard 0 here" in out
    assert f"(Shard(index=1) pid={pids[1]}) shard 1 here" in out


def test_log_to_driver_false_keeps_output_away(capsys):
    meshrt.init(num_cpus=1, log_to_driver=False)

    @meshrt.remote
    def noisy():
        print("should not appear")
        return 1

    @meshrt.remote
    def marker():
        return 2

    assert meshrt.get(noisy.remote()) == 1
    assert meshrt.get(marker.remote()) == 2
    meshrt.shutdown()  # closes the pipes: anything forwarded would be written by now
    captured = capsys.readouterr()
    assert "should not appear" not in captured.out + captured.err


class Talky(Actor):
    @endpoint
    def say(self, text):
        print(text, flush=True)
        return os.getpid()

    @endpoint
    def log_level(self):
        logging.getLogger("talky").info("an info line")
        return logging.getLogger().level


def test_mesh_logging_option_gathers_repeats_mutes_and_sets_the_level(capsys):
    meshrt.init(num_cpus=2)
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    mesh = procs.spawn("t", Talky)
    procs.logging_option(stream_to_client=True, aggregate_window_sec=2, level=logging.DEBUG).get(timeout=30)
    assert list(mesh.log_level.call().get(timeout=30).values()) == [logging.DEBUG] * 3
    assert "[3 similar log lines] INFO talky: an info line" in _collect(capsys, "INFO talky: an info line")
    mesh.say.call("step 1 done").get(timeout=30)
    out = _collect(capsys, "[3 similar log lines] step 1 done")
    assert out.count("step 1 done") == 1  # one line for the three processes
    procs.slice(gpus=0).logging_option(stream_to_client=False).get(timeout=30)
    pid0 = mesh.slice(gpus=0).say.call_one("muted or not").get(timeout=30)
    mesh.slice(gpus=slice(1, 3)).say.call("muted or not").get(timeout=30)
    meshrt.shutdown()  # pipes closed and the last window printed: anything forwarded is written by now
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert "[2 similar log lines] muted or not" in out and f"pid={pid0}) muted" not in out
    with pytest.raises(ValueError, match="give stream_to_client=True as well"):
        procs.logging_option(aggregate_window_sec=1)
    with pytest.raises(ValueError, match=r"logging level \(0-255\)"):
        procs.logging_option(level=1000)


def test_mesh_output_is_prefixed_with_the_mesh_and_point(rt, capsys):
    mesh = this_host().spawn_procs(per_host={"gpus": 2}, name="trainers").spawn("t", Talky)
    pid = mesh.slice(gpus=1).say.call_one("from rank one").get(timeout=30)
    assert f"(trainers gpus=1 pid={pid}) from rank one" in _collect(capsys, "from rank one")


@meshrt.remote
def log_in_a_task(message):
    logging.getLogger("app").info(message, extra={"step": 7})
    logging.getLogger("app").debug("not at INFO")
    return os.getpid()


def test_logging_config_sets_the_workers_and_the_drivers_root_logger(capsys):
    """Ray's LoggingConfig: records say who logged them (job, worker, node, task)."""
    import json

    meshrt.init(num_cpus=1, logging_config=meshrt.LoggingConfig(encoding="JSON", log_level="INFO",
                                                                additional_log_standard_attrs=["name"]))
    try:
        pid = meshrt.get(log_in_a_task.remote("hello as json"))
        out = _collect(capsys, "hello as json")
        line = next(line for line in out.splitlines() if "hello as json" in line)
        record = json.loads(line[line.index("{"):])
        assert record["message"] == "hello as json" and record["levelname"] == "INFO"
        assert record["name"] == "app" and record["step"] == 7 and record["process"] == pid
        assert record["task_name"] == "log_in_a_task" and len(record["task_id"]) > 8
        assert record["job_id"] == meshrt.get_runtime_context().get_job_id()
        assert "not at INFO" not in out
        logging.getLogger("driver").warning("from the driver")
        driver_line = next(line for line in _collect(capsys, "from the driver").splitlines() if "from the driver" in line)
        assert json.loads(driver_line)["worker_id"] == "00000000"
    finally:
        meshrt.shutdown()
    meshrt.init(num_cpus=1, logging_config=meshrt.LoggingConfig(log_level="DEBUG"))
    try:
        pid = meshrt.get(log_in_a_task.remote("hello as text"))
        out = _collect(capsys, "not at INFO")
        line = next(line for line in out.splitlines() if "hello as text" in line)
        assert f"(log_in_a_task pid={pid})" in line and "INFO test_logs.py:" in line and "-- hello as text" in line
        assert "task_name=log_in_a_task" in line and "step=7" in line
    finally:
        meshrt.shutdown()
    assert not [h for h in logging.getLogger().handlers if type(h).__name__ == "StreamHandler"
                and getattr(h, "_meshrt_logging_config", False)]  # (taken off at shutdown)


def test_logging_config_errors_name_the_setting():
    with pytest.raises(ValueError, match="encoding"):
        meshrt.LoggingConfig(encoding="XML")
    with pytest.raises(ValueError, match="log_level"):
        meshrt.LoggingConfig(log_level="LOUD")
    with pytest.raises(ValueError, match="additional_log_standard_attrs"):
        meshrt.LoggingConfig(additional_log_standard_attrs=["colour"])
    with pytest.raises(TypeError, match="logging_config"):
        meshrt.init(num_cpus=1, logging_config={"encoding": "JSON"})
    assert not meshrt.is_initialized()

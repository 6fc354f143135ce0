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

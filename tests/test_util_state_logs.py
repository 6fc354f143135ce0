"""list_logs / get_log (Ray's state API) and `meshrt logs`: every worker's output is
kept in files on the head and read back by node, file, actor, task or pid."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import meshrt
from meshrt.util.state import get_log, list_actors, list_logs

from . import test_multihost_nodes
from .helpers import wait_until
from .test_multihost_nodes import on

two_nodes = test_multihost_nodes.two_nodes  # (the fixture: the head and one agent's host)

pytestmark = pytest.mark.timeout(120)


@meshrt.remote
class Talker:
    def say(self, *lines, err=False):
        for line in lines:
            print(line, file=sys.stderr if err else sys.stdout, flush=True)
        return os.getpid()


@meshrt.remote
def shout(text):
    print(text, flush=True)
    return os.getpid()


def _eventually(read, expected, timeout=10):
    """The log as ``read()`` gives it, once it holds ``expected`` (output reaches the head
    through the worker's pipe, a moment after the call returns)."""
    wait_until(lambda: expected(read()), timeout)
    return read()


def test_logs_by_actor_task_pid_and_file_without_log_to_driver():
    meshrt.init(num_cpus=2, log_to_driver=False)
    try:
        talker = Talker.remote()
        actor_pid = meshrt.get(talker.say.remote("one", "two", "three"))
        meshrt.get(talker.say.remote("oops", err=True))
        task_ref = shout.remote("from the task")
        task_pid = meshrt.get(task_ref)
        actor_id = list_actors()[0].actor_id
        node = meshrt.nodes()[0]["NodeID"]

        out = _eventually(lambda: list(get_log(actor_id=actor_id)), lambda got: len(got) == 3)
        assert out == ["one", "two", "three"]
        assert list(get_log(actor_id=actor_id, tail=2)) == ["two", "three"]
        assert _eventually(lambda: list(get_log(actor_id=actor_id, suffix="err")), bool) == ["oops"]
        assert _eventually(lambda: list(get_log(pid=task_pid)), bool) == ["from the task"]
        assert list(get_log(task_id=task_ref.task_id().hex())) == ["from the task"]

        files = list_logs(node_id=node)
        [actor_out] = [f for f in files["worker_out"] if f.endswith(f"-{actor_pid}.out")]
        assert files["worker_err"] == [actor_out[:-4] + ".err"]
        assert list(get_log(filename=actor_out)) == ["one", "two", "three"]
        assert list_logs(node_id=node, glob_filter="*.err") == {"worker_err": files["worker_err"]}
    finally:
        meshrt.shutdown()


def test_follow_yields_lines_as_they_come_and_ends_with_the_process(rt):
    talker = Talker.remote()
    meshrt.get(talker.say.remote("first"))
    actor_id = list_actors()[0].actor_id
    _eventually(lambda: list(get_log(actor_id=actor_id)), bool)
    lines = get_log(actor_id=actor_id, follow=True, _interval=0.05)
    assert next(lines) == "first"
    meshrt.get(talker.say.remote("second"))
    assert next(lines) == "second"
    meshrt.kill(talker)
    assert list(lines) == []  # (it ends: the process is gone)
    quiet = Talker.remote()
    meshrt.get(quiet.say.remote())  # (up, and has printed nothing)
    quiet_id = next(a.actor_id for a in list_actors() if a.state == "ALIVE")
    later = get_log(actor_id=quiet_id, follow=True, _interval=0.05)
    meshrt.get(quiet.say.remote("at last"))
    assert next(later) == "at last"
    meshrt.kill(quiet)
    assert list(later) == []


def test_bad_log_requests_say_what_to_give(rt):
    with pytest.raises(ValueError, match="exactly one of"):
        get_log()
    with pytest.raises(ValueError, match="exactly one of"):
        get_log(pid=1, actor_id="ab")
    with pytest.raises(ValueError, match="no such actor"):
        get_log(actor_id="ab12")
    with pytest.raises(ValueError, match="no worker"):
        get_log(pid=1)
    with pytest.raises(ValueError, match="list_logs"):
        get_log(filename="raylet.out")
    with pytest.raises(ValueError, match="suffix"):
        get_log(pid=1, suffix="log")
    with pytest.raises(ValueError, match="node_id="):
        list_logs()
    with pytest.raises(ValueError, match="no such node"):
        list_logs(node_id="feed")


def test_meshrt_logs_on_the_command_line(monkeypatch):
    monkeypatch.setenv("MESHRT_TOKEN", "3e" * 16)
    address = meshrt.init(address="127.0.0.1:0", num_cpus=2, log_to_driver=False)["tcp_address"]
    try:
        talker = Talker.remote()
        pid = meshrt.get(talker.say.remote("over the wire"))
        actor_id = list_actors()[0].actor_id
        _eventually(lambda: list(get_log(actor_id=actor_id)), bool)
        run = [sys.executable, "-m", "meshrt", "logs", "--address", address]
        listed = subprocess.run(run, capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0 and f"pid {pid}" in listed.stdout and ".out" in listed.stdout
        shown = subprocess.run(run + ["--actor-id", actor_id], capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0 and shown.stdout == "over the wire\n"
        bad = subprocess.run(run + ["--pid", "1"], capture_output=True, text=True, timeout=60)
        assert bad.returncode == 1 and "no worker" in bad.stderr
    finally:
        meshrt.shutdown()


def test_a_worker_on_another_host_has_its_log_on_the_head(two_nodes):
    _head, other, remember, _agent = two_nodes
    talker = Talker.options(**on(other["NodeID"])).remote()
    pid = meshrt.get(talker.say.remote("from afar"), timeout=60)
    remember()  # (its processes: gone by the end, the fixture checks)
    assert _eventually(lambda: list(get_log(pid=pid)), bool) == ["from afar"]
    [name] = list_logs(node_id=other["NodeID"])["worker_out"]
    assert name.endswith(f"-{pid}.out")


def test_a_log_past_its_size_starts_over_keeping_the_last_one(rt, monkeypatch):
    from meshrt._private import log_files

    monkeypatch.setattr(log_files, "MAX_FILE_BYTES", 64)  # (the controller runs in this process)
    talker = Talker.remote()
    for text in ("a" * 40, "b" * 40, "c"):  # (past 64 bytes after the second: the file starts over)
        meshrt.get(talker.say.remote(text))
    actor_id = list_actors()[0].actor_id
    log_dir = os.path.join(meshrt.get_runtime_context().get_temp_dir(), "logs")

    def kept_then_current():
        kept = [n for n in os.listdir(log_dir) if n.endswith(".out.1")]
        if not kept:
            return []
        with open(os.path.join(log_dir, kept[0])) as f:
            return f.read().splitlines() + list(get_log(actor_id=actor_id))

    assert _eventually(kept_then_current, lambda got: len(got) == 3) == ["a" * 40, "b" * 40, "c"]
    assert len(list(get_log(actor_id=actor_id))) <= 1  # (the current file holds only what came after)


@pytest.mark.timeout(60)
def test_the_logs_directory_does_not_shadow_the_package(rt):
    """Sessions live in "<temp dir>/meshrt-sessions": a directory named "meshrt" there
    would be imported as an empty namespace package by a program started in the temp
    directory (where meshrt is installed in editable mode, as in development)."""
    import tempfile

    temp = tempfile.gettempdir()
    assert os.path.isdir(os.path.join(temp, "meshrt-sessions"))
    assert meshrt.get_runtime_context().get_temp_dir().startswith(os.path.join(temp, "meshrt-sessions", "session_"))
    started_there = subprocess.run([sys.executable, "-c", "import meshrt; print(callable(meshrt.init))"],
                                   cwd=temp, capture_output=True, text=True, timeout=60)
    assert started_there.stdout.strip() == "True", started_there.stderr

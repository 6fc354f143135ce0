"""meshrt.timeline(): the tasks, actor calls and constructors that ran in every process
(and the driver), as Chrome trace events, as ray.timeline() gives them."""
import asyncio
import json
import os
import subprocess
import sys
import threading

import pytest

import meshrt
from meshrt import Actor, endpoint, this_host

from . import test_multihost_nodes
from .test_multihost_nodes import Where, on

two_nodes = test_multihost_nodes.two_nodes  # (the fixture: the head and one agent's host)

pytestmark = pytest.mark.timeout(120)


@meshrt.remote
def nap():
    threading.Event().wait(0.02)  # (a call long enough to measure)
    return os.getpid()


@meshrt.remote(max_calls=1)
def once():
    return os.getpid()


@meshrt.remote
class Counter:
    def __init__(self):
        self.n = 0

    def add(self):
        self.n += 1
        return os.getpid()

    async def add_async(self):
        await asyncio.sleep(0)
        return self.n


class Greeter(Actor):
    @endpoint
    def hello(self):
        return os.getpid()


def _calls(events, name):
    return [e for e in events if e.get("ph") == "X" and e["name"] == name]


def test_tasks_actor_calls_and_constructors_are_events_of_their_processes(rt, tmp_path):
    pids = meshrt.get([nap.remote() for _ in range(4)])
    counter = Counter.remote()
    actor_pid = meshrt.get(counter.add.remote())
    assert meshrt.get(counter.add_async.remote()) == 1
    events = meshrt.timeline()
    naps = _calls(events, "nap")
    assert len(naps) == 4 and {e["pid"] for e in naps} == set(pids)
    assert all(e["cat"] == "task" and e["dur"] >= 15_000 for e in naps)  # (µs: each waited 20 ms)
    assert all(len(e["args"]["task_id"]) > 8 for e in naps)
    [init] = _calls(events, "Counter.__init__")
    [add] = _calls(events, "Counter.add")
    [add_async] = _calls(events, "Counter.add_async")
    assert init["cat"] == "actor_creation_task" and add["cat"] == add_async["cat"] == "actor_task"
    assert init["pid"] == add["pid"] == add_async["pid"] == actor_pid
    assert init["ts"] + init["dur"] <= add["ts"] < add_async["ts"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names[actor_pid].startswith("Counter (pid ") and names[pids[0]].startswith("pool worker (pid ")
    threads = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {(e["pid"], e["tid"]) for e in naps + [add, add_async]} <= threads

    path = tmp_path / "trace.json"
    assert meshrt.timeline(str(path)) is None
    written = json.loads(path.read_text())
    assert len(_calls(written, "nap")) == 4


def test_mesh_endpoints_and_a_worker_that_left_are_there(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    greeters = procs.spawn("greeters", Greeter)
    pids = set(greeters.hello.call().get().values())
    gone = meshrt.get(once.remote())  # (its process leaves after the call: max_calls=1)
    events = meshrt.timeline()
    assert {e["pid"] for e in _calls(events, "greeters.hello")} == pids
    assert [e["pid"] for e in _calls(events, "once")] == [gone]
    procs.stop().get()


def test_timeline_needs_a_running_meshrt_and_a_path():
    with pytest.raises(RuntimeError, match="init"):
        meshrt.timeline()
    meshrt.init(local_mode=True)
    try:
        meshrt.get(nap.remote())
        assert len(_calls(meshrt.timeline(), "nap")) == 1  # (local mode: the driver ran it)
        with pytest.raises(TypeError, match="filename"):
            meshrt.timeline(42)
    finally:
        meshrt.shutdown()


def test_a_call_on_another_host_is_in_the_timeline_under_its_node(two_nodes):
    head, other, remember, _agent = two_nodes
    where = Where.options(**on(other["NodeID"])).remote()
    node, _host, pid = meshrt.get(where.where.remote(), timeout=60)
    remember()  # (its processes: gone by the end, the fixture checks)
    events = meshrt.timeline()
    [call] = _calls(events, "Where.where")
    assert call["pid"] == pid and call["args"]["node_id"] == node == other["NodeID"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert "trainhost" in names[pid]


def test_meshrt_timeline_on_the_command_line(monkeypatch, tmp_path):
    monkeypatch.setenv("MESHRT_TOKEN", "5c" * 16)
    address = meshrt.init(address="127.0.0.1:0", num_cpus=2)["tcp_address"]
    try:
        pid = meshrt.get(nap.remote())
        path = tmp_path / "trace.json"
        run = [sys.executable, "-m", "meshrt", "timeline", "--address", address, "--output", str(path)]
        out = subprocess.run(run, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert str(path) in out.stdout and "chrome://tracing" in out.stdout
        assert [e["pid"] for e in _calls(json.loads(path.read_text()), "nap")] == [pid]
        bad = subprocess.run(run[:-1] + [str(tmp_path / "missing" / "trace.json")], capture_output=True, text=True,
                             timeout=60)
        assert bad.returncode == 1 and "--output" in bad.stderr
    finally:
        meshrt.shutdown()

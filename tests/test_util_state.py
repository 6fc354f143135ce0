"""meshrt.util.state: Ray's state API (list_*/get_*/summarize_*) over what the
controller knows now."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import meshrt
from meshrt.util.state import (
    get_actor,
    get_job,
    get_objects,
    get_task,
    get_worker,
    list_actors,
    list_jobs,
    list_nodes,
    list_objects,
    list_placement_groups,
    list_tasks,
    list_workers,
    summarize_actors,
    summarize_objects,
    summarize_tasks,
)

from .helpers import wait_until

pytestmark = pytest.mark.timeout(120)


@meshrt.remote
class Named:
    def pid(self):
        return os.getpid()


@meshrt.remote
def hold(port):
    import socket

    # Waits for the test's word, holding its CPU meanwhile (a get() would hand it back).
    with socket.create_connection(("127.0.0.1", port)) as sock:
        return sock.recv(16).decode()


def test_actors_alive_and_dead_with_how_they_died(rt):
    alpha = Named.options(name="alpha").remote()
    beta = Named.remote()
    pid = meshrt.get(alpha.pid.remote())
    meshrt.get(beta.pid.remote())
    meshrt.kill(beta)
    assert wait_until(lambda: len(list_actors(filters=[("state", "=", "DEAD")])) == 1, timeout=30)
    (alive,) = list_actors(filters=[("state", "=", "alive"), ("class_name", "=", "Named")])
    assert alive.name == "alpha" and alive.pid == pid and alive.node_id == meshrt.get_runtime_context().get_node_id()
    (dead,) = list_actors(filters=[("state", "!=", "ALIVE"), ("class_name", "=", "Named")])
    assert "meshrt.kill()" in dead.death_cause and dead.pid is None
    assert alive.job_id == meshrt.get_runtime_context().get_job_id() and alive.placement_group_id is None
    assert get_actor(alive.actor_id).name == "alpha" and get_actor("f" * 30) is None
    assert summarize_actors()["cluster"]["summary"]["Named"]["state_counts"] == {"ALIVE": 1, "DEAD": 1}
    assert len(list_actors(limit=1)) == 1
    assert any(w.pid == pid and w.actor_id == alive.actor_id for w in list_workers())


@meshrt.remote
def fails_or_dies(how):
    if how == "raise":
        raise ValueError("bad input")
    if how == "die":
        os._exit(3)
    return how


def test_tasks_waiting_and_running(rt):
    import socket

    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(60)
        refs = [hold.remote(server.getsockname()[1]) for _ in range(4)]  # (2 CPUs: two run, two wait)
        assert wait_until(lambda: len(list_tasks(filters=[("state", "=", "RUNNING")])) == 2, timeout=30)
        # (the others wait for a CPU, or queued behind a running one on its worker already)
        waiting = list_tasks(filters=[("state", "!=", "RUNNING")])
        assert len(waiting) == 2 and all(t.name == "hold" for t in waiting)
        assert {t.state for t in waiting} <= {"PENDING_NODE_ASSIGNMENT", "SUBMITTED_TO_WORKER"}
        counts = summarize_tasks()["cluster"]["summary"]["hold"]["state_counts"]
        assert counts["RUNNING"] == 2 and sum(counts.values()) == 4
        for _ in range(4):  # (each task, as it starts, is told to finish)
            conn, _ = server.accept()
            with conn:
                conn.sendall(b"go")
        assert meshrt.get(refs) == ["go"] * 4
    assert wait_until(lambda: len(list_tasks(filters=[("name", "=", "hold"), ("state", "=", "FINISHED")])) == 4,
                      timeout=30)
    assert not list_tasks(filters=[("name", "=", "hold"), ("state", "=", "RUNNING")])
    ended = list_tasks(filters=[("name", "=", "hold")])
    assert all(t.end_time_ms is not None and t.worker_pid for t in ended)


def test_tasks_that_raise_or_lose_their_worker_are_listed_as_failed(rt):
    meshrt.get(fails_or_dies.options(max_retries=0).remote("ok"))
    with pytest.raises(ValueError):
        meshrt.get(fails_or_dies.options(max_retries=0).remote("raise"))
    with pytest.raises(meshrt.exceptions.WorkerCrashedError):
        meshrt.get(fails_or_dies.options(max_retries=0).remote("die"))
    states = {t.state for t in list_tasks(filters=[("name", "=", "fails_or_dies")])}
    assert states == {"FINISHED", "FAILED"}
    failed = list_tasks(filters=[("name", "=", "fails_or_dies"), ("state", "=", "FAILED")])
    assert sorted(t.error_type for t in failed) == ["TASK_EXECUTION_EXCEPTION", "WORKER_DIED"]  # (Ray's names)
    raised = next(t for t in failed if t.error_type == "TASK_EXECUTION_EXCEPTION")
    assert "ValueError" in raised.error_message and raised.job_id == meshrt.get_runtime_context().get_job_id()
    (finished,) = list_tasks(filters=[("name", "=", "fails_or_dies"), ("state", "=", "FINISHED")])
    assert finished.error_type is None and finished.worker_id and finished.actor_id is None


def test_objects_nodes_and_placement_groups(rt):
    ref = meshrt.put(np.zeros(1 << 20))  # 8 MiB: in the shared-memory store
    assert any(o.object_size == 8 << 20 and o.where == "shared memory" for o in list_objects())
    del ref
    (node,) = list_nodes()
    assert node.is_head_node and node.state == "ALIVE" and node.resources_total["CPU"] == 2
    pg = meshrt.util.placement_group([{"CPU": 1}], name="pair")
    meshrt.get(pg.ready())
    (group,) = list_placement_groups(filters=[("name", "=", "pair")])
    assert group.state == "CREATED" and group.bundles == [{"CPU": 1}]


def test_bad_filters_are_named(rt):
    with pytest.raises(ValueError, match="no field 'colour'"):
        list_actors(filters=[("colour", "=", "red")])
    with pytest.raises(meshrt.util.state.exception.RayStateApiException):  # (Ray's class for it too)
        list_tasks(filters=[("colour", "=", "red")])
    with pytest.raises(ValueError, match="'=' or '!='"):
        list_actors(filters=[("state", ">", "ALIVE")])
    with pytest.raises(ValueError, match="triple"):
        list_actors(filters=["state=ALIVE"])
    with pytest.raises(ValueError, match="limit"):
        list_actors(limit=0)


def test_meshrt_list_on_the_command_line(monkeypatch):
    import subprocess
    import sys

    token = "7a" * 16
    monkeypatch.setenv("MESHRT_TOKEN", token)
    address = meshrt.init(address="127.0.0.1:0", num_cpus=2)["tcp_address"]
    try:
        alpha = Named.options(name="alpha").remote()
        pid = meshrt.get(alpha.pid.remote())
        run = [sys.executable, "-m", "meshrt", "list", "actors", "--address", address, "--filter", "name=alpha"]
        out = subprocess.run(run, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        header, row, count = out.stdout.strip().splitlines()
        assert header.split()[:3] == ["actor_id", "class_name", "state"]
        assert "Named" in row and "ALIVE" in row and str(pid) in row and count.startswith("(1 of ")
        bad = subprocess.run(run[:-1] + ["colour=red"], capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and "no field 'colour'" in bad.stderr
        workers = subprocess.run([sys.executable, "-m", "meshrt", "list", "workers", "--address", address],
                                 capture_output=True, text=True, timeout=60)
        assert workers.returncode == 0 and str(pid) in workers.stdout
        assert meshrt.get(quick.options(runtime_env={"env_vars": {"SHOWN": "1"}}).remote(5)) == 5
        envs = subprocess.run([sys.executable, "-m", "meshrt", "list", "runtime-envs", "--address", address],
                              capture_output=True, text=True, timeout=60)
        assert envs.returncode == 0 and "{'env_vars': {'SHOWN': '1'}}  True" in envs.stdout, envs.stderr
    finally:
        meshrt.shutdown()


@meshrt.remote
def quick(x):
    return x


def test_jobs_one_task_one_worker_and_objects_by_id(rt):
    [job] = list_jobs()
    assert job.job_id == meshrt.get_runtime_context().get_job_id() and job.status == "RUNNING"
    assert job.type == "DRIVER" and sys.argv[0] in job.entrypoint and job.driver_info["pid"] == str(os.getpid())
    assert get_job(job.job_id) == job and get_job("feed") is None
    ref = quick.remote(1)
    assert meshrt.get(ref) == 1
    row = get_task(ref.task_id().hex())  # (one attempt: its row, as Ray's)
    assert row.state == "FINISHED" and row.name == "quick" and get_task("f" * 30) is None
    worker = next(w for w in list_workers() if w.pid == row.worker_pid)
    assert get_worker(worker.worker_id) == worker
    big = meshrt.put(np.zeros(1 << 20, dtype=np.uint8))  # (in the store: listed)
    [obj] = get_objects(big.hex())
    assert obj.object_size >= 1 << 20
    summary = summarize_objects()["cluster"]
    assert summary["total_objects"] >= 1 and summary["summary"]["shared memory"]["total_objects"] >= 1


@meshrt.remote
class Introspective:
    def names(self):
        ctx = meshrt.get_runtime_context()
        return ctx.get_task_name(), ctx.get_task_function_name(), ctx.is_canceled()


@meshrt.remote
def task_names():
    ctx = meshrt.get_runtime_context()
    return (ctx.get_task_name(), ctx.get_task_function_name(), ctx.get_session_name(), ctx.get_temp_dir(),
            ctx.should_capture_child_tasks_in_placement_group, ctx.current_placement_group_id)


def test_runtime_context_names_the_running_task(rt):
    ctx = meshrt.get_runtime_context()
    assert ctx.get_task_name() is None and ctx.get_task_function_name() is None  # (the driver)
    name, function, session, temp_dir, capture, group = meshrt.get(task_names.options(name="renamed").remote())
    assert name == "renamed" and function == f"{__name__}.task_names"
    assert session == ctx.get_session_name() and session and temp_dir.endswith(f"session_{session}")
    assert capture is False and group is None
    assert meshrt.get(Introspective.remote().names.remote()) == (
        "Introspective.names", f"{__name__}.Introspective.names", False)
    assert ctx.get_node_labels() == {"ray.io/node-id": ctx.get_node_id()}
    with pytest.raises(RuntimeError, match="inside a task"):
        ctx.is_canceled()


@meshrt.remote
class Counter:
    def __init__(self, start):
        if start < 0:
            raise ValueError("no negative start")
        self.n = start

    def add(self, k):
        if k < 0:
            raise ValueError("no negative steps")
        self.n += k
        return self.n

    def pid(self):
        return os.getpid()


def test_actor_calls_and_constructors_are_listed_once_ended(rt):
    counter = Counter.remote(1)
    ok = counter.add.remote(2)
    assert meshrt.get(ok) == 3
    bad = counter.add.remote(-1)
    with pytest.raises(ValueError):
        meshrt.get(bad)
    broken = Counter.remote(-1)
    with pytest.raises(meshrt.exceptions.ActorDiedError):
        meshrt.get(broken.add.remote(1))
    actor_id = counter._actor_id.hex()
    row = get_task(ok.task_id().hex())
    assert (row.type, row.state, row.name, row.actor_id) == ("ACTOR_TASK", "FINISHED", "Counter.add", actor_id)
    assert row.start_time_ms <= row.end_time_ms and row.worker_pid == meshrt.get(counter.pid.remote())
    failed = get_task(bad.task_id().hex())
    assert (failed.state, failed.error_type) == ("FAILED", "TASK_EXECUTION_EXCEPTION")
    assert failed.error_message == "ValueError: no negative steps"
    made = {(t.actor_id, t.state, t.error_type) for t in list_tasks(filters=[("type", "=", "ACTOR_CREATION_TASK")])}
    assert (actor_id, "FINISHED", None) in made and (broken._actor_id.hex(), "FAILED", "ACTOR_CREATION_FAILED") in made
    counts = summarize_tasks()["cluster"]["summary"]["Counter.add"]["state_counts"]
    assert counts == {"FINISHED": 1, "FAILED": 1}
    # a task the controller scheduled has its start too
    ref = quick.remote(5)
    meshrt.get(ref)
    task = get_task(ref.task_id().hex())
    assert task.type == "NORMAL_TASK" and task.start_time_ms <= task.end_time_ms


@meshrt.remote
class Waiter:
    def wait_for(self, port):
        import socket

        with socket.create_connection(("127.0.0.1", port)) as sock:
            return sock.recv(16).decode()


def test_an_actor_call_running_now_is_listed_running(rt):
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(60)
        waiter = Waiter.remote()
        ref = waiter.wait_for.remote(server.getsockname()[1])
        conn, _ = server.accept()  # (the call runs now: it connected)
        with conn:
            row = get_task(ref.task_id().hex())
            assert (row.state, row.type, row.name, row.end_time_ms) == ("RUNNING", "ACTOR_TASK", "Waiter.wait_for",
                                                                         None)
            assert row.start_time_ms > 0 and row.actor_id == waiter._actor_id.hex()
            conn.sendall(b"go")
        assert meshrt.get(ref) == "go"
    assert get_task(ref.task_id().hex()).state == "FINISHED"


@meshrt.remote
def submits_quick():
    return meshrt.get(quick.remote(7)), meshrt.get_runtime_context().get_task_id()


@meshrt.remote
class Submitter:
    def submit(self):
        return meshrt.get(quick.options(label_selector={"zone": "!b"}).remote(8)), \
            meshrt.get_runtime_context().get_task_id()


def test_task_rows_say_who_submitted_them_when_and_what_happened(rt):
    outer = submits_quick.remote()
    assert meshrt.get(outer)[0] == 7
    parent_id = meshrt.get(outer)[1]
    row = get_task(outer.task_id().hex())
    assert row.parent_task_id is None and row.language == "PYTHON"  # (submitted by the driver's own code)
    assert row.creation_time_ms <= row.start_time_ms <= row.end_time_ms
    assert [e["state"] for e in row.events] == ["PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT",
                                                "SUBMITTED_TO_WORKER", "RUNNING", "FINISHED"]  # (Ray's words)
    assert [e["created_ms"] for e in row.events] == sorted(e["created_ms"] for e in row.events)
    assert row.fallback_strategy == {"options": []} and row.label_selector == {}
    (inner,) = [t for t in list_tasks(filters=[("name", "=", "quick")], detail=True) if t.parent_task_id]
    assert inner.parent_task_id == parent_id == row.task_id  # (submitted by the task above)
    submitter = Submitter.remote()
    value, call_id = meshrt.get(submitter.submit.remote())
    assert value == 8
    (nested,) = list_tasks(filters=[("parent_task_id", "=", call_id)], detail=True)
    assert nested.name == "quick" and nested.label_selector == {"zone": "!b"}  # (from an actor's call)
    call = get_task(call_id)
    assert call.type == "ACTOR_TASK" and [e["state"] for e in call.events] == ["RUNNING", "FINISHED"]


@meshrt.remote(max_concurrency=1)
class Leaver:
    async def leave_when_open(self, opened):
        await opened.wait.remote()
        meshrt.actor.exit_actor()

    async def later(self):
        return "never"


def test_an_actor_that_exited_leaves_no_call_listed_as_running_or_waiting(rt):
    from .helpers import gate

    opened, leaver = gate(), Leaver.remote()
    leaving = leaver.leave_when_open.remote(opened)
    behind = [leaver.later.remote() for _ in range(2)]

    def rows():
        return sorted((row.name, row.state) for row in list_tasks(
            filters=[("actor_id", "=", leaver._actor_id.hex()), ("type", "=", "ACTOR_TASK")]))

    assert wait_until(lambda: rows() == [("Leaver.later", "SUBMITTED_TO_WORKER")] * 2 + [
        ("Leaver.leave_when_open", "RUNNING")], 30, 0.1)
    meshrt.get(opened.open.remote())
    for ref in [leaving, *behind]:
        with pytest.raises(meshrt.exceptions.ActorDiedError):
            meshrt.get(ref, timeout=30)
    assert wait_until(lambda: not [state for _, state in rows() if state in ("RUNNING", "SUBMITTED_TO_WORKER")], 30, 0.1)

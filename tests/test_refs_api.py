"""ObjectRef and the module-level API: get/wait/put/cancel, awaiting from any loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import time

import numpy as np
import pytest

import meshrt
from meshrt.exceptions import GetTimeoutError, TaskCancelledError
from tests.helpers import ended, gate, wait_until


@meshrt.remote
def add(a, b):
    return a + b


@meshrt.remote
def wait_on(g):
    return meshrt.get(g.wait.remote())


def test_put_get_and_snapshot_semantics(rt):
    data = np.ones(1 << 16)
    ref = meshrt.put(data)
    data[:] = 0  # the stored value is a snapshot taken at put time
    out = meshrt.get(ref)
    assert out.sum() == 1 << 16
    assert not out.flags.writeable  # zero-copy views are read-only, as in Ray
    assert meshrt.get(meshrt.put({"a": [1, 2]})) == {"a": [1, 2]}


def test_ref_ids_as_ray_gives_them(rt):
    refs = [meshrt.put(i) for i in range(20)]
    assert {len(r.hex()) for r in refs} == {38}  # (one width: it varied with the id)
    assert all(int.from_bytes(r.binary(), "big") == int(r.hex(), 16) for r in refs)  # (binary() raised)
    assert not refs[0].is_nil() and refs[0].job_id() == meshrt.get_runtime_context().get_job_id()
    assert issubclass(meshrt.exceptions.ObjectFetchTimedOutError, meshrt.exceptions.ObjectLostError)
    for name in ("OutOfMemoryError", "NodeDiedError", "RaySystemError", "PendingCallsLimitExceeded"):
        assert issubclass(getattr(meshrt.exceptions, name), meshrt.exceptions.MeshrtError)


def test_put_of_ref_is_rejected(rt):
    with pytest.raises(TypeError, match="ObjectRef"):
        meshrt.put(meshrt.put(1))


def test_ref_get_method_and_future(rt):
    ref = add.remote(2, 3)
    assert ref.get(timeout=30) == 5
    fut = add.remote(4, 5).future()
    assert isinstance(fut, concurrent.futures.Future)
    assert fut.result(timeout=30) == 9


def test_get_timeout(rt):
    g = gate()
    ref = wait_on.remote(g)
    with pytest.raises(GetTimeoutError, match="timed out"):
        meshrt.get(ref, timeout=0.2)
    assert isinstance(GetTimeoutError("x"), TimeoutError)
    meshrt.get(g.open.remote())
    assert meshrt.get(ref, timeout=30) is True


@meshrt.remote
def fails_now():
    raise KeyError("at once")


@meshrt.remote
def get_twice(ref_in_list):
    ref = ref_in_list[0]
    return meshrt.get([ref, ref])


def test_get_of_a_ref_named_twice_and_the_first_failure(rt):
    g = gate()
    pending = wait_on.remote(g)
    inner = get_twice.remote([pending])  # (the same, inside a task)
    failing = fails_now.remote()
    with pytest.raises(KeyError, match="at once"):  # (as Ray: not after the slow ref, still waiting)
        meshrt.get([pending, failing])
    got = []
    waiter = threading.Thread(target=lambda: got.append(meshrt.get([pending, pending])))
    waiter.start()  # (it hung: the ref counted twice, its entry woke the waiter once)
    meshrt.get(g.open.remote())
    waiter.join(60)
    assert got == [[True, True]]
    assert meshrt.get(inner, timeout=60) == [True, True]
    assert meshrt.wait([]) == ([], [])


def test_wait_returns_ready_first_in_order(rt):
    g = gate()
    slow = wait_on.remote(g)
    fast = [add.remote(i, i) for i in range(3)]
    ready, not_ready = meshrt.wait([slow, *fast], num_returns=3, timeout=30)
    assert ready == fast and not_ready == [slow]
    ready, not_ready = meshrt.wait([slow], timeout=0)
    assert ready == [] and not_ready == [slow]
    meshrt.get(g.open.remote())
    ready, _ = meshrt.wait([slow], timeout=30)
    assert ready == [slow]


def test_wait_validates_arguments(rt):
    ref = meshrt.put(1)
    with pytest.raises(ValueError, match="num_returns"):
        meshrt.wait([ref], num_returns=2)
    with pytest.raises(ValueError, match="more than once"):
        meshrt.wait([ref, ref])
    with pytest.raises(TypeError, match="list"):
        meshrt.wait(ref)


async def test_await_and_asyncio_helpers(rt):
    assert await add.remote(1, 2) == 3
    assert await asyncio.gather(*(add.remote(i, 1) for i in range(5))) == [1, 2, 3, 4, 5]
    assert await asyncio.wait_for(add.remote(5, 5), timeout=30) == 10
    done, pending = await asyncio.wait([asyncio.ensure_future(add.remote(1, 1))], timeout=30)
    assert len(done) == 1 and not pending
    assert await add.remote(3, 3).as_future() == 6


def test_await_in_event_loops_of_other_threads(rt):
    refs = [add.remote(i, i) for i in range(10)]
    results = {}

    def run_loop(name):
        async def main():
            return await asyncio.gather(*refs)

        results[name] = asyncio.run(main())

    threads = [threading.Thread(target=run_loop, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == {"a": [2 * i for i in range(10)], "b": [2 * i for i in range(10)]}


async def test_wait_for_timeout_leaves_ref_usable(rt):
    g = gate()
    ref = wait_on.remote(g)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(ref, timeout=0.1)
    await g.open.remote()
    assert await ref is True


def test_cancel_queued_task(rt):
    g = gate()
    blockers = [wait_on.remote(g) for _ in range(2)]  # occupy both CPUs
    queued = add.remote(1, 1)
    meshrt.cancel(queued)
    with pytest.raises(TaskCancelledError):
        meshrt.get(queued, timeout=30)
    meshrt.get(g.open.remote())
    assert meshrt.get(blockers, timeout=30) == [True, True]


def test_cancel_running_task_interrupts_it(rt):
    @meshrt.remote
    def sleeper():
        time.sleep(60)
        return "not interrupted"

    @meshrt.remote
    def spin(g):
        g.open.remote()
        while True:
            pass

    ref = sleeper.remote()
    # wait until it runs: a second task on the other CPU reports back
    ready, _ = meshrt.wait([ref], timeout=0.3)
    assert not ready
    meshrt.cancel(ref)
    with pytest.raises(TaskCancelledError):
        meshrt.get(ref, timeout=30)
    g = gate()
    busy = spin.remote(g)
    meshrt.get(g.wait.remote())
    meshrt.cancel(busy)
    with pytest.raises(TaskCancelledError):
        meshrt.get(busy, timeout=30)
    assert meshrt.get(add.remote(1, 2)) == 3  # the worker survived and is reused


def test_cancel_force_kills_worker(rt):
    @meshrt.remote(max_retries=3)
    def stuck(g):
        import signal

        signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # cannot be interrupted politely
        g.open.remote()
        time.sleep(60)

    g = gate()
    ref = stuck.remote(g)
    meshrt.get(g.wait.remote())
    meshrt.cancel(ref, force=True)
    with pytest.raises(TaskCancelledError):
        meshrt.get(ref, timeout=30)


def test_cancel_force_takes_the_tasks_the_killed_task_submitted_along(rt):
    """As Ray stops a dead owner's tasks: the children of a task killed by
    cancel(force=True) are cancelled too, and the CPUs they held come back."""
    @meshrt.remote(num_cpus=0.5)
    def child(g):
        g.open.remote()
        time.sleep(60)

    @meshrt.remote(num_cpus=0.5)
    def parent(g1, g2):
        return meshrt.get([child.remote(g1), child.remote(g2)])

    total = meshrt.cluster_resources()["CPU"]
    gates = [gate(), gate()]
    ref = parent.remote(*gates)
    assert meshrt.get([g.wait.remote() for g in gates]) == [True, True]  # (both children run)
    assert meshrt.available_resources().get("CPU", 0) <= total - 1  # (the parent lends its CPU while it waits)
    meshrt.cancel(ref, force=True)
    with pytest.raises(TaskCancelledError):
        meshrt.get(ref, timeout=30)
    assert wait_until(lambda: meshrt.available_resources().get("CPU") == total, timeout=30)


def test_the_tasks_of_an_actor_that_ends_as_asked_run_on(rt):
    """Only an owner that crashed or was killed takes its running tasks along: an actor
    whose handles are all dropped lets the task it started finish, as in Ray."""
    @meshrt.remote
    def background(started, release, finished):
        started.open.remote()
        assert meshrt.get(release.wait.remote())
        meshrt.get(finished.open.remote())

    @meshrt.remote
    class Starter:
        def start(self, *gates):
            self.ref = background.remote(*gates)  # (never waited on)
            return os.getpid()

    started, release, finished = gate(), gate(), gate()
    starter = Starter.remote()
    pid = meshrt.get(starter.start.remote(started, release, finished))
    assert meshrt.get(started.wait.remote())
    del starter  # (the actor ends: it owned the running task)
    assert wait_until(lambda: ended(pid), timeout=30)
    release.open.remote()
    assert meshrt.get(finished.wait.remote(), timeout=60) is True


def test_cancel_async_actor_call(rt):
    @meshrt.remote
    class Slow:
        async def forever(self):
            await asyncio.sleep(60)

        async def ping(self):
            return "pong"

    s = Slow.remote()
    ref = s.forever.remote()
    assert meshrt.get(s.ping.remote()) == "pong"
    meshrt.cancel(ref)
    with pytest.raises(TaskCancelledError):
        meshrt.get(ref, timeout=30)
    with pytest.raises(ValueError, match="force"):
        meshrt.cancel(s.forever.remote(), force=True)


def test_runtime_context(rt):
    ctx = meshrt.get_runtime_context()
    assert ctx.get_job_id() and ctx.get_node_id()
    assert ctx.get_actor_id() is None

    @meshrt.remote
    def task_ctx():
        c = meshrt.get_runtime_context()
        return c.get_task_id(), c.get_actor_id(), c.get_job_id(), c.get_pid()

    task_id, actor_id, job_id, pid = meshrt.get(task_ctx.remote())
    assert task_id and actor_id is None and job_id == ctx.get_job_id() and pid > 0

    @meshrt.remote
    class Who:
        def ids(self):
            c = meshrt.get_runtime_context()
            return c.get_actor_id(), c.get_task_id(), c.namespace

    actor_id, task_id, namespace = meshrt.get(Who.remote().ids.remote())
    assert actor_id and task_id and namespace == ctx.namespace

    @meshrt.remote
    def task_resources():
        return meshrt.get_runtime_context().get_assigned_resources()

    assert meshrt.get(task_resources.options(num_cpus=0.5).remote()) == {"CPU": 0.5}
    assert repr(meshrt.get(task_resources.remote())) == "{'CPU': 1.0}"  # (floats, as Ray's)

    @meshrt.remote(max_restarts=1)
    class Restored:
        def __init__(self):  # (the context is there in the constructor, as in Ray)
            c = meshrt.get_runtime_context()
            self.seen = (c.get_actor_id(), c.get_actor_name(), c.was_current_actor_reconstructed,
                         c.get_assigned_resources())

        def seen_in_init(self):
            return self.seen

        def crash(self):
            os._exit(1)

    assert meshrt.get(Restored.remote().seen_in_init.remote())[1] == ""  # (unnamed: '', as Ray's)
    assert meshrt.get_runtime_context().get_actor_name() is None  # (not an actor)
    r = Restored.options(name="restored", num_cpus=1).remote()
    first = meshrt.get(r.seen_in_init.remote())
    assert first[0] and first[1:] == ("restored", False, {"CPU": 1.0})
    r.crash.remote()
    assert wait_until(lambda: _restarted(r), 30)  # (calls fail while it restarts)
    again = meshrt.get(r.seen_in_init.remote(), timeout=30)
    assert again[0] == first[0] and again[2] is True  # was_current_actor_reconstructed


def _restarted(handle) -> bool:
    try:
        return meshrt.get(handle.seen_in_init.remote(), timeout=30)[2]
    except meshrt.exceptions.RayActorError:
        return False


def test_resources_and_nodes(rt):
    total = meshrt.cluster_resources()
    assert total["CPU"] == 2 and type(total["CPU"]) is float  # (as Ray: {"CPU": 2.0, ...})
    assert meshrt.available_resources()["CPU"] == 2
    nodes = meshrt.nodes()
    assert len(nodes) == 1 and nodes[0]["Alive"] and nodes[0]["Resources"]["CPU"] == 2
    assert meshrt.is_initialized()


def test_objects_are_freed_when_refs_go(rt):
    from meshrt._private import state

    table = state.core().table.entries
    before = len(table)
    refs = [meshrt.put(np.zeros(1000)) for _ in range(50)]
    assert len(table) >= before + 50
    del refs
    assert wait_until(lambda: len(table) <= before, timeout=5)


def test_borrowed_ref_outlives_owner_handle(rt):
    @meshrt.remote
    class Keeper:
        def keep(self, box):
            self.ref = box[0]
            return True

        def read(self):
            return meshrt.get(self.ref)

    k = Keeper.remote()
    ref = meshrt.put("kept value")
    assert meshrt.get(k.keep.remote([ref]))
    del ref  # the actor still borrows it
    assert meshrt.get(k.read.remote()) == "kept value"


def test_current_actor_handle_reaches_the_same_actor(rt):
    @meshrt.remote
    class Selfish:
        def __init__(self):
            self.calls = 0

        def me(self):
            return meshrt.get_runtime_context().current_actor

        def bump(self):
            self.calls += 1
            return self.calls

    s = Selfish.remote()
    handle = meshrt.get(s.me.remote())
    assert handle == s
    assert meshrt.get(handle.bump.remote()) == 1
    assert meshrt.get(s.bump.remote()) == 2
    with pytest.raises(RuntimeError, match="inside an actor"):
        _ = meshrt.get_runtime_context().current_actor


def test_value_owned_by_a_dead_worker_raises_owner_died(rt):
    import os
    import signal

    @meshrt.remote
    def make():
        return os.getpid(), [meshrt.put("owned by this worker")]

    pid, (inner,) = meshrt.get(make.remote())
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(meshrt.exceptions.ObjectLostError):
        # the worker may still be answering while it dies; give it a moment to go
        wait_until(lambda: not _alive(pid), timeout=10)
        meshrt.get(inner, timeout=30)


def _alive(pid):
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_owner_frees_value_after_borrower_lets_go(rt):
    from meshrt._private import state

    @meshrt.remote
    class Holder:
        def hold(self, box):
            self.box = box
            return True

        def drop(self):
            self.box = None
            return True

    table = state.core().table.entries
    h = Holder.remote()
    ref = meshrt.put("borrowed")
    oid = ref._id
    assert meshrt.get(h.hold.remote([ref]))
    del ref
    assert oid in table  # the actor still borrows it
    assert meshrt.get(h.drop.remote())
    assert wait_until(lambda: oid not in table, timeout=5)

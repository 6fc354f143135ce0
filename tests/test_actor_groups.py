"""Ray's concurrency groups: each group of an actor's methods has its own limit."""

from __future__ import annotations

import asyncio
import threading

import pytest

import meshrt
from tests.helpers import gate


@meshrt.remote(concurrency_groups={"io": 2, "compute": 1})
class Threaded:
    @meshrt.method(concurrency_group="io")
    def io(self, g):
        return meshrt.get(g.wait.remote())

    @meshrt.method(concurrency_group="compute")
    def compute(self):
        return threading.current_thread().name

    def default(self):
        return threading.current_thread().name


@meshrt.remote(concurrency_groups={"io": 2})
class Async:
    def __init__(self):
        self.running = 0
        self.peak = 0

    @meshrt.method(concurrency_group="io")
    async def io(self, g):
        self.running += 1
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(0)
        done = await g.wait.remote()
        self.running -= 1
        return done

    async def peak_seen(self):
        return self.peak

    @meshrt.method(concurrency_group="io")
    def blocking_io(self, g):  # (a plain method of a group: on its group's loop thread, as in Ray)
        return meshrt.get(g.wait.remote())

    def default_thread(self):
        return threading.current_thread().name


def test_a_busy_group_leaves_the_others_serving(rt):
    g = gate()
    actor = Threaded.remote()
    blocked = [actor.io.remote(g) for _ in range(3)]  # (two run, one waits in its group)
    assert meshrt.get(actor.compute.remote(), timeout=30).startswith("meshrt-compute")
    assert meshrt.get(actor.default.remote(), timeout=30).startswith("meshrt-actor")
    meshrt.get(g.open.remote())
    assert meshrt.get(blocked, timeout=30) == [True] * 3


def test_an_async_group_limits_its_running_calls(rt):
    g = gate()
    actor = Async.remote()
    calls = [actor.io.remote(g) for _ in range(4)]
    assert meshrt.get(actor.peak_seen.remote(), timeout=30) <= 2  # (the others answer meanwhile)
    meshrt.get(g.open.remote())
    assert meshrt.get(calls, timeout=30) == [True] * 4
    assert meshrt.get(actor.peak_seen.remote()) == 2


def test_groups_are_checked_where_they_are_named(rt):
    @meshrt.remote
    class Undefined:
        @meshrt.method(concurrency_group="nope")
        def f(self):
            return 1

    with pytest.raises(ValueError, match="concurrency group 'nope', which the actor does not define"):
        Undefined.remote()
    assert meshrt.get(Undefined.options(concurrency_groups={"nope": 1}).remote().f.remote()) == 1
    with pytest.raises(ValueError, match=r"concurrency_groups\['io'\] must be an int >= 1"):
        Threaded.options(concurrency_groups={"io": 0})
    with pytest.raises(ValueError, match=r"options\(concurrency_group='nope'\): the actor defines no such group "
                                         r"\(it defines 'io', 'compute'\)"):
        Threaded.remote().compute.options(concurrency_group="nope")


def test_a_group_chosen_per_call(rt):
    """``.options(concurrency_group=)`` runs that call in another group than its method's,
    as in Ray: a compute method sent to the io threads, a default one to compute."""
    actor = Threaded.remote()
    assert meshrt.get(actor.compute.options(concurrency_group="io").remote(), timeout=30).startswith("meshrt-io")
    assert meshrt.get(actor.default.options(concurrency_group="compute").remote(), timeout=30).startswith(
        "meshrt-compute")
    assert meshrt.get(actor.compute.remote(), timeout=30).startswith("meshrt-compute")  # (the method's own again)
    g = gate()
    actor = Async.remote()
    calls = [actor.io.options(concurrency_group="io").remote(g) for _ in range(3)]
    assert meshrt.get(actor.peak_seen.remote(), timeout=30) <= 2
    meshrt.get(g.open.remote())
    assert meshrt.get(calls, timeout=30) == [True] * 3


def test_an_async_actor_s_plain_method_of_a_group_leaves_its_loop_serving(rt):
    g = gate()
    actor = Async.remote()
    blocked = actor.blocking_io.remote(g)
    assert meshrt.get(actor.peak_seen.remote(), timeout=30) == 0  # (the loop answers meanwhile)
    assert meshrt.get(actor.default_thread.remote(), timeout=30) == "MainThread"  # (the default group's: the loop)
    meshrt.get(g.open.remote())
    assert meshrt.get(blocked, timeout=30) is True


@meshrt.remote(concurrency_groups={"io": 2, "compute": 1})
class Loops:
    """Where each group's calls run: as in Ray, a loop (and thread) per group."""

    def __init__(self):
        self.init_loop = id(asyncio.get_event_loop())
        self.release = threading.Event()

    @meshrt.method(concurrency_group="io")
    async def io_a(self):
        return id(asyncio.get_running_loop()), threading.current_thread().name

    @meshrt.method(concurrency_group="io")
    async def io_b(self):
        return id(asyncio.get_running_loop()), threading.current_thread().name

    @meshrt.method(concurrency_group="io")
    def io_plain(self):
        return id(asyncio.get_event_loop()), threading.current_thread().name

    @meshrt.method(concurrency_group="compute")
    async def compute(self):
        return id(asyncio.get_running_loop()), threading.current_thread().name

    async def default(self):
        return id(asyncio.get_running_loop()), self.init_loop

    @meshrt.method(concurrency_group="compute")
    async def block(self):  # (blocks its loop, not awaiting: only its group waits)
        return self.release.wait(timeout=60)

    @meshrt.method(concurrency_group="io")
    async def unblock(self):
        self.release.set()

    @meshrt.method(concurrency_group="compute")
    async def forever(self):
        await asyncio.Event().wait()

    async def block_default(self):  # (blocks the actor's own loop)
        return self.release.wait(timeout=60)

    @meshrt.method(concurrency_group="io")
    async def block_io(self):
        return self.release.wait(timeout=60)

    async def unblock_default(self):
        self.release.set()

    @meshrt.method(concurrency_group="io")
    def io_waits_for(self, group):
        me = meshrt.get_runtime_context().current_actor
        return meshrt.get(me.io_a.options(concurrency_group=group).remote(), timeout=30)[1]


def test_each_group_of_an_async_actor_runs_on_a_loop_of_its_own(rt):
    actor = Loops.remote()
    (io_a, io_thread), (io_b, _), (plain, plain_thread), (compute, compute_thread), (default, init) = meshrt.get(
        [actor.io_a.remote(), actor.io_b.remote(), actor.io_plain.remote(), actor.compute.remote(),
         actor.default.remote()], timeout=30)
    assert io_a == io_b == plain and io_thread == plain_thread == "meshrt-group-io"
    assert compute_thread == "meshrt-group-compute" and compute not in (io_a, default)
    assert default == init  # (the default group: the loop the actor was built on)


def test_a_group_whose_loop_is_blocked_holds_up_only_itself(rt):
    actor = Loops.remote()
    blocked = actor.block.remote()
    waiting = actor.compute.remote()  # (behind it, in its group)
    assert meshrt.get(actor.default.remote(), timeout=30)
    assert meshrt.get(actor.io_a.remote(), timeout=30)[1] == "meshrt-group-io"
    assert meshrt.wait([waiting], timeout=0.2)[0] == []
    meshrt.get(actor.unblock.remote(), timeout=30)
    assert meshrt.get(blocked, timeout=30) is True
    assert meshrt.get(waiting, timeout=30)[1] == "meshrt-group-compute"


def test_a_call_cancelled_on_its_group_s_loop_frees_the_group(rt):
    actor = Loops.remote()
    stuck = actor.forever.remote()
    behind = actor.compute.remote()  # (the group runs one call at a time)
    meshrt.cancel(stuck)
    with pytest.raises(meshrt.exceptions.TaskCancelledError):
        meshrt.get(stuck, timeout=30)
    assert meshrt.get(behind, timeout=30)[1] == "meshrt-group-compute"


def test_a_blocked_actor_loop_holds_up_no_group(rt):
    actor = Loops.remote()
    blocked = actor.block_default.remote()
    assert meshrt.get(actor.io_a.remote(), timeout=30)[1] == "meshrt-group-io"  # (straight to its loop)
    meshrt.get(actor.unblock.remote(), timeout=30)
    assert meshrt.get(blocked, timeout=30) is True


def test_a_call_cancelled_before_its_group_s_loop_took_it_is_answered(rt):
    actor = Loops.remote()
    assert meshrt.get(actor.io_a.remote(), timeout=30)
    blocked = actor.block_io.remote()  # (holds the io loop: the next io call waits to start there)
    victim = actor.io_b.remote()
    meshrt.cancel(victim)
    meshrt.get(actor.unblock_default.remote(), timeout=30)
    assert meshrt.get(blocked, timeout=30) is True
    with pytest.raises(meshrt.exceptions.TaskCancelledError):
        meshrt.get(victim, timeout=30)


def test_a_call_s_own_group_decides_whether_waiting_on_it_deadlocks(rt):
    actor = Loops.remote()
    assert meshrt.get(actor.io_waits_for.remote("compute"), timeout=30) == "meshrt-group-compute"
    with pytest.raises(RuntimeError, match="would wait forever"):
        meshrt.get(actor.io_waits_for.remote("io"), timeout=30)

"""this_proc() in the driver: mesh actors hosted in the driver's own process (as in
Monarch), called from the driver and from workers."""

from __future__ import annotations

import os
import threading

import pytest
import torch

import meshrt
import meshrt.actor
from meshrt import Actor, endpoint, this_host, this_proc

from .helpers import wait_until

SEEN_IN_DRIVER: list = []  # a driver global: actors hosted here write to it directly
CLEANED_UP = threading.Event()
RAN: list = []
RELEASE = threading.Event()


class DriverSide(Actor):
    def __init__(self, tag):
        self.tag = tag

    @endpoint
    def where(self):
        SEEN_IN_DRIVER.append(self.tag)
        # The class is the driver's own (not a copy rebuilt from its code).
        return os.getpid(), type(self) is DriverSide, threading.current_thread() is threading.main_thread()

    @endpoint
    async def awhere(self):
        return os.getpid()

    @endpoint
    def echo(self, x):
        return x

    @endpoint
    def total(self, t):
        return float(t.sum())

    @endpoint
    def fail(self):
        raise KeyError("no such thing")

    @endpoint
    async def sibling_pid(self):
        sib = this_proc().spawn("sibling", DriverSide, "sib")
        return await sib.awhere.call_one()

    @endpoint
    def ask_async_of(self, other):
        return other.awhere.call_one().get(timeout=30)

    @endpoint
    def spawns_and_waits(self):
        return this_proc().spawn("loop", DriverSide, "x").where.call_one().get(timeout=30)

    @endpoint
    def ask_plain_of(self, other):
        return other.where.call_one().get(timeout=30)

    @endpoint
    def hold(self):
        RAN.append("held")
        RELEASE.wait(30)

    @endpoint
    def record(self, what):
        RAN.append(what)

    @endpoint
    def leave(self):
        meshrt.actor.exit_actor()

    def __cleanup__(self):
        CLEANED_UP.set()


class CallsBack(Actor):
    @endpoint
    def call(self, mesh):
        pid = mesh.awhere.call_one().get(timeout=30)
        t = torch.ones(1 << 20)  # 4 MiB: through the store, both ways
        back = mesh.echo.call_one(t).get(timeout=30)
        return pid, mesh.total.call_one(t).get(timeout=30), torch.equal(back, t), os.getpid()


async def test_actors_on_this_proc_run_in_the_driver(rt):
    SEEN_IN_DRIVER.clear()
    here = this_proc()
    assert here.extent == {} and this_proc().spawn  # the same process every time
    mesh = here.spawn("d", DriverSide, "first")
    pid, own_class, on_main = await mesh.where.call_one()
    assert (pid, own_class, on_main) == (os.getpid(), True, False)  # (never on the user's thread)
    assert SEEN_IN_DRIVER == ["first"]
    assert await mesh.awhere.call_one() == os.getpid()
    values = await mesh.echo.call(5)
    assert list(values.values()) == [5]
    assert await mesh.echo.choose(6) == 6
    assert [await f for f in mesh.echo.stream(7)] == [7]
    mesh.where.broadcast()
    assert (await mesh.echo.call_one(8)) == 8  # (FIFO: after the broadcast)
    assert SEEN_IN_DRIVER == ["first", "first"]
    big = torch.arange(1 << 21, dtype=torch.float32)
    assert torch.equal(await mesh.echo.call_one(big), big)
    with pytest.raises(meshrt.ActorError, match=r"d\.fail at Point"):
        await mesh.fail.call_one()


def test_workers_call_an_actor_in_the_driver(rt):
    driver_side = this_proc().spawn("d", DriverSide, "x")
    callers = this_host().spawn_procs(per_host={"gpus": 2}).spawn("c", CallsBack)
    for pid, total, same, caller_pid in callers.call.call(driver_side).get(timeout=60).values():
        assert (pid, total, same) == (os.getpid(), float(1 << 20), True)
        assert caller_pid != os.getpid()


def test_an_actor_in_the_driver_spawns_siblings_and_never_waits_on_itself(rt):
    mesh = this_proc().spawn("d", DriverSide, "x")
    assert mesh.sibling_pid.call_one().get(timeout=30) == os.getpid()
    other = this_proc().spawn("other", DriverSide, "o")
    assert mesh.ask_async_of.call_one(other).get(timeout=30) == os.getpid()  # (plain waits on async)
    # (each actor's plain endpoints have a thread of their own, as in worker processes)
    assert mesh.spawns_and_waits.call_one().get(timeout=30)[:2] == (os.getpid(), True)
    with pytest.raises(meshrt.ActorError, match="would wait forever.*`async def`"):
        mesh.ask_plain_of.call_one(mesh).get(timeout=30)


def test_stopping_actors_in_the_driver(rt):
    CLEANED_UP.clear()
    with pytest.raises(RuntimeError, match=r"driver itself.*mesh\.stop\(\)"):
        this_proc().stop()
    mesh = this_proc().spawn("d", DriverSide, "x")
    assert mesh.echo.call_one(1).get(timeout=30) == 1
    mesh.stop().get(timeout=30)
    assert CLEANED_UP.is_set()  # its __cleanup__ ran here, in the driver
    with pytest.raises(meshrt.exceptions.ActorDiedError, match="'d'"):
        mesh.echo.call_one(1).get(timeout=30)
    again = this_proc().spawn("d", DriverSide, "y")  # the name is free again
    assert again.echo.call_one(2).get(timeout=30) == 2
    with pytest.raises(meshrt.ActorError, match=r"exit_actor\(\) in an actor on the driver's this_proc.*mesh\.stop"):
        again.leave.call_one().get(timeout=30)


def test_shutdown_ends_the_driver_actor_threads_and_runs_nothing_queued():
    RAN.clear()
    RELEASE.clear()
    meshrt.init(num_cpus=1)
    mesh = this_proc().spawn("d", DriverSide, "x")
    assert mesh.echo.call_one(1).get(timeout=30) == 1
    mesh.hold.broadcast()  # busy on the plain-endpoint thread until RELEASE
    mesh.record.broadcast("queued 1")
    mesh.record.broadcast("queued 2")
    hosted = next(iter(meshrt._private.state.core().driver_actors.hosted.values()))
    lane = hosted.executor.lanes.route(mesh._key)  # (wait until both records are queued behind the held call)
    assert wait_until(lambda: lane.submitted - lane.done == 3 and RAN == ["held"], 30)
    meshrt.shutdown()
    RELEASE.set()  # (the running plain call ends; the queued ones never start)
    assert wait_until(lambda: not [t.name for t in threading.enumerate() if t.name.startswith("meshrt-driver")], 30)
    assert RAN == ["held"]


def test_this_proc_outside_a_mesh_or_the_driver_says_where_to_spawn(rt):
    @meshrt.remote
    class RayStyle:
        def try_this_proc(self):
            try:
                this_proc()
            except RuntimeError as err:
                return str(err)

    assert "spawn_procs" in meshrt.get(RayStyle.remote().try_this_proc.remote(), timeout=30)


SUPERVISED: list = []
SUPERVISED_EVENT = threading.Event()


class Failing(Actor):
    @endpoint
    def fail(self):
        raise ValueError("broadcast went wrong")


class DriverSupervisor(Actor):
    def __init__(self):
        self.kids = this_host().spawn_procs(per_host={"gpus": 1}).spawn("kids", Failing)

    @endpoint
    async def break_child(self):
        self.kids.fail.broadcast()

    async def __supervise__(self, failure):
        SUPERVISED.append((failure.report(), threading.current_thread().name))
        SUPERVISED_EVENT.set()
        return True


def test_an_actor_in_the_driver_supervises_the_meshes_it_spawned(rt, failures):
    SUPERVISED.clear()
    SUPERVISED_EVENT.clear()
    sup = this_proc().spawn("sup", DriverSupervisor)
    sup.break_child.call_one().get(timeout=30)
    assert SUPERVISED_EVENT.wait(30)
    report, thread = SUPERVISED[0]
    assert "mesh 'kids'" in report and "broadcast went wrong" in report
    assert thread.startswith("meshrt-driver-actor")  # on the supervising actor's own loop
    seen, _ = failures
    assert seen == []  # handled by the owner: not the driver's unhandled-fault hook


def test_meshes_in_local_mode_say_what_to_change():
    meshrt.init(local_mode=True)
    try:
        for make in (this_host, this_proc):
            with pytest.raises(RuntimeError, match="without local_mode"):
                make()
    finally:
        meshrt.shutdown()


class LaxSupervisor(DriverSupervisor):
    async def __supervise__(self, failure):
        return False  # not handled: up to the driver's unhandled_fault_hook


def test_a_failure_a_driver_actor_leaves_unhandled_reaches_the_drivers_hook(rt, failures):
    sup = this_proc().spawn("lax", LaxSupervisor)
    sup.break_child.call_one().get(timeout=30)
    seen, event = failures
    assert event.wait(30)  # (the driver lives on: the hook was replaced)
    assert "mesh 'kids'" in seen[0].report() and "broadcast went wrong" in seen[0].report()

"""Stopping meshes: only the mesh as spawned, in the process that spawned it, stops (as
in Monarch); a stop is never reported as a failure, and a stopped mesh says so at the
call site."""

from __future__ import annotations

import threading

import pytest

import meshrt
from meshrt import Actor, Channel, concurrent_endpoint, endpoint, this_host
from meshrt.exceptions import ActorDiedError, TaskError


class Echo(Actor):
    @endpoint
    def ping(self):
        return "pong"


class Stopper(Actor):
    @endpoint
    def stop_procs(self, procs):
        procs.stop().get(timeout=30)

    @endpoint
    def stop_actors(self, mesh):
        mesh.stop().get(timeout=30)

    @endpoint
    def call(self, mesh):
        try:
            return mesh.ping.call().get(timeout=30)
        except Exception as err:  # noqa: BLE001 - the test looks at what came back
            return err


class Spawner(Actor):
    """Spawns processes of its own, hands their actors out and stops them."""

    @endpoint
    def spawn_echoes(self):
        self.procs = this_host().spawn_procs(per_host={"gpus": 2})
        return self.procs.spawn("e", Echo)

    @endpoint
    def stop_them(self):
        self.procs.stop().get(timeout=30)


def _supervision_done() -> None:
    """Wait for any report already on its way to the fault hook."""
    for thread in threading.enumerate():
        if thread.name == "meshrt-supervision":
            thread.join(30)


def test_processes_stopped_by_the_actor_that_spawned_them_are_no_failure(rt, failures):
    spawner = this_host().spawn_procs(per_host={"one": 1}).spawn("s", Spawner)
    mesh = spawner.spawn_echoes.call_one().get(timeout=60)
    assert list(mesh.ping.call().get(timeout=30).values()) == ["pong", "pong"]
    spawner.stop_them.call_one().get(timeout=60)
    with pytest.raises(ActorDiedError, match="stopped with stop()"):
        mesh.ping.call().get(timeout=30)
    _supervision_done()
    seen, _ = failures
    assert seen == []


def test_only_the_mesh_as_spawned_stops_and_the_rest_keep_serving(rt, failures):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("e", Echo)
    with pytest.raises(ValueError, match=r"stop\(\) of a slice of process mesh .* stop\(\) of the mesh that "
                                         r"spawn_procs\(\) returned"):
        procs.slice(gpus=0).stop()
    with pytest.raises(NotImplementedError, match=r"stop\(\) of actor mesh 'e': this is a slice of it"):
        mesh.slice(gpus=0).stop()
    stopper = this_host().spawn_procs(per_host={"one": 1}).spawn("s", Stopper)
    with pytest.raises(ValueError, match="this handle is a copy passed between processes"):
        stopper.stop_procs.call_one(procs).get(timeout=60)
    with pytest.raises(NotImplementedError, match="or a copy passed between processes"):
        stopper.stop_actors.call_one(mesh).get(timeout=60)
    # nothing was stopped: both ranks answer, from here and from the actor
    assert list(mesh.slice(gpus=1).ping.call().get(timeout=30).values()) == ["pong"]
    assert list(stopper.call.call_one(mesh).get(timeout=30).values()) == ["pong", "pong"]
    mesh.stop().get(timeout=30)  # (the owner's own handle does)
    renamed = procs.spawn("e2", Echo).rename(gpus="ranks")  # (all of it, under other names: still the owner's)
    assert list(renamed.ping.call().get(timeout=30).values()) == ["pong", "pong"]
    renamed.stop().get(timeout=30)
    procs.stop().get(timeout=30)
    _supervision_done()
    seen, _ = failures
    assert seen == []


def test_a_stopped_actor_mesh_says_so_at_the_call_site(rt, failures):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("e", Echo)
    stopper = this_host().spawn_procs(per_host={"gpus": 1}).spawn("s", Stopper)
    mesh.stop().get(timeout=30)
    with pytest.raises(ActorDiedError, match="'e' is dead: it was stopped with stop"):
        mesh.ping.broadcast()  # (it reached supervision, which ended the driver)
    # from another process: meshrt's own ActorDiedError, not a TaskError with ProcHost's traceback
    err = stopper.slice(gpus=0).call.call_one(mesh).get(timeout=30)
    assert isinstance(err, ActorDiedError) and not isinstance(err, TaskError)
    assert "hosts no actor by that name" in str(err) and "ProcHost.call_sync" not in str(err)
    assert procs.spawn("e", Echo).ping.call().get(timeout=30).values()  # the name is free again
    procs.stop().get(timeout=30)
    with pytest.raises(RuntimeError, match=r"were stopped with stop\(\); start new ones"):
        procs.spawn("late", Echo)
    _supervision_done()
    seen, _ = failures
    assert seen == []


def test_a_timed_out_get_names_the_call(rt):
    @meshrt.remote
    class Gate:
        def __init__(self):
            self.event = threading.Event()

        def wait(self):
            return self.event.wait(60)

        def open(self):
            self.event.set()

    class Waits(Actor):
        @endpoint
        def wait_on(self, gate):
            return meshrt.get(gate.wait.remote())

    gate = Gate.options(max_concurrency=4).remote()
    mesh = this_host().spawn_procs(per_host={"gpus": 2}).spawn("w", Waits)
    pending = mesh.wait_on.call(gate)
    with pytest.raises(meshrt.exceptions.GetTimeoutError, match=r"w\.wait_on\(\): 2 of 2 replies not here after 0\.2 s"):
        pending.get(timeout=0.2)
    one = mesh.slice(gpus=1).wait_on.call_one(gate)
    with pytest.raises(meshrt.exceptions.GetTimeoutError, match=r"the reply from Point\(gpus=1\) not here"):
        one.get(timeout=0.2)
    gate.open.remote()
    assert list(pending.get(timeout=30).values()) == [True, True] and one.get(timeout=30) is True


class Gate(Actor):
    def __init__(self):
        import asyncio

        self.waiting = asyncio.Event()
        self.opened = asyncio.Event()

    @concurrent_endpoint  # (waits while the others run: an Actor's async endpoints otherwise take turns)
    async def wait(self):
        self.waiting.set()
        await self.opened.wait()
        return "opened"

    @concurrent_endpoint
    async def someone_waits(self):
        await self.waiting.wait()

    @endpoint
    async def open(self):
        self.opened.set()


class Holder(Actor):
    @endpoint
    def hold(self, gate):
        return gate.wait.call_one().get(timeout=60)

    @endpoint
    async def hold_async(self, gate):
        return await gate.wait.call_one()

    @endpoint
    def ping(self):
        return "pong"


async def test_stop_lets_every_actor_of_a_process_finish_the_calls_it_was_given(rt):
    # Each actor's plain endpoints run on a thread of their own: stop() (run by the
    # process itself) waits for all of them, not only for the actor it queued behind.
    gate = this_host().spawn_procs(per_host={"one": 1}).spawn("gate", Gate)
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    holder, other = procs.spawn("holder", Holder), procs.spawn("other", Holder)
    assert await other.ping.call_one() == "pong"
    held = holder.hold.call_one(gate)
    await gate.someone_waits.call_one()
    stopped = procs.stop()
    await gate.open.call_one()
    assert await held == "opened"  # (not lost to the process's exit)
    await stopped


async def test_stop_lets_running_async_endpoints_finish(rt):
    # They run on the process's loop, not on an actor's thread: stop() waited for the
    # threads only, and the process exited under a running async call.
    gate = this_host().spawn_procs(per_host={"one": 1}).spawn("gate", Gate)
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    holder = procs.spawn("holder", Holder)
    held = holder.hold_async.call_one(gate)
    await gate.someone_waits.call_one()
    stopped = procs.stop()
    await gate.open.call_one()
    assert await held == "opened"
    await stopped


def _until_stopping(started) -> bool:
    """Say it started, then run until this process is told to stop (stop() lets a running
    call finish): the calls queued behind it are then sure to start after the stop came."""
    import time

    from meshrt.mesh import proc_host

    started.send("running")
    deadline = time.monotonic() + 30
    while not any(host.stopping for host in proc_host._hosts_here):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class Lingerer(Actor):
    @endpoint
    def linger(self, started):
        return _until_stopping(started)

    @endpoint
    def ping(self):
        return "pong"


class AsyncLingerer(Actor):
    @endpoint
    async def linger(self, started):
        import asyncio

        return await asyncio.to_thread(_until_stopping, started)

    @endpoint
    async def ping(self):
        return "pong"


@pytest.mark.parametrize("cls", [Lingerer, AsyncLingerer], ids=["plain", "async"])
async def test_stop_fails_the_calls_queued_behind_a_running_one(rt, failures, cls):
    # As in Monarch: the running call finishes, the ones not started yet fail, saying so.
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    actor = procs.spawn("l", cls)
    port, started = Channel.open()
    running = actor.linger.call_one(port)
    queued = actor.ping.call_one()
    assert await started.recv() == "running"
    await procs.stop()
    assert await running is True
    with pytest.raises(ActorDiedError, match=r"stopped with stop\(\).*before this call started"):
        await queued
    _supervision_done()
    seen, _ = failures
    assert seen == []  # (stopped on purpose: no failure)


class Stuck(Actor):
    @endpoint
    def wait_for_ever(self, started):
        started.send("in")
        threading.Event().wait()  # (a sync call nothing can interrupt)


async def test_stopping_an_actor_stuck_in_a_call_gives_up_after_its_timeout(rt, caplog):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    stuck = procs.spawn("stuck", Stuck)
    port, started = Channel.open()
    call = stuck.wait_for_ever.call_one(port)
    assert await started.recv() == "in"
    await stuck.stop(timeout=0.5)  # (returns: it used to wait for ever)
    assert "stop() of actor mesh 'stuck': the actor(s) at Point(gpus=0) have not stopped 0.5 s after stop()" in caplog.text
    await procs.stop(timeout=0.5)  # (kills the process, which ends the call)
    with pytest.raises(ActorDiedError):
        await call
    with pytest.raises(ValueError, match="stop\\(timeout=...\\)"):
        stuck.stop(timeout=-1)

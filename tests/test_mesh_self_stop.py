"""An actor ending itself: ``context().actor_instance.stop()``, ``.abort()``, ``.kill()``,
as in Monarch: the running call returns, later calls fail naming the reason, an abort
reaches the spawner's supervision, and the process meshes the actor spawned end too."""

from __future__ import annotations

import asyncio

import psutil
import pytest

from meshrt import Actor, Channel, concurrent_endpoint, context, endpoint, this_host
from meshrt.exceptions import ActorDiedError

from .helpers import ended, wait_until

pytestmark = pytest.mark.timeout(120)


class Shard(Actor):
    def __init__(self, port, end_in_init=None):
        self.port = port
        self.done = 0
        self.gate = asyncio.Event()
        if end_in_init is not None:
            context().actor_instance.stop(end_in_init)

    @endpoint
    def work(self):
        self.done += 1
        return self.done

    @endpoint
    def end(self, how, reason=None):
        getattr(context().actor_instance, how)(reason)
        return "still answered"

    @endpoint
    async def end_later(self, reason):
        await self.gate.wait()
        context().actor_instance.stop(reason)
        return "ended"

    @concurrent_endpoint
    async def open_gate(self):  # (takes no turn: end_later holds it)
        self.gate.set()

    @endpoint
    async def queued(self):
        return "ran"

    @endpoint
    def myself(self):
        return context().actor_instance

    @endpoint
    def spawn_children(self):
        self.children = this_host().spawn_procs(per_host={"procs": 2})
        self.kids = self.children.spawn("kids", Kid)
        return self.kids.pid.call().get(60).values()

    def __cleanup__(self, exc):
        self.port.send((context().actor_instance.rank.rank, None if exc is None else str(exc)))


class Kid(Actor):
    @endpoint
    def pid(self):
        import os

        return os.getpid()


async def test_stop_answers_the_running_call_then_refuses_later_ones(rt, failures):
    port, cleanups = Channel.open()
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    shards = procs.spawn("shards", Shard, port)
    assert list((await shards.work.call()).values()) == [1, 1]
    assert await shards.slice(gpus=0).end.call_one("stop", "shard done") == "still answered"
    assert await cleanups.recv() == (0, None)  # __cleanup__(None): stopped on purpose
    with pytest.raises(ActorDiedError) as info:
        await shards.slice(gpus=0).work.call_one()
    message = str(info.value)
    assert "shards" in message and "gpus=0" in message and "shard done" in message and "stop()" in message
    with pytest.raises(ActorDiedError, match="shard done"):
        await asyncio.to_thread(shards.slice(gpus=0).work.call_one().get, 30)  # (the blocking path too)
    assert await shards.slice(gpus=1).work.call_one() == 2  # the other actor goes on
    # Its name is free on that process again; nothing was reported as a failure.
    again = procs.slice(gpus=0).spawn("shards", Shard, port)
    assert await again.work.call_one() == 1
    seen, _ = failures
    assert seen == []
    await procs.stop()


async def test_calls_queued_behind_the_stopping_call_fail(rt, failures):
    port, _cleanups = Channel.open()
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    shard = procs.spawn("shard", Shard, port)
    ending = shard.end_later.call_one("enough")
    queued = [shard.queued.call_one() for _ in range(3)]  # (async endpoints take turns)
    plain = shard.work.call_one()
    assert await plain == 1  # (a plain endpoint runs on its own thread meanwhile)
    await shard.open_gate.call_one()
    assert await ending == "ended"
    for call in queued:
        with pytest.raises(ActorDiedError, match="enough"):
            await call
    await procs.stop()


async def test_abort_reaches_the_unhandled_fault_hook_with_the_reason(rt, failures):
    seen, event = failures
    port, cleanups = Channel.open()
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    shards = procs.spawn("shards", Shard, port)
    assert await shards.slice(gpus=1).end.call_one("abort", "bad input") == "still answered"
    rank, error = await cleanups.recv()
    assert rank == 1 and "bad input" in error and "abort()" in error  # __cleanup__ got the failure
    assert await asyncio.to_thread(event.wait, 30)
    (failure,) = seen
    assert failure.mesh_name == "shards" and failure.rank == 1 and "bad input" in failure.report()
    assert isinstance(failure.error, ActorDiedError)
    with pytest.raises(ActorDiedError, match="bad input"):
        await shards.slice(gpus=1).work.call_one()
    assert await shards.slice(gpus=0).work.call_one() == 1
    await procs.stop()


async def test_kill_is_a_failure_too(rt, failures):
    seen, event = failures
    port, _cleanups = Channel.open()
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    shard = procs.spawn("shard", Shard, port)
    await shard.end.call_one("kill")
    assert await asyncio.to_thread(event.wait, 30)
    assert "kill()" in seen[0].report() and "no reason given" in seen[0].report()
    await procs.stop()


async def test_an_actor_that_stops_ends_the_process_meshes_it_spawned(rt, failures):
    port, _cleanups = Channel.open()
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    shard = procs.spawn("shard", Shard, port)
    pids = list(await shard.spawn_children.call_one())
    assert all(psutil.pid_exists(p) for p in pids)
    await shard.end.call_one("stop", "done")
    assert wait_until(lambda: all(ended(p) for p in pids), timeout=30)
    seen, _ = failures
    assert seen == []  # (its children stopping is no failure either)
    await procs.stop()


async def test_stopping_in_the_constructor_and_stopping_twice(rt, failures):
    port, cleanups = Channel.open()
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    shard = procs.spawn("shard", Shard, port, end_in_init="nothing to do")
    await shard.initialized
    assert await cleanups.recv() == (0, None)
    with pytest.raises(ActorDiedError, match="nothing to do"):
        await shard.work.call_one()
    other = procs.spawn("other", Shard, port)
    await other.end.call_one("stop", "first")
    with pytest.raises(ActorDiedError, match="first"):
        await other.end.call_one("abort", "second")  # (ended: no second end, no failure)
    seen, _ = failures
    assert seen == []
    await procs.stop()


async def test_ending_an_actor_from_outside_its_process_or_with_a_bad_reason(rt, failures):
    port, _cleanups = Channel.open()
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    shard = procs.spawn("shard", Shard, port)
    instance = await shard.myself.call_one()
    with pytest.raises(RuntimeError, match=r"mesh.stop\(reason\)"):
        instance.stop()
    with pytest.raises(TypeError, match="reason"):
        instance.abort(42)
    assert await shard.work.call_one() == 1
    await procs.stop()

"""A Monarch-style program: an actor ends itself with ``context().actor_instance.stop()``
or ``.abort()``; the actor that spawned it sees what it must."""

import asyncio
import time

from meshrt import Actor, Channel, context, endpoint, this_host


class Shard(Actor):
    def __init__(self, port):
        self.port = port
        self.done = 0

    @endpoint
    def work(self):
        self.done += 1
        return self.done

    @endpoint
    def finish(self, how, reason):
        getattr(context().actor_instance, how)(reason)
        return f"{how} asked"

    def __cleanup__(self, exc):
        self.port.send((context().actor_instance.rank.rank, None if exc is None else str(exc)))


class Owner(Actor):
    def __init__(self):
        self.failures = []
        self.procs = None
        self.shards = None
        self.port, self.cleanups = Channel.open()

    def __supervise__(self, failure):
        self.failures.append(str(failure))
        return True  # handled: nothing travels further up

    @endpoint
    async def start(self):
        self.procs = this_host().spawn_procs(per_host={"gpus": 2})
        self.shards = self.procs.spawn("shards", Shard, self.port)
        return list((await self.shards.work.call()).values())

    @endpoint
    async def end_one(self, how, reason):
        said = await self.shards.slice(gpus=0).finish.call_one(how, reason)
        return said, await self.cleanups.recv()

    @endpoint
    async def work_on(self, gpu):
        try:
            return await self.shards.slice(gpus=gpu).work.call_one()
        except Exception as err:  # noqa: BLE001 - which error a caller gets
            return type(err).__name__

    @endpoint
    async def seen(self):
        return list(self.failures)

    @endpoint
    async def stop_all(self):
        await self.procs.stop()


async def _until(probe, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = await probe()
        if got:
            return got
        await asyncio.sleep(0.05)  # (polling a remote actor's state: no event to wait on here)
    raise AssertionError("timed out")


async def test_an_actor_that_stops_itself_answers_cleans_up_and_takes_no_more_calls():
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    owner = procs.spawn("owner", Owner)
    assert await owner.start.call_one() == [1, 1]
    said, cleaned = await owner.end_one.call_one("stop", "shard done")
    assert said == "stop asked"
    assert cleaned == (0, None)  # __cleanup__ ran, told it stopped on purpose
    # (no call to the stopped shard here: Monarch fails its sender on such a call; meshrt's
    # caller gets ActorDiedError, see tests/test_mesh_self_stop.py)
    assert await owner.work_on.call_one(1) == 2  # the other shard goes on
    assert await owner.seen.call_one() == []  # stopping is no failure
    await owner.stop_all.call_one()
    await procs.stop()


async def test_an_actor_that_aborts_reaches_its_owners_supervise_with_the_reason():
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    owner = procs.spawn("owner", Owner)
    assert await owner.start.call_one() == [1, 1]
    said, cleaned = await owner.end_one.call_one("abort", "bad shard")
    assert said == "abort asked"
    assert cleaned[0] == 0 and "bad shard" in cleaned[1]  # __cleanup__ got the failure
    reports = await _until(lambda: owner.seen.call_one())
    assert "bad shard" in reports[0]
    assert await owner.work_on.call_one(1) == 2
    await owner.stop_all.call_one()
    await procs.stop()

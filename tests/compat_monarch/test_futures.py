"""A Monarch-style program: futures, errors, extents and controllers."""

import asyncio

import pytest

from meshrt import Actor, ActorError, Channel, endpoint, get_or_spawn_controller, this_host


class Slow(Actor):
    @endpoint
    async def nap(self, seconds):
        await asyncio.sleep(seconds)
        return "awake"

    @endpoint
    async def bad_key(self):
        return {}["missing"]


class Registry(Actor):
    def __init__(self):
        self.names = []

    @endpoint
    async def add(self, name):
        self.names.append(name)
        return len(self.names)


def test_get_with_a_timeout_raises_timeout_error():
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    slow = procs.spawn("slow", Slow)
    with pytest.raises(TimeoutError):
        slow.nap.call_one(2.0).get(timeout=0.1)
    with pytest.raises(ValueError):  # (a timeout that is no time to wait: said, not waited for)
        slow.nap.call_one(0.0).get(timeout=-1)
    assert slow.nap.call_one(0.0).get(timeout=60) == "awake"
    procs.stop().get()


async def test_actor_error_keeps_the_original_exception():
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    slow = procs.spawn("slow", Slow)
    with pytest.raises(ActorError) as info:
        await slow.bad_key.call_one()
    assert isinstance(info.value.exception, KeyError)
    await procs.stop()


async def test_extents_sizes_and_initialized():
    procs = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 3})
    slow = procs.spawn("slow", Slow)
    await slow.initialized
    extent = slow.extent
    assert list(extent.labels) == ["hosts", "gpus"] and list(extent.sizes) == [2, 3]
    assert extent.nelements == 6 and len(slow) == 6
    assert slow.sizes == {"hosts": 2, "gpus": 3}
    values = await slow.nap.call(0)
    assert len(values) == 6
    await procs.stop()


async def test_a_controller_is_one_actor_for_everyone():
    first = await get_or_spawn_controller("registry", Registry)
    again = await get_or_spawn_controller("registry", Registry)
    assert await first.add.call_one("a") == 1
    assert await again.add.call_one("b") == 2  # (the same actor)


async def test_the_driver_sends_to_its_own_port():
    port, receiver = Channel.open()
    port.send("hello")
    port.send("again")
    assert [await receiver.recv(), await receiver.recv()] == ["hello", "again"]

"""A Monarch-style program: streams in arrival order, tensors, keyword arguments,
controllers asked from inside actors."""

import asyncio

import torch

from meshrt import Actor, Channel, current_rank, endpoint, get_or_spawn_controller, this_host


class Sleeper(Actor):
    @endpoint
    async def after(self, unit):
        rank = current_rank().rank
        await asyncio.sleep(unit * (2 - rank))  # (rank 2 answers first, rank 0 last)
        return rank

    @endpoint
    async def scale(self, t, *, by=1.0):
        return t * by


class Counter(Actor):
    def __init__(self):
        self.n = 0

    @endpoint
    async def bump(self):
        self.n += 1
        return self.n


class Asker(Actor):
    @endpoint
    async def bump_shared(self):
        counter = await get_or_spawn_controller("shared_counter", Counter)
        return await counter.bump.call_one()


async def test_stream_yields_in_arrival_order():
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    sleepers = procs.spawn("sleepers", Sleeper)
    assert [await fut for fut in sleepers.after.stream(0.3)] == [2, 1, 0]
    await procs.stop()


async def test_tensors_and_keyword_arguments():
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    sleepers = procs.spawn("sleepers", Sleeper)
    t = torch.arange(1 << 18, dtype=torch.float32)  # 1 MiB
    doubled = await sleepers.scale.call(t, by=2.0)
    assert all(torch.equal(v, t * 2) for v in doubled.values())
    await procs.stop()


async def test_a_controller_is_shared_by_actors():
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    askers = procs.spawn("askers", Asker)
    assert sorted((await askers.bump_shared.call()).values()) == [1, 2]
    await procs.stop()


def test_a_once_port_and_a_receive_timeout():
    port, receiver = Channel.open(once=True)
    port.send("only")
    assert receiver.recv().get(timeout=60) == "only"
    _, silent = Channel.open()
    try:
        silent.recv().get(timeout=0.2)
    except TimeoutError:
        pass
    else:
        raise AssertionError("recv() with nothing sent returned")

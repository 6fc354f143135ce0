"""A Monarch-style program: spawn, the adverbs, ranks and errors.

Written against meshrt's Monarch names; run_against_monarch.sh runs it against
Monarch itself (only the imports change)."""

import asyncio

import pytest

from meshrt import Actor, ActorError, context, current_rank, current_size, endpoint, this_host


class Counter(Actor):
    def __init__(self, start):
        self.value = start

    @endpoint
    def incr(self, by=1):
        self.value += by

    @endpoint
    def get(self):
        return self.value

    @endpoint
    def where(self):
        return current_rank().rank, current_size(), context().actor_instance.rank.rank

    @endpoint
    def fail(self):
        raise ValueError("counter broke")


class Doubler(Actor):  # (Monarch takes a class's endpoints all sync or all async)
    @endpoint
    async def slow_double(self, x):
        await asyncio.sleep(0.01)
        return 2 * x


async def test_call_gathers_a_value_mesh():
    procs = this_host().spawn_procs(per_host={"gpus": 4})
    counters = procs.spawn("counters", Counter, 10)
    values = await counters.get.call()
    assert list(values.values()) == [10, 10, 10, 10]
    assert [point["gpus"] for point, _ in values.items()] == [0, 1, 2, 3]
    assert values.item(gpus=2) == 10
    await procs.stop()


async def test_call_one_choose_and_broadcast():
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    counters = procs.spawn("counters", Counter, 0)
    counters.incr.broadcast(5)
    await counters.slice(gpus=1).incr.call_one(2)
    assert list((await counters.get.call()).values()) == [5, 7]
    assert await counters.get.choose() in (5, 7)
    with pytest.raises(Exception):  # noqa: B017 - (call_one on two actors is refused)
        await counters.get.call_one()
    await procs.stop()


async def test_ranks_follow_the_addressed_slice():
    procs = this_host().spawn_procs(per_host={"gpus": 4})
    counters = procs.spawn("counters", Counter, 0)
    rank, size, own = await counters.slice(gpus=3).where.call_one()
    assert (rank, size, own) == (0, {}, 3)
    part = await counters.slice(gpus=slice(2, 4)).where.call()
    assert [v for v in part.values()] == [(0, {"gpus": 2}, 2), (1, {"gpus": 2}, 3)]
    await procs.stop()


async def test_stream_yields_every_reply():
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    doublers = procs.spawn("doublers", Doubler)
    got = [await fut for fut in doublers.slow_double.stream(21)]
    assert got == [42, 42, 42]
    await procs.stop()


async def test_an_endpoint_error_is_an_actor_error():
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    counters = procs.spawn("counters", Counter, 0)
    with pytest.raises(ActorError, match="counter broke"):
        await counters.fail.call_one()
    assert await counters.get.call_one() == 0  # (the actor keeps serving)
    await procs.stop()


def test_blocking_get_outside_async_code():
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    counters = procs.spawn("counters", Counter, 3)
    assert list(counters.get.call().get().values()) == [3, 3]
    assert counters.slice(gpus=0).get.call_one().get(timeout=60) == 3
    procs.stop().get()


class Account(Actor):  # (async endpoints of one actor run one at a time, in arrival order)
    def __init__(self):
        self.balance = 0
        self.log = []

    @endpoint
    async def deposit(self, amount):
        before = self.balance
        await asyncio.sleep(0.01)  # (another call may not run meanwhile)
        self.balance = before + amount
        self.log.append(amount)
        return self.balance

    @endpoint
    async def history(self):
        return list(self.log)


async def test_async_endpoints_of_one_actor_take_turns():
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    account = procs.spawn("account", Account)
    balances = await asyncio.gather(*[account.deposit.call_one(n) for n in (1, 2, 3, 4, 5)])
    assert balances == [1, 3, 6, 10, 15]
    assert await account.history.call_one() == [1, 2, 3, 4, 5]
    await procs.stop()

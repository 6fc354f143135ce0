"""A Monarch-style program: ports, send, as_endpoint, accumulators, concurrent endpoints."""

import asyncio

from meshrt import (
    Accumulator,
    Actor,
    Channel,
    as_endpoint,
    concurrent_endpoint,
    current_rank,
    endpoint,
    send,
    this_host,
)


class Reporter(Actor):
    @endpoint
    def report_to(self, port, tag):
        port.send((tag, current_rank().rank))

    @endpoint(explicit_response_port=True)
    def answer(self, port, x):
        port.send(x + current_rank().rank)

    @endpoint
    def square(self, x):
        return x * x

    def plain_add(self, x, y):
        return x + y


async def test_an_actor_sends_to_a_port():
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    reporters = procs.spawn("reporters", Reporter)
    port, receiver = Channel.open()
    await reporters.report_to.call(port, "t")
    assert sorted([await receiver.recv(), await receiver.recv()]) == [("t", 0), ("t", 1)]
    await procs.stop()


async def test_an_explicit_response_port_answers_the_call():
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    reporters = procs.spawn("reporters", Reporter)
    assert list((await reporters.answer.call(10)).values()) == [10, 11]
    await procs.stop()


async def test_send_to_a_port():
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    reporters = procs.spawn("reporters", Reporter)
    port, receiver = Channel.open()
    send(reporters.square, (3,), {}, port=port)
    assert [await receiver.recv() for _ in range(3)] == [9, 9, 9]
    await procs.stop()


async def test_as_endpoint_calls_a_plain_method():
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    reporters = procs.spawn("reporters", Reporter)
    assert list((await as_endpoint(reporters.plain_add).call(2, 3)).values()) == [5, 5]
    await procs.stop()


async def test_an_accumulator_folds_the_replies():
    procs = this_host().spawn_procs(per_host={"gpus": 4})
    reporters = procs.spawn("reporters", Reporter)
    total = Accumulator(reporters.square, 0, lambda acc, x: acc + x)
    assert await total.accumulate(2) == 16
    await procs.stop()


class Gate(Actor):
    def __init__(self):
        self.opened = asyncio.Event()

    @concurrent_endpoint
    async def wait_open(self):
        await self.opened.wait()
        return "through"

    @endpoint
    async def open(self):
        self.opened.set()


async def test_a_concurrent_endpoint_lets_the_next_call_run():
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    gate = procs.spawn("gate", Gate)
    waiting = asyncio.ensure_future(gate.wait_open.call_one())
    await gate.open.call_one()  # (runs while wait_open waits)
    assert await asyncio.wait_for(waiting, 60) == "through"
    await procs.stop()

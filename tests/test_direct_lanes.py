"""Direct lanes: the driver's calls to a mesh actor's plain endpoints go straight to the
thread that runs them (meshrt/_private/direct_lanes.py). They must still arrive in
order with everything else, never be lost when the lane or process ends, and leave
no descriptor behind (the no_leaks fixture counts the driver's sockets)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

import meshrt
from meshrt import Actor, endpoint, this_host
from meshrt._private import state
from meshrt.exceptions import ActorDiedError

from .helpers import wait_until

# (the tests that look at the path taken need the lanes: the kernel may refuse pidfd_getfd)
needs_lanes = pytest.mark.skipif(os.environ.get("MESHRT_DIRECT_LANES") == "0" or not hasattr(os, "pidfd_open"),
                                 reason="direct lanes are off here")


class Log(Actor):
    def __init__(self):
        self.seen = []

    @endpoint
    def add(self, item):
        self.seen.append(item)
        return len(self.seen)

    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def total(self, items):
        return sum(items) if not isinstance(items, (bytes, bytearray)) else len(items)

    @endpoint
    def seen_so_far(self):
        return list(self.seen)

    @endpoint
    def echo(self, x):
        return x


class AsyncLog(Actor):
    def __init__(self):
        self.seen = []

    @endpoint
    async def add(self, i):
        self.seen.append(i)

    @endpoint
    async def seen_so_far(self):
        return list(self.seen)


def _frames_to(procs_mesh, rank: int = 0) -> int:
    """Frames the driver wrote on its core connection to one process of a mesh."""
    core = state.core()
    worker = core.actor_clients[procs_mesh._procs[rank]._actor_id].worker_id
    return core.worker_conns[worker].frames_out, worker


def _wait_for_lane(mesh, rank: int = 0) -> int:
    """The driver has taken the lane the mesh's actor offered (its first call made it)."""
    core = state.core()
    worker = core.actor_clients[mesh._procs[rank]._actor_id].worker_id
    assert wait_until(lambda: core.direct_lanes.has(worker, mesh._key), 10)
    return worker


@needs_lanes
async def test_plain_endpoint_calls_skip_the_core_connection(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    log = procs.spawn("log", Log)
    one = log.slice(gpus=0)
    assert await one.add.call_one(0) == 1  # (the first call makes the lane; it offers its socket)
    await log.seen_so_far.call()
    _wait_for_lane(log)
    before, worker = _frames_to(log)
    for i in range(1, 101):
        assert await one.add.call_one(i) == i + 1
    after, _ = _frames_to(log)
    assert after - before < 10, "the calls went through the core connection"
    assert await one.seen_so_far.call_one() == list(range(101))
    assert list((await log.add.call(7)).values()) == [102, 1]
    await procs.stop()


@needs_lanes
async def test_large_bytes_lent_to_the_lane_come_back_intact(rt, monkeypatch):
    """A large bytes argument is lent (loans.py), and the loan travels the lane."""
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    log = procs.spawn("log", Log)
    await log.add.call_one(0)
    worker = _wait_for_lane(log)
    core = state.core()
    lanes = core.direct_lanes
    conn, _ = core.direct_conn(worker)
    sent = []
    send = type(lanes).send
    monkeypatch.setattr(type(lanes), "send", lambda self, *a: sent.append(send(self, *a)) or sent[-1])
    for size in (1 << 20, 8 << 20, 3 << 20):
        # (a call takes the lane only when nothing sent before is still queued on the core
        # connection, such as the end of the last reply's loan: it would be overtaken)
        blob = os.urandom(size)
        assert wait_until(lambda: conn.frames_sent_if_idle() is not None and core.io.caught_up(), 10)
        assert await log.echo.call_one(blob) == blob
    assert sent == [True, True, True]
    await procs.stop()


async def test_calls_keep_their_order_across_every_path(rt):
    """Direct calls, calls queued behind others, refs and large arguments (which take
    the core connection) and a broadcast interleave in the order they were made."""
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    log = procs.spawn("log", Log)
    expected = []
    futures = []
    big = os.urandom(256 << 10)
    ref = meshrt.put(41)
    for i in range(60):
        if i % 7 == 3:
            futures.append(log.add.call_one(big))
            expected.append(big)
        elif i % 11 == 5:
            futures.append(log.add.call_one(ref))
            expected.append(41)
        elif i % 13 == 8:
            log.add.broadcast(i)
            expected.append(i)
        else:
            futures.append(log.add.call_one(i))
            expected.append(i)
        if i % 4 == 0:
            await futures[-1]  # (nothing in flight: the next call may go direct)
    await asyncio.gather(*futures)
    seen = await log.seen_so_far.call_one()
    seen = [await x if isinstance(x, meshrt.ObjectRef) else x for x in seen]  # (a ref travels as a ref)
    assert seen == expected
    await procs.stop()


async def test_a_stopped_actor_s_lane_refuses_later_calls_and_a_new_one_gets_its_own(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    log = procs.spawn("log", Log)
    for i in range(5):
        await log.add.call_one(i)
    await log.stop()
    with pytest.raises(ActorDiedError, match="stop"):
        await log.add.call_one(5)
    again = procs.spawn("log", Log)
    for i in range(20):
        assert await again.add.call_one(i) == i + 1
    await procs.stop()


async def test_a_call_racing_with_stop_is_answered_or_failed_never_lost(rt):
    for _ in range(5):
        procs = this_host().spawn_procs(per_host={"gpus": 2})
        log = procs.spawn("log", Log)
        await log.add.call(0)
        calls = [log.slice(gpus=1).add.call_one(1)]
        stop = procs.stop()
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert results[0] == 2 or isinstance(results[0], ActorDiedError)
        await stop


@needs_lanes
async def test_a_killed_process_fails_its_calls_and_its_lane_is_closed(rt, failures):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    log = procs.spawn("log", Log)
    pids = list((await log.pid.call()).values())
    worker = _wait_for_lane(log)
    os.kill(pids[0], signal.SIGKILL)
    with pytest.raises(ActorDiedError):
        for _ in range(1000):  # (until the death is known: calls fail, never hang)
            await log.slice(gpus=0).add.call_one(1).as_asyncio()
    assert not state.core().direct_lanes.has(worker, log._key)
    assert await log.slice(gpus=1).add.call_one(3) == 1  # the other process still serves
    seen, event = failures
    assert await asyncio.to_thread(event.wait, 30) and [f.rank for f in seen] == [0]  # (and its owner heard)
    await procs.stop()


async def test_async_endpoints_and_plain_ones_of_several_actors_in_one_process(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    a, b = procs.spawn("a", Log), procs.spawn("b", Log)
    c = procs.spawn("c", AsyncLog)
    for i in range(30):
        await a.add.call_one(i)
        await b.add.call_one(-i)
        await c.add.call_one(i)
    assert await a.seen_so_far.call_one() == list(range(30))
    assert await b.seen_so_far.call_one() == [-i for i in range(30)]
    assert await c.seen_so_far.call_one() == list(range(30))
    await procs.stop()


def test_blocking_calls_from_threads_take_the_lane_too(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    log = procs.spawn("log", Log)
    for i in range(50):
        assert log.add.call_one(i).get(timeout=30) == i + 1
    assert log.total.call_one(list(range(10))).get(timeout=30) == 45
    procs.stop().get(timeout=30)

"""Actors answer the calls of a burst together, in one write per caller (executor.py
``_send_replies``, worker_core.py ``reply_all``): an async actor those that finish in
their first step, a plain actor those it ran while more were queued. Every reply must
still arrive, right, whatever else the burst holds: calls that wait, results that
carry refs, errors, cancels, and an exit_actor() in the middle."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

import meshrt
from meshrt.exceptions import ActorDiedError, TaskCancelledError, TaskError


@meshrt.remote
class Mixed:
    def __init__(self):
        self.gate = asyncio.Event()

    async def now(self, i):
        return i

    async def later(self, i):
        await self.gate.wait()
        return -i

    async def open_gate(self):
        self.gate.set()

    async def ref_of(self, i):
        return [meshrt.put(i)]

    async def fails(self, i):
        raise ValueError(f"call {i} fails")

    async def leave(self):
        meshrt.actor.exit_actor()


@meshrt.remote
class Plain:
    def now(self, i):
        return i

    def later(self, i):
        return -i

    def open_gate(self):
        pass

    def ref_of(self, i):
        return [meshrt.put(i)]

    def fails(self, i):
        raise ValueError(f"call {i} fails")

    def leave(self):
        meshrt.actor.exit_actor()


@pytest.mark.parametrize("cls", [Mixed, Plain], ids=["async", "plain"])
def test_a_burst_of_every_kind_of_call_gets_every_reply_right(rt, cls):
    actor = cls.remote()
    refs, expected = [], []
    for i in range(300):
        kind = i % 5
        if kind == 1:
            refs.append(actor.later.remote(i))
            expected.append(-i)
        elif kind == 2:
            refs.append(actor.ref_of.remote(i))
            expected.append("ref")
        elif kind == 3:
            refs.append(actor.fails.remote(i))
            expected.append(ValueError)
        else:
            refs.append(actor.now.remote(i))
            expected.append(i)
    meshrt.get(actor.open_gate.remote())
    for i, (ref, want) in enumerate(zip(refs, expected, strict=True)):
        if want is ValueError:
            with pytest.raises(TaskError, match=f"call {i} fails"):
                meshrt.get(ref, timeout=30)
        elif want == "ref":
            assert meshrt.get(meshrt.get(ref, timeout=30)[0], timeout=30) == i
        else:
            assert meshrt.get(ref, timeout=30) == want


@pytest.mark.parametrize("cls", [Mixed, Plain], ids=["async", "plain"])
def test_calls_finished_before_exit_actor_in_the_same_burst_are_answered(rt, cls):
    for _ in range(3):
        actor = cls.remote()
        meshrt.get(actor.now.remote(0))
        before = [actor.now.remote(i) for i in range(100)]
        leave = actor.leave.remote()
        after = [actor.now.remote(i) for i in range(20)]
        assert meshrt.get(before, timeout=30) == list(range(100))
        with pytest.raises(ActorDiedError, match="exit_actor"):
            meshrt.get(leave, timeout=30)
        for ref in after:  # (answered or failed, never hung)
            try:
                meshrt.get(ref, timeout=30)
            except ActorDiedError:
                pass


def test_a_call_cancelled_while_queued_in_a_burst_fails_alone(rt):
    actor = Plain.remote()
    meshrt.get(actor.now.remote(0))
    refs = [actor.now.remote(i) for i in range(200)]
    victim = refs[150]
    meshrt.cancel(victim)
    for i, ref in enumerate(refs):
        try:
            assert meshrt.get(ref, timeout=30) == i
        except TaskCancelledError:
            assert ref is victim  # (cancelled before it ran; had it run, its value came back)


@meshrt.remote
class Signal:
    def __init__(self):
        self.ready = threading.Event()

    def send(self):
        self.ready.set()

    def wait(self):
        return self.ready.wait(60)


@meshrt.remote
class Waiter:
    def quick(self, i):
        return i

    def wait_on(self, signal):
        return meshrt.get(signal.wait.remote())

    def wait_for_file(self, path):
        while not os.path.exists(path):
            time.sleep(0.01)  # (polls a file the test writes once it has the quick reply)
        return "found"


def test_a_reply_is_not_held_behind_a_call_that_blocks_in_get(rt):
    """Ray's SignalActor pattern: the caller lets the blocking call go on only once it
    has the reply of the call before it."""
    waiter, signal = Waiter.remote(), Signal.options(max_concurrency=2).remote()
    for round_ in range(5):
        for i in range(20):  # (the quick method's runs are known to be short)
            waiter.quick.remote(i)
        first = waiter.quick.remote(round_)
        blocked = waiter.wait_on.remote(signal)
        assert meshrt.get(first, timeout=30) == round_
        meshrt.get(signal.send.remote())
        assert meshrt.get(blocked, timeout=30) is True
        signal = Signal.options(max_concurrency=2).remote()


def test_a_reply_is_not_held_behind_a_call_that_blocks_outside_meshrt(rt, tmp_path):
    waiter = Waiter.remote()
    path = str(tmp_path / "go")
    burst = [waiter.quick.remote(i) for i in range(30)]
    blocked = waiter.wait_for_file.remote(path)
    assert meshrt.get(burst, timeout=30) == list(range(30))
    open(path, "w").close()
    assert meshrt.get(blocked, timeout=30) == "found"

"""Monarch's free functions and decorators: send, as_endpoint, concurrent_endpoint,
returns_future, shutdown_context (monarch.actor's names, with its meanings)."""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading

import pytest

import meshrt
from meshrt import (
    Actor,
    Channel,
    as_endpoint,
    concurrent_endpoint,
    context,
    current_rank,
    endpoint,
    returns_future,
    send,
    shutdown_context,
    this_host,
)
from meshrt.exceptions import ActorDiedError


class Worker(Actor):
    def __init__(self):
        self.seen = []
        self.gate = asyncio.Event()

    @endpoint
    def rank(self):
        return current_rank().rank

    @endpoint
    def record(self, x):
        self.seen.append(x)
        return x * 10 + current_rank().rank

    @endpoint
    def recorded(self):
        return list(self.seen)

    @endpoint
    async def fail(self, why):
        raise ValueError(why)

    @endpoint
    def crash(self):
        os._exit(5)

    @endpoint(explicit_response_port=True)
    def answer_twice(self, port, x):
        port.send(x)
        port.send(x + 1)

    def helper(self, x, y=1):  # a plain method: no @endpoint
        return (x + y, current_rank().rank)

    async def ahelper(self, x):
        await asyncio.sleep(0)
        return x * 2

    def answer_through(self, port, x):
        port.send(x * 3)

    @concurrent_endpoint
    async def wait_gate(self):
        await self.gate.wait()
        return "opened"

    @endpoint
    async def open_gate(self):
        self.gate.set()


async def test_send_with_a_port_delivers_every_actors_result(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    mesh = procs.spawn("w", Worker)
    port, receiver = Channel.open_ranked()
    assert send(mesh.record, (4,), {}, port=port) is None
    got = sorted([await receiver.recv() for _ in range(3)])
    assert got == [(0, 40), (1, 41), (2, 42)]
    # An explicit-response-port endpoint answers through the sender's port itself.
    send(mesh.slice(gpus=2).answer_twice, (7,), {}, port=port)
    assert [await receiver.recv(), await receiver.recv()] == [(0, 7), (0, 8)]
    await procs.stop()


async def test_send_without_a_port_is_fire_and_forget_in_order(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("w", Worker)
    for x in range(5):
        send(mesh.record, (x,), {})
    # (one sender's messages to an actor arrive in the order sent)
    assert list((await mesh.recorded.call()).values()) == [[0, 1, 2, 3, 4]] * 2
    await procs.stop()


async def test_send_choose_calls_one_actor(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    mesh = procs.spawn("w", Worker)
    port, receiver = Channel.open()
    for x in range(6):
        send(mesh.record, (x,), {}, port=port, selection="choose")
    values = sorted([await receiver.recv() for _ in range(6)])
    assert [v // 10 for v in values] == list(range(6))  # each went to exactly one actor
    seen = list((await mesh.recorded.call()).values())
    assert sorted(x for one in seen for x in one) == list(range(6))
    await procs.stop()


async def test_send_errors_reach_the_port(rt, failures):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("w", Worker)
    port, receiver = Channel.open()
    send(mesh.slice(gpus=1).fail, ("no good",), {}, port=port)
    with pytest.raises(ValueError, match="no good") as info:
        await receiver.recv()
    assert "w.fail" in str(info.value)  # (named as the endpoint, as a call's error is)
    assert await mesh.slice(gpus=1).rank.call_one() == 0  # (the port took it: the actor serves on)
    send(mesh.slice(gpus=0).crash, (), {}, port=port)
    with pytest.raises(ActorDiedError, match="'w'"):
        await receiver.recv()
    seen, event = failures  # the port's receiver got the error; a process that died is reported all the same
    assert await asyncio.to_thread(event.wait, 30)
    assert [(f.rank, "its process died" in f.report()) for f in seen] == [(0, True)]
    await procs.stop()


async def test_send_without_a_port_reports_failures_to_the_supervisor(rt, failures):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("w", Worker)
    seen, event = failures
    send(mesh.slice(gpus=1).fail, ("lost",), {})
    assert await asyncio.to_thread(event.wait, 30)
    assert seen[0].mesh_name == "w" and seen[0].rank == 1 and "lost" in seen[0].report()
    await procs.stop()


async def test_send_names_bad_input(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    mesh = procs.spawn("w", Worker)
    with pytest.raises(TypeError, match="args is the tuple"):
        send(mesh.record, 4, {})
    with pytest.raises(TypeError, match="kwargs is the dict"):
        send(mesh.record, (4,), None)
    with pytest.raises(ValueError, match='"all".*"choose"'):
        send(mesh.record, (4,), {}, selection="some")
    with pytest.raises(TypeError, match="Port of Channel.open"):
        send(mesh.record, (4,), {}, port="here")
    with pytest.raises(TypeError, match="as_endpoint"):
        send(mesh.helper, (1,), {})
    with pytest.raises(TypeError, match=r"record\(\.\.\.\)"):  # the endpoint's own signature, at the call site
        send(mesh.record, (1, 2), {})
    await procs.stop()


async def test_as_endpoint_calls_a_plain_method_with_every_adverb(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("w", Worker)
    helper = as_endpoint(mesh.helper)
    assert list((await helper.call(1, y=5)).values()) == [(6, 0), (6, 1)]
    assert await as_endpoint(mesh.slice(gpus=1).helper).call_one(2) == (3, 0)
    assert list((await as_endpoint(mesh.ahelper).call(4)).values()) == [8, 8]
    assert (await helper.choose(0))[0] == 1
    port, receiver = Channel.open()
    send(as_endpoint(mesh.answer_through, explicit_response_port=True), (2,), {}, port=port)
    assert [await receiver.recv(), await receiver.recv()] == [6, 6]
    assert await as_endpoint(mesh.slice(gpus=0).answer_through, explicit_response_port=True).call_one(5) == 15
    with pytest.raises(TypeError, match=r"helper\(\.\.\.\)"):
        helper.call()  # (checked against the method's signature)
    await procs.stop()


async def test_a_plain_method_says_how_to_call_it(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    mesh = procs.spawn("w", Worker)
    with pytest.raises(AttributeError, match=r"not an @endpoint.*as_endpoint\(mesh.helper\).call"):
        mesh.helper.call(1)
    with pytest.raises(TypeError, match=r"as_endpoint\(mesh.helper\)"):
        mesh.helper(1)
    with pytest.raises(AttributeError, match=r"as_endpoint\(mesh.helper\)"):
        mesh.endpoint("helper")
    with pytest.raises(ValueError, match="an @endpoint already"):
        as_endpoint(mesh.record)
    with pytest.raises(ValueError, match="a method of a spawned actor mesh"):
        as_endpoint(Worker.helper)
    await procs.stop()


async def test_a_concurrent_endpoint_does_not_hold_up_the_next_call(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    mesh = procs.spawn("w", Worker)
    waiting = mesh.wait_gate.call_one()
    waiter = asyncio.ensure_future(waiting.as_asyncio())
    await mesh.open_gate.call_one()  # (would wait forever behind wait_gate if calls ran one by one)
    assert await asyncio.wait_for(waiter, 60) == "opened"
    await procs.stop()


class Reentrant(Actor):
    def __init__(self):
        self.depth = 0

    @endpoint
    async def outer(self, me):
        self.depth += 1
        return await me.inner.call_one()  # (a call to its own actor, while its turn runs)

    @endpoint
    async def inner(self):
        return self.depth


class RayStyle:  # a @meshrt.remote class spawned as a mesh: its async methods interleave, as in Ray
    def __init__(self):
        self.gate = asyncio.Event()

    async def wait_gate(self):
        await self.gate.wait()
        return "opened"

    async def open_gate(self):
        self.gate.set()


async def test_an_async_endpoint_calling_its_own_actor_does_not_wait_for_itself(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    mesh = procs.spawn("r", Reentrant)
    assert await asyncio.wait_for(mesh.outer.call_one(mesh).as_asyncio(), 60) == 1
    ray_style = procs.spawn("ray_style", meshrt.remote(RayStyle))
    waiter = asyncio.ensure_future(ray_style.wait_gate.call_one().as_asyncio())
    await ray_style.open_gate.call_one()
    assert await asyncio.wait_for(waiter, 60) == "opened"
    await procs.stop()


def test_concurrent_endpoint_takes_only_async_methods():
    with pytest.raises(TypeError, match="not async def: mark it @endpoint"):
        class Bad(Actor):
            @concurrent_endpoint
            def plain(self):
                return 1

    with pytest.raises(TypeError, match="unknown option"):
        concurrent_endpoint(lambda: None, colour="red")


_caller = contextvars.ContextVar("caller", default="nobody")


@returns_future
async def _twice(x, started):
    started.append(_caller.get())
    await asyncio.sleep(0)
    return 2 * x


@returns_future
async def _forever(cancelled):
    try:
        await asyncio.Event().wait()
    finally:
        cancelled.set()


async def test_returns_future_awaits_once_with_the_callers_context():
    started: list = []
    _caller.set("me")
    fut = _twice(21, started)
    assert started == []  # (calling it does not start the body)
    _caller.set("later")
    assert await fut == 42
    assert await fut == 42 and started == ["me"]  # (one run, in the context of the call)
    assert await asyncio.to_thread(lambda: _twice(5, started).get(timeout=30)) == 10


def test_returns_future_get_runs_the_body_here_and_times_out():
    started: list = []
    assert _twice(3, started).get() == 6 and started == ["nobody"]
    cancelled = threading.Event()
    fut = _forever(cancelled)
    with pytest.raises(TimeoutError):
        fut.get(timeout=0.2)
    assert cancelled.is_set()  # (the body was cancelled at the timeout)
    with pytest.raises(TimeoutError):
        fut.get()  # (and the Future stays failed)
    with pytest.raises(TypeError, match="async def"):
        returns_future(lambda: 1)


async def test_returns_future_get_inside_a_running_loop_uses_a_helper_thread():
    started: list = []
    fut = _twice(4, started)
    with pytest.warns(RuntimeWarning):
        assert fut.get(timeout=30) == 8


def test_shutdown_context_stops_the_meshes_then_the_runtime():
    meshrt.init(num_cpus=2)
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("w", Worker)
    pids = mesh.record.call(1).get(timeout=60)
    assert list(pids.values()) == [10, 11]
    done = shutdown_context(host_timeout=20)
    assert done.get(timeout=1) is None
    assert not meshrt.is_initialized()
    assert shutdown_context().get(timeout=1) is None  # (again: nothing left to do)
    with pytest.raises(ValueError, match="finite, non-negative"):
        shutdown_context(host_timeout=-1)
    with pytest.raises(ValueError, match="finite, non-negative"):
        shutdown_context(host_timeout=float("inf"))


class Shutter(Actor):
    @endpoint
    def shut(self):
        shutdown_context().get(timeout=5)  # (in an actor's process: nothing to do)
        return context().actor_instance.rank.rank


async def test_shutdown_context_in_an_actor_does_nothing(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    mesh = procs.spawn("s", Shutter)
    assert await mesh.shut.call_one() == 0
    assert await mesh.shut.call_one() == 0  # (the process still serves)
    await procs.stop()


def _set_flag():
    os.environ["BOOTSTRAPPED"] = "sync"


async def _set_flag_async():
    await asyncio.sleep(0)
    os.environ["BOOTSTRAPPED"] = "async"


def _refuse():
    raise RuntimeError("no GPU here")


class EnvReader(Actor):
    @endpoint
    def flag(self):
        return os.environ.get("BOOTSTRAPPED")


async def test_spawn_procs_runs_bootstrap_first_in_each_process(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2}, bootstrap=_set_flag)
    assert list((await procs.spawn("e", EnvReader).flag.call()).values()) == ["sync", "sync"]
    other = this_host().spawn_procs({"gpus": 1}, _set_flag_async, name="other")
    assert await other.spawn("e", EnvReader).flag.call_one() == "async"
    failing = this_host().spawn_procs(per_host={"gpus": 1}, bootstrap=_refuse)
    with pytest.raises(ActorDiedError, match="no GPU here"):
        await failing.spawn("e", EnvReader).flag.call_one()
    with pytest.raises(TypeError, match="name=..."):
        this_host().spawn_procs({"gpus": 1}, "a name")
    await procs.stop()
    await other.stop()
    await failing.stop()


async def test_stop_takes_monarchs_reason(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    mesh = procs.spawn("e", EnvReader)
    await mesh.flag.call_one()
    await procs.stop("training finished")
    with pytest.raises(ActorDiedError, match=r"stopped with stop\(\) \(training finished\)"):
        await mesh.flag.call_one()
    with pytest.raises(TypeError, match="timeout="):
        procs.stop(5)


async def test_an_actor_mesh_stop_takes_monarchs_reason(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    mesh = procs.spawn("e", EnvReader)
    await mesh.flag.call_one()
    await mesh.stop("replaced")
    with pytest.raises(ActorDiedError, match=r"stopped with stop\(\) \(replaced\)"):
        await mesh.flag.call_one()
    with pytest.raises(TypeError, match="reason as a str"):
        mesh.stop(3)
    await procs.stop()

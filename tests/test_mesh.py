"""Actor meshes on one host: spawn, endpoints and their adverbs, slicing, ValueMesh,
ranks and context, channels, pickled meshes."""

from __future__ import annotations

import asyncio
import os
import re
import threading
import warnings

import pytest

import meshrt
from meshrt import (
    Actor,
    Channel,
    ValueMesh,
    context,
    current_rank,
    current_size,
    endpoint,
    this_host,
    this_proc,
)

from .helpers import gate


class Counter(Actor):
    def __init__(self, start=0):
        self.value = start
        self.born_rank = current_rank().rank

    @endpoint
    def incr(self, by=1):
        self.value += by
        return self.value

    @endpoint
    async def get(self):
        await asyncio.sleep(0)
        return self.value

    @endpoint
    def where(self):
        ctx = context()
        return (ctx.actor_instance.rank.rank, ctx.message_rank.rank, dict(current_size()), os.getpid())

    @endpoint
    def rank_now(self):
        return current_rank().rank, dict(current_rank().extent)

    @endpoint
    def wait_on(self, g, rank):
        if current_rank().rank == rank:
            meshrt.get(g.wait.remote())
        return current_rank().rank

    @endpoint
    def fail(self, message):
        raise KeyError(message)

    @endpoint
    def lock(self):
        return threading.Lock()

    @endpoint
    def fail_or_wait(self, g, rank):
        if current_rank().rank == rank:
            raise KeyError("first to fail")
        return meshrt.get(g.wait.remote(3600))  # (longer than any test runs)


async def test_spawn_call_gathers_a_value_mesh(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 4})
    assert procs.sizes == {"gpus": 4} and len(procs) == 4
    counters = procs.spawn("counters", Counter, start=10)
    replies = await counters.incr.call(5)
    assert isinstance(replies, ValueMesh)
    assert list(replies.values()) == [15, 15, 15, 15]
    assert [p.rank for p, _ in replies.items()] == [0, 1, 2, 3]
    assert replies.item(gpus=2) == 15
    assert replies.slice(gpus=slice(1, 3)).sizes == {"gpus": 2}
    where = list((await counters.where.call()).values())
    assert [w[0] for w in where] == [0, 1, 2, 3]
    assert len({w[3] for w in where}) == 4  # one process each
    assert all(w[2] == {"gpus": 4} for w in where)
    blocking = await asyncio.to_thread(counters.incr.call().get, 30)
    assert blocking.item(gpus=0) == 16
    await procs.stop()


async def test_slicing_ranks_and_message_ranks(rt):
    procs = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2})
    counters = procs.spawn("c", Counter)
    assert counters.sizes == {"hosts": 2, "gpus": 2}
    column = counters.slice(gpus=1)  # an int drops the dimension
    assert column.sizes == {"hosts": 2}
    got = list((await column.where.call()).values())
    assert [(a, m) for a, m, _, _ in got] == [(1, 0), (3, 1)]  # actor rank vs message rank
    assert [s for _, _, s, _ in got] == [{"hosts": 2}] * 2  # current_size(): the addressed mesh's, as in Monarch
    assert await counters.slice(hosts=1, gpus=1).rank_now.call_one() == (0, {})  # current_rank(): the message's
    assert list((await column.where.call()).values()) == got  # (a call without arguments reuses its bytes)
    for _ in range(2):
        assert [(a, m) for a, m, _, _ in (await counters.where.call()).values()] == [(r, r) for r in range(4)]
    one = counters.slice(hosts=1, gpus=0)
    assert len(one) == 1
    assert (await one.where.call_one())[0] == 2
    with pytest.raises(ValueError, match="call_one.*exactly one actor"):
        counters.where.call_one()
    with pytest.raises(ValueError, match="no dimension 'gpu'"):
        counters.slice(gpu=0)
    with pytest.raises(IndexError, match="size 2"):
        counters.slice(gpus=2)
    assert procs.slice(hosts=0).sizes == {"gpus": 2}
    await procs.stop()


async def test_sync_and_async_endpoints_keep_caller_order(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    counters = procs.spawn("c", Counter)
    for _ in range(50):
        counters.incr.broadcast()
    assert list((await counters.get.call()).values()) == [50, 50]
    futures = [counters.slice(gpus=0).incr.call_one() for _ in range(20)]
    assert [await f for f in futures] == list(range(51, 71))
    await procs.stop()


async def test_choose_avoids_a_busy_actor(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    counters = procs.spawn("c", Counter)
    await counters.initialized
    g = gate()
    busy = counters.slice(gpus=0).wait_on.call_one(g, 0)  # rank 0 blocks until the gate opens
    chosen = [await counters.where.choose() for _ in range(5)]
    assert {c[0] for c in chosen} == {1}
    g.open.remote()
    assert await busy == 0
    await procs.stop()


async def test_a_call_raises_the_first_failure_without_waiting_for_the_rest(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    counters = procs.spawn("c", Counter)
    g = gate()
    with pytest.raises(KeyError, match="first to fail"):
        await counters.fail_or_wait.call(g, 0)  # rank 1 is still waiting on the gate
    with pytest.raises(KeyError, match="first to fail"):
        await asyncio.to_thread(counters.fail_or_wait.call(g, 0).get, 60)
    late = counters.fail_or_wait.call(g, 0)
    await counters.slice(gpus=0).incr.call_one()  # (rank 0 answers in order: its failure is here)
    with pytest.raises(KeyError, match="first to fail"):
        await late  # a failure that arrived before the await is raised too
    g.open.remote()
    assert list((await counters.incr.call()).values()) == [2, 1]
    await procs.stop()


async def test_stream_yields_in_arrival_order(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    counters = procs.spawn("c", Counter)
    g = gate()
    stream = counters.wait_on.stream(g, 0)  # rank 0 answers last
    first, second = next(stream), next(stream)
    assert {await first, await second} == {1, 2}
    g.open.remote()
    assert await asyncio.to_thread(next(stream).get, 30) == 0
    with pytest.raises(StopIteration):
        next(stream)
    await procs.stop()


async def test_endpoint_errors_name_endpoint_and_point(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    counters = procs.spawn("c", Counter)
    with pytest.raises(KeyError) as info:
        await counters.fail.call("nope")
    assert isinstance(info.value, meshrt.ActorError)
    assert type(info.value.exception) is KeyError and info.value.exception.args == ("nope",)  # (Monarch's name)
    assert re.search(r"c\.fail at Point\(gpus=[01]\)", str(info.value))  # (the first to fail)
    assert "raise KeyError(message)" in str(info.value)  # the remote source line
    with pytest.raises(AttributeError, match="did you mean 'incr'"):
        _ = counters.inc
    with pytest.raises(TypeError, match=r"c\.incr\(\.\.\.\): too many positional arguments; it takes \(by=\.\.\.\)"):
        counters.incr.call(1, 2, 3)
    with pytest.raises(TypeError, match=r"c\.incr\(\.\.\.\): argument 0 of type lock cannot be serialized"):
        counters.incr.call(threading.Lock())
    with pytest.raises(TypeError, match=r"c\.lock at Point\(gpus=1\) returned a value that cannot be serialized"):
        await counters.slice(gpus=1).lock.call_one()
    await procs.stop()


class Broken(Actor):
    def __init__(self):
        if current_rank().rank == 1:
            raise RuntimeError("no GPU memory left")

    @endpoint
    def ping(self):
        return "pong"


async def test_constructor_failure_is_reported_per_point(rt, failures):
    seen, reported = failures
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("b", Broken)
    assert await asyncio.to_thread(reported.wait, 30)  # (a failure of the mesh, as in Monarch: to the hook)
    assert [(f.mesh_name, f.rank) for f in seen] == [("b", 1)] and "no GPU memory left" in seen[0].report()
    assert await mesh.slice(gpus=0).ping.call_one() == "pong"
    with pytest.raises(meshrt.exceptions.ActorDiedError, match="no GPU memory left") as info:
        await mesh.slice(gpus=1).ping.call_one()
    assert 'raise RuntimeError("no GPU memory left")' in str(info.value)  # (the constructor's traceback)
    with pytest.raises(RuntimeError, match="Broken.__init__ of actor mesh 'b' at Point"):
        await mesh.initialized
    await procs.stop()


@meshrt.remote
class RayStyle:
    def __init__(self, base):
        self.base = base

    def add(self, x):
        return self.base + x + current_rank().rank


async def test_spawn_takes_a_remote_class(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("r", RayStyle, 100)
    assert list((await mesh.add.call(1)).values()) == [101, 102]
    await procs.stop()


class Caller(Actor):
    @endpoint
    async def poke(self, mesh):
        return list((await mesh.incr.call(1)).values())

    @endpoint
    def poke_sync(self, mesh):
        return list(mesh.incr.call(1).get(timeout=30).values())


async def test_meshes_are_picklable_and_callable_from_actors(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    counters = procs.spawn("c", Counter)
    callers = this_host().spawn_procs(per_host={"procs": 1}).spawn("caller", Caller)
    assert await callers.poke.call_one(counters) == [1, 1]
    assert await callers.poke_sync.call_one(counters.slice(gpus=1)) == [2]
    assert list((await counters.get.call()).values()) == [1, 2]
    await procs.stop()


class Replier(Actor):
    @endpoint
    def reply_later(self, port, n):
        def send():
            for i in range(n):
                port.send(i * current_rank_or_zero())
        threading.Thread(target=send).start()

    @endpoint
    def reply_error(self, port):
        port.exception(ValueError("went wrong"))


def current_rank_or_zero():
    return 1


async def test_channel_ports_deliver_later_and_from_elsewhere(rt):
    port, receiver = Channel.open()
    port.send("local")
    assert await receiver.recv() == "local"
    procs = this_host().spawn_procs(per_host={"procs": 1})
    repliers = procs.spawn("r", Replier)
    repliers.reply_later.broadcast(port, 3)
    assert [await receiver.recv() for _ in range(3)] == [0, 1, 2]
    repliers.reply_error.broadcast(port)
    with pytest.raises(ValueError, match="went wrong"):
        await asyncio.to_thread(receiver.recv().get, 30)
    with pytest.raises(meshrt.exceptions.GetTimeoutError):
        await asyncio.to_thread(receiver.recv().get, 0.05)
    await procs.stop()


class SendsThenReturns(Actor):
    @endpoint
    def send_then_return(self, port, n):
        for i in range(n):
            port.send(i)
        return "done"


class Big(Actor):
    @endpoint
    def through_port(self, port):
        import numpy as np

        port.send(np.ones(1 << 18))
        return np.ones(1 << 18)


async def test_large_values_from_a_mesh_arrive_sealed(rt):
    # A worker leaves the block of a value for the driver unsealed (one message less):
    # the driver, which keeps the store, seals it on arrival, whichever way it came.
    from meshrt._private import state

    port, receiver = Channel.open()
    procs = this_host().spawn_procs(per_host={"procs": 1})
    big = procs.spawn("big", Big)
    returned = await big.through_port.call_one(port)
    sent = await receiver.recv()
    assert returned.sum() == sent.sum() == 1 << 18
    store = state.core().controller.store
    assert store.objects and all(o.sealed for o in store.objects.values())
    await procs.stop()


async def test_port_values_sent_before_returning_arrive_before_the_reply(rt):
    # One sender, one receiver: FIFO, even though a plain reply leaves from the
    # endpoint's own thread while Port values go through the process's core loop.
    port, receiver = Channel.open()
    procs = this_host().spawn_procs(per_host={"procs": 1})
    senders = procs.spawn("s", SendsThenReturns)
    for _ in range(20):
        assert await senders.send_then_return.call_one(port, 3) == "done"
        got = await asyncio.to_thread(lambda: [receiver.recv().get(0) for _ in range(3)])
        assert got == [0, 1, 2]
    await procs.stop()


async def test_big_arguments_travel_once_through_the_store(rt):
    import numpy as np

    procs = this_host().spawn_procs(per_host={"gpus": 2})
    counters = procs.spawn("c", Counter)
    big = np.arange(1 << 20, dtype=np.float64)  # 8 MiB
    with pytest.raises(TypeError):
        counters.incr.call(big, 1)
    echo = this_host().spawn_procs(per_host={"gpus": 2}).spawn("e", RayStyle, 0)
    got = await echo.add.call(big)
    assert np.array_equal(got.item(gpus=0), big) and np.array_equal(got.item(gpus=1), big + 1)
    await procs.stop()


class SpawnsHere(Actor):
    @endpoint
    async def spawn_local(self):
        here = meshrt.this_proc()
        sub = here.spawn("sub", Counter, 7)
        return (await sub.incr.call_one(), os.getpid())

    @endpoint
    def pid(self):
        return os.getpid()


async def test_this_proc_spawns_into_the_current_process(rt):
    mesh = this_host().spawn_procs(per_host={"procs": 1}).spawn("s", SpawnsHere)
    value, pid = await mesh.spawn_local.call_one()
    assert value == 8 and pid == await mesh.pid.call_one()


def test_bad_spawn_arguments_fail_at_the_call_site(rt):
    with pytest.raises(ValueError, match="needs an int size >= 1"):
        this_host().spawn_procs(per_host={"gpus": 0})
    with pytest.raises(TypeError, match="dict of name -> size"):
        this_host().spawn_procs(per_host=4)
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    with pytest.raises(TypeError, match="needs a class"):
        procs.spawn("x", 42)
    with pytest.raises(TypeError, match=r"spawn\('x', Counter, \.\.\.\): Counter\.__init__: too many .* \(start=\.\.\.\)"):
        procs.spawn("x", Counter, 1, 2, 3)
    procs.stop().get(timeout=30)


class BaseEndpoints(Actor):
    @endpoint
    def inherited(self, x=1):
        return ("base", x)


class Shapes(BaseEndpoints):
    @endpoint
    def star(self, *args, **kwargs):
        return args, kwargs

    @endpoint
    @staticmethod
    def static_below(y):
        return y * 3

    @staticmethod
    @endpoint
    def static_above(y):
        return y * 4

    @endpoint
    @classmethod
    def klass(cls, z):
        return (cls.__name__, z)


async def test_endpoints_inherited_static_class_and_variadic(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("sh", Shapes)
    one = mesh.slice(gpus=1)
    assert await one.inherited.call_one(x=5) == ("base", 5)
    assert await one.star.call_one(1, 2, z=3) == ((1, 2), {"z": 3})
    assert await one.static_below.call_one(2) == 6
    assert await one.static_above.call_one(2) == 8
    assert await one.klass.call_one(7) == ("Shapes", 7)
    with pytest.raises(TypeError, match=r"klass\(\.\.\.\): missing a required argument: 'z'; it takes \(z\)"):
        one.klass.call_one()
    assert (procs.size(), procs.size("gpus"), mesh.size("gpus"), this_host().size()) == (2, 2, 2, 1)
    with pytest.raises(ValueError, match="no dimension 'hosts'; its dimensions are"):
        procs.size("hosts")
    await procs.stop()


class Cleaner(Actor):
    def __init__(self, port):
        self.port = port

    @endpoint
    def ping(self):
        return "pong"

    def __cleanup__(self, exc):  # (Monarch's form; meshrt also calls one without the parameter)
        self.port.send(current_rank().rank if exc is None else exc)


async def test_two_meshes_of_one_name_in_the_same_processes_are_separate(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    first = procs.spawn("n", Counter, 10)
    assert list((await first.incr.call()).values()) == [11, 11]
    second = procs.spawn("n", Counter, 100)  # (as in Monarch: a name is not a key)
    assert list((await second.incr.call()).values()) == [101, 101]
    await second.stop()  # stopping one leaves the other
    assert list((await first.incr.call()).values()) == [12, 12]
    with pytest.raises(meshrt.exceptions.ActorDiedError):
        await second.incr.call()
    await procs.stop()


class Sibling(Actor):
    @endpoint
    def rank(self):
        return current_rank().rank

    @endpoint
    def ask_blocking(self):
        return this_proc().spawn("sib", Sibling).rank.call_one().get(timeout=30)

    @endpoint
    async def ask_awaiting(self):
        return await this_proc().spawn("sib2", Sibling).rank.call_one()

    @endpoint
    async def async_rank(self):
        return current_rank().rank

    @endpoint
    def spawn_then_ask_async(self):
        return this_proc().spawn("sib3", Sibling).async_rank.call_one().get(timeout=30)

    @endpoint
    def ask_async_of(self, other):
        return other.async_rank.call_one().get(timeout=30)

    @endpoint
    def ask_plain_of(self, other):
        return other.rank.call_one().get(timeout=30)

    @endpoint
    async def async_blocks(self):
        with warnings.catch_warnings():  # (get() in async code warns first; this test wants what follows)
            warnings.simplefilter("ignore", RuntimeWarning)
            return this_proc().spawn("sib4", Sibling).async_rank.call_one().get(timeout=30)


async def test_a_plain_endpoint_waiting_on_its_own_actor_fails_instead_of_hanging(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    mesh = procs.spawn("s", Sibling)
    with pytest.raises(RuntimeError, match="plain `def` endpoint of this same actor would wait forever"):
        await mesh.ask_plain_of.call_one(mesh)  # (an actor's plain endpoints run one at a time)
    with pytest.raises(RuntimeError, match="`await` the call instead of calling get()"):
        await mesh.async_blocks.call_one()  # (an async endpoint blocking its own loop)
    await procs.stop()


async def test_each_actor_runs_its_plain_endpoints_on_its_own_thread(rt):
    # As in Monarch: a plain endpoint blocked on another actor of its process (here a
    # sibling it spawned) does not stall that actor's own plain endpoints or spawn.
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("s", Sibling)
    assert list((await mesh.ask_blocking.call()).values()) == [0, 0]
    assert list((await mesh.spawn_then_ask_async.call()).values()) == [0, 0]
    assert list((await mesh.ask_awaiting.call()).values()) == [0, 0]
    other = procs.spawn("other", Sibling)
    assert list((await mesh.ask_plain_of.call(other.slice(gpus=1))).values()) == [0, 0]
    await procs.stop()


async def test_a_plain_endpoint_may_wait_on_an_async_endpoint_of_its_own_process(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    asker, other = procs.spawn("asker", Sibling), procs.spawn("other", Sibling)
    # (the async call jumps the plain calls queued behind the waiting one, which
    # could not finish first; other callers' calls keep their order)
    assert await asker.ask_async_of.call_one(other) == 0
    assert await asker.ask_async_of.call_one(asker) == 0  # (its own async endpoint, too)
    await procs.stop()


async def test_two_actor_meshes_share_processes_and_stop_apart(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    counters = procs.spawn("c", Counter)
    port, receiver = Channel.open()
    cleaners = procs.spawn("cl", Cleaner, port)
    pids = {w[3] for w in (await counters.where.call()).values()}
    assert len(pids) == 2
    await cleaners.stop()
    assert sorted([await receiver.recv(), await receiver.recv()]) == [0, 1]  # __cleanup__ ran
    with pytest.raises(meshrt.exceptions.ActorDiedError, match="it was stopped with stop"):
        await cleaners.ping.call()
    assert list((await counters.incr.call()).values()) == [1, 1]  # the other mesh lives on
    await procs.stop()


class Recorder(Actor):
    def __init__(self):
        self.seen = []

    @endpoint
    async def record(self, i):
        self.seen.append(i)

    @endpoint
    async def seen_so_far(self):
        return self.seen


async def test_calls_made_right_after_spawn_start_in_the_order_they_were_made(rt):
    # The first calls wait behind the constructor (the process is still starting); those
    # arriving once it has run must not overtake them.
    for _ in range(4):
        procs = this_host().spawn_procs(per_host={"gpus": 2})
        mesh = procs.spawn("r", Recorder)
        calls = [mesh.slice(gpus=0).record.call_one(i) for i in range(300)]
        for i in range(300, 400):
            mesh.record.broadcast(i)
        await asyncio.gather(*calls)
        seen = await mesh.seen_so_far.call()
        assert seen.item(gpus=0) == list(range(400))
        assert seen.item(gpus=1) == list(range(300, 400))
        await procs.stop()

"""A plain Ray-style actor's main thread reads a direct lane of its own (``lanes.MAIN``,
direct_lanes.py, inbox.py): the driver's calls skip the actor's core loop. They must
still run on the main thread, in the order they were made whatever path each took,
stay cancellable, and end cleanly with the actor; threaded and async actors keep
their own paths."""

from __future__ import annotations

import os
import threading
import time

import pytest

import meshrt
from meshrt._private import lanes, state
from meshrt.exceptions import ActorDiedError, TaskCancelledError

from .helpers import wait_until
from .test_direct_lanes import needs_lanes
from .test_multihost import cluster  # noqa: F401 - (the fixture, by name)


@meshrt.remote
class Log:
    def __init__(self):
        self.seen = []

    def add(self, item):
        self.seen.append(item)
        return len(self.seen)

    def seen_so_far(self):
        return list(self.seen)

    def on_main_thread(self):
        return threading.current_thread() is threading.main_thread()

    def frames_in(self):
        core = state.core()
        conn = core.agent if core.agent is not None else core.ctl
        return conn.frames_in

    def pid(self):
        return os.getpid()

    def wait(self, started, seconds):
        meshrt.get(started.mark.remote())
        time.sleep(seconds)  # (cancelled long before: the test waits on its error, not this)
        return "finished"

    def leave(self):
        meshrt.actor.exit_actor()


@meshrt.remote
class Marker:
    def __init__(self):
        self.marked = threading.Event()

    def mark(self):
        self.marked.set()

    def is_marked(self):
        return self.marked.is_set()


def _worker_of(actor) -> int:
    return state.core().actor_clients[actor._actor_id].worker_id


def _lane_taken(actor) -> int:
    """The driver holds the actor's main lane (offered once its constructor ran)."""
    meshrt.get(actor.seen_so_far.remote())
    core = state.core()
    assert wait_until(lambda: core.direct_lanes.has(_worker_of(actor), lanes.MAIN), 10)
    return _worker_of(actor)


@needs_lanes
def test_a_plain_actor_s_calls_reach_its_main_thread_without_its_core_loop(rt):
    log = Log.remote()
    _lane_taken(log)
    before = meshrt.get(log.frames_in.remote())
    for i in range(100):
        assert meshrt.get(log.add.remote(i)) == i + 1
    assert meshrt.get(log.on_main_thread.remote())
    after = meshrt.get(log.frames_in.remote())
    assert after - before < 10, "the calls went through the actor's core connection"
    assert meshrt.get(log.seen_so_far.remote()) == list(range(100))


def test_calls_keep_their_order_across_every_path(rt):
    """Direct calls, bursts queued behind them, refs and large arguments (which take
    the core loop) interleave in the order they were made."""
    log = Log.remote()
    expected, refs = [], []
    big = os.urandom(512 << 10)
    put = meshrt.put(41)
    for i in range(80):
        if i % 7 == 3:
            refs.append(log.add.remote(big))
            expected.append(big)
        elif i % 11 == 5:
            refs.append(log.add.remote(put))
            expected.append(41)
        else:
            refs.append(log.add.remote(i))
            expected.append(i)
        if i % 3 == 0:
            meshrt.get(refs[-1])  # (nothing in flight: the next call may go direct)
    assert meshrt.get(refs) == list(range(1, 81))
    assert meshrt.get(log.seen_so_far.remote()) == expected


@needs_lanes
def test_a_direct_call_running_on_the_main_thread_can_be_cancelled(rt):
    log, marker = Log.remote(), Marker.remote()
    _lane_taken(log)
    ref = log.wait.remote(marker, 60)
    assert wait_until(lambda: meshrt.get(marker.is_marked.remote()), 30)
    meshrt.cancel(ref)
    with pytest.raises(TaskCancelledError):
        meshrt.get(ref, timeout=30)
    assert meshrt.get(log.add.remote("after")) == 1  # the actor serves on


def test_threaded_and_async_actors_offer_no_main_lane_and_serve_as_before(rt):
    threaded = Log.options(max_concurrency=2).remote()

    @meshrt.remote
    class Async:
        async def on_main_thread(self):
            return threading.current_thread() is threading.main_thread()

        def plain(self):
            return threading.current_thread().name

    async_actor = Async.remote()
    for _ in range(20):
        assert meshrt.get(threaded.on_main_thread.remote()) is False
        assert meshrt.get(async_actor.on_main_thread.remote()) is True
        assert meshrt.get(async_actor.plain.remote()) == "MainThread"  # (on its loop, as in Ray)
    core = state.core()
    assert not core.direct_lanes.has(_worker_of(threaded), lanes.MAIN)
    assert not core.direct_lanes.has(_worker_of(async_actor), lanes.MAIN)


@needs_lanes
def test_a_killed_actor_s_lane_closes_and_its_restart_gets_its_own(rt):
    log = Log.options(max_restarts=1, max_task_retries=0).remote()
    first = _lane_taken(log)
    os.kill(meshrt.get(log.pid.remote()), 9)
    with pytest.raises(meshrt.exceptions.ActorUnavailableError):  # (it restarts: Ray's error for that)
        for _ in range(10_000):  # (until the death is known: calls fail, never hang)
            meshrt.get(log.add.remote(1), timeout=30)
    assert wait_until(lambda: not state.core().direct_lanes.has(first, lanes.MAIN), 10)
    assert wait_until(lambda: _call_succeeds(log), 30)
    assert _lane_taken(log) != first
    assert meshrt.get(log.on_main_thread.remote())


def _call_succeeds(actor) -> bool:
    try:
        meshrt.get(actor.seen_so_far.remote(), timeout=30)
        return True
    except meshrt.exceptions.RayActorError:
        return False


@needs_lanes
def test_exit_actor_from_a_direct_call_ends_the_actor_and_fails_later_calls(rt):
    log = Log.remote()
    _lane_taken(log)
    with pytest.raises(ActorDiedError, match="exit_actor"):
        meshrt.get(log.leave.remote(), timeout=30)
    with pytest.raises(ActorDiedError):
        meshrt.get(log.add.remote(1), timeout=30)


@needs_lanes
@pytest.mark.timeout(120)
def test_an_agent_hands_calls_to_its_host_s_plain_actors_directly(cluster):  # noqa: F811
    _hosts, _agents, _address, remember = cluster
    there = next(n["NodeID"] for n in meshrt.nodes() if n["NodeID"] != meshrt.get_runtime_context().get_node_id())
    from meshrt.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    log = Log.options(scheduling_strategy=NodeAffinitySchedulingStrategy(there, soft=False)).remote()
    meshrt.get(log.seen_so_far.remote(), timeout=60)
    remember()
    frames = [meshrt.get(log.frames_in.remote(), timeout=30) for _ in range(3)]  # (the lane is taken by now)
    for i in range(50):
        assert meshrt.get(log.add.remote(i), timeout=30) == i + 1
    after = meshrt.get(log.frames_in.remote(), timeout=30)
    assert after - frames[-1] < 25, (frames, after)
    assert meshrt.get(log.seen_so_far.remote(), timeout=30) == list(range(50))

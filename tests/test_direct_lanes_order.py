"""Direct lanes under pressure: calls through a lane's socket and through the core
connection keep the caller's order; lanes survive many descriptors, stopped actors
leave no socket behind, agents use their host's lanes too (direct_lanes.py)."""

from __future__ import annotations

import collections
import errno
import os
import resource
import socket
import subprocess
import sys
import threading
import time

import meshrt
from meshrt import Actor, Channel, endpoint, this_host
from meshrt._private import state
from meshrt._private.direct_lanes import DirectLanes
from meshrt.exceptions import GetTimeoutError

from .helpers import wait_until
from .test_direct_lanes import needs_lanes
from .test_multihost import cluster, stop_agent  # noqa: F401 - (the fixture, by name)


class Mixed(Actor):
    def __init__(self):
        self.seen = []

    @endpoint
    def plain(self, i):
        if i is not None:
            self.seen.append(i)

    @endpoint
    async def later(self, i):
        self.seen.append(i)

    @endpoint
    def seen_so_far(self):
        return list(self.seen)

    @endpoint
    def frames_from_agent(self):
        agent = state.core().agent
        return agent.frames_in if agent is not None else None


class Pounder(Actor):
    @endpoint
    def start(self, mesh):
        """Keep ``mesh``'s lane busy with calls from another process until it stops."""
        def run():
            try:
                while True:
                    mesh.plain.call_one(None).get(timeout=60)
            except Exception:  # noqa: BLE001 - (its mesh was stopped: done)
                pass

        threading.Thread(target=run, daemon=True).start()


class Hog(Actor):
    def __init__(self):
        self.fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]

    @endpoint
    def close(self):
        for fd in self.fds:
            os.close(fd)


async def test_a_plain_call_then_an_async_one_run_in_that_order(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    a = procs.spawn("a", Mixed)
    await a.plain.call_one(-1)
    expected = [-1]
    for i in range(300):
        first = a.plain.call_one(2 * i)  # (nothing in flight: through the lane)
        second = a.later.call_one(2 * i + 1)  # (through the core connection)
        expected += [2 * i, 2 * i + 1]
        await first
        await second
    assert await a.seen_so_far.call_one() == expected
    await procs.stop()


async def test_order_holds_while_another_process_keeps_the_lane_busy(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    other = this_host().spawn_procs(per_host={"gpus": 1})
    log = procs.spawn("log", Mixed)
    await log.plain.call_one(None)
    await other.spawn("p", Pounder).start.call_one(log)
    expected = []
    for i in range(400):
        first = log.plain.call_one(2 * i)  # (direct)
        second = log.plain.call_one(2 * i + 1)  # (the first is in flight: the core connection)
        expected += [2 * i, 2 * i + 1]
        await first
        await second
    assert await log.seen_so_far.call_one() == expected
    await other.stop()
    await procs.stop()


async def test_a_lane_made_with_descriptors_above_1023_serves(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    hog = procs.spawn("hog", Hog)
    log = procs.spawn("log", Mixed)  # its lane's socket and eventfd get numbers above 1023
    for i in range(20):
        await log.plain.call_one(i)
    assert await log.seen_so_far.call_one() == list(range(20))
    await hog.close.call_one()
    await procs.stop()


def _seqpacket_sockets() -> int:
    """The driver's SOCK_SEQPACKET sockets: its lanes' and its zygote's (worker
    connections come and go with the task pool: not counted)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            with socket.socket(fileno=os.dup(int(fd))) as sock:
                count += sock.type == socket.SOCK_SEQPACKET
        except OSError:  # (closed meanwhile)
            pass
    return count


async def test_stopped_actors_leave_no_socket_in_the_driver(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    first = procs.spawn("first", Mixed)
    await first.plain.call_one(0)
    core = state.core()
    worker = core.actor_clients[first._procs[0]._actor_id].worker_id
    assert wait_until(lambda: core.direct_lanes.has(worker, first._key), 10)
    before = _seqpacket_sockets()
    for i in range(20):
        mesh = procs.spawn(f"a{i}", Mixed)
        await mesh.plain.call_one(1)
        await mesh.stop()
    assert wait_until(lambda: _seqpacket_sockets() <= before, 10), (before, _seqpacket_sockets())
    await procs.stop()


def test_a_process_gone_before_its_lane_is_taken_leaves_lanes_on():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    lanes = DirectLanes()
    a, b = socket.socketpair()
    try:
        assert not lanes.take(1, child.pid, "lane", b.fileno())
        assert not lanes.refused  # (only the kernel's no turns them off)
    finally:
        a.close()
        b.close()


def test_agents_hand_calls_to_their_hosts_lanes(cluster):  # noqa: F811
    hosts, _agents, _address, remember = cluster
    procs = hosts.spawn_procs(per_host={"gpus": 1})
    remember()
    mesh = procs.spawn("m", Mixed)
    one = mesh.slice(hosts=1, gpus=0)
    one.plain.call_one(-1).get(timeout=30)
    one.seen_so_far.call_one().get(timeout=30)  # (the agent has taken the lane by now, or soon)
    frames = [one.frames_from_agent.call_one().get(timeout=30) for _ in range(2)]
    for i in range(50):
        one.plain.call_one(i).get(timeout=30)
    after = one.frames_from_agent.call_one().get(timeout=30)
    # (each frame_from_agent call itself arrives by the lane: the worker's core loop
    # read well under one frame per call)
    assert after - frames[-1] < 25, (frames, after)
    assert one.seen_so_far.call_one().get(timeout=30) == [-1, *range(50)]
    assert sorted(mesh.plain.call(7).get(timeout=30).values(), key=repr) == [None, None]
    meshrt.shutdown()


def _one_behind_an_agent(agents_cluster, name: str, cls):
    """One actor on the second agent's host (the ``cluster`` fixture's)."""
    hosts, _agents, _address, remember = agents_cluster
    procs = hosts.spawn_procs(per_host={"gpus": 1})
    remember()
    return procs.spawn(name, cls).slice(hosts=1, gpus=0)


class Inbox(Actor):
    """Holds a channel's receiving end; ``stall_loop`` keeps its process's core loop busy."""

    def __init__(self):
        self.port, self.receiver = Channel.open()

    @endpoint
    def get_port(self):
        return self.port

    @endpoint
    def stall_loop(self, seconds):
        # (fault injection, not a wait: messages that reach this process meanwhile stay
        # unread in its core connection; order must hold whatever the timing)
        state.core().io.loop.call_soon_threadsafe(time.sleep, seconds)  # (not io.post: the reply waits for those)

    @endpoint
    def arrived(self):
        try:
            return self.receiver.recv().get(timeout=0)
        except GetTimeoutError:
            return "nothing yet"


def _port_then_call(inbox, rounds: int) -> list:
    port = inbox.get_port.call_one().get(timeout=30)
    seen = []
    for i in range(rounds):
        inbox.stall_loop.call_one(0.2).get(timeout=30)
        port.send(i)
        assert wait_until(state.core().io.caught_up, 10)  # (the value has left the driver)
        seen.append(inbox.arrived.call_one().get(timeout=30))  # (nothing in flight: through the lane)
    return seen


@needs_lanes
def test_a_call_by_the_lane_runs_after_what_the_core_connection_brought_first(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    inbox = procs.spawn("inbox", Inbox)
    assert _port_then_call(inbox, 3) == [0, 1, 2]
    procs.stop().get(timeout=30)


@needs_lanes
def test_through_an_agent_too(cluster):  # noqa: F811
    inbox = _one_behind_an_agent(cluster, "inbox", Inbox)
    assert _port_then_call(inbox, 3) == [0, 1, 2]
    meshrt.shutdown()


class FdHog(Actor):
    """Fills its process's descriptor table (under a lowered limit), and frees it."""

    @endpoint
    def fill(self):
        self.limit = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 64, self.limit[1]))
        self.fds = []
        try:
            while True:
                self.fds.append(os.open("/dev/null", os.O_RDONLY))
        except OSError as err:
            assert err.errno == errno.EMFILE
        return len(self.fds)

    @endpoint
    def free(self):
        for fd in self.fds:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, self.limit)


def test_an_actor_spawned_with_no_descriptor_left_still_serves(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    hog = procs.spawn("hog", FdHog)
    assert hog.fill.call_one().get(timeout=30) > 0
    try:
        late = procs.spawn("late", Mixed)  # (no socket for its lane: its calls take the core loop)
        for i in range(5):
            late.plain.call_one(i).get(timeout=30)
        assert late.seen_so_far.call_one().get(timeout=30) == list(range(5))
    finally:
        hog.free.call_one().get(timeout=30)
    procs.stop().get(timeout=30)


def _hold_driver_messages(seconds: float) -> None:
    """Fault injection standing for a pull in progress of a message from the driver
    (pulls.py): the driver's later messages wait behind it for ``seconds``."""
    core = state.core()
    backlog = collections.deque()

    def release():
        while backlog:
            core.handle_message(*backlog.popleft())
        core.unhold(0, backlog)

    core.io.call_sync(core.held.__setitem__, 0, backlog)
    threading.Timer(seconds, core.io.post, (release,)).start()


class Clock(Actor):
    def __init__(self):
        self.seen = []

    @endpoint
    def now(self):
        return time.time()

    @endpoint
    def hold_driver_messages(self, seconds):
        _hold_driver_messages(seconds)
        return time.time() + seconds

    @endpoint
    def add(self, i):
        self.seen.append(i)

    @endpoint
    def seen_so_far(self):
        return list(self.seen)

    @endpoint
    def hold_and_keep_busy(self, hold_s, busy_s):
        """The driver's messages held for ``hold_s``, and this lane busy (as with another
        caller's call) for ``busy_s`` after this call."""
        _hold_driver_messages(hold_s)
        state.core().executor.lanes.current().helper.post(time.sleep, busy_s)


def _runs_after_the_release(clock) -> float:
    for _ in range(5):
        clock.now.call_one().get(timeout=30)
    released_at = clock.hold_driver_messages.call_one(0.5).get(timeout=30)
    return clock.now.call_one().get(timeout=30) - released_at  # (nothing in flight: by the lane)


@needs_lanes
def test_a_call_by_the_lane_waits_behind_its_senders_held_messages(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    assert _runs_after_the_release(procs.spawn("clock", Clock)) >= -0.05
    procs.stop().get(timeout=30)


@needs_lanes
def test_a_call_by_the_lane_waits_behind_held_messages_through_an_agent_too(cluster):  # noqa: F811
    assert _runs_after_the_release(_one_behind_an_agent(cluster, "clock", Clock)) >= -0.05
    meshrt.shutdown()


def _burst_behind_held_messages(clock, pumped: bool) -> list:
    clock.add.call_one(-1).get(timeout=30)
    clock.hold_and_keep_busy.call_one(0.6, 0.3).get(timeout=30)
    if pumped:  # (both queued on the core loop, the first alone: Relay(direct=True) through an agent)
        futures = state.core().io.call_sync(lambda: [clock.add.call_one(1), clock.add.call_one(2)])
    else:  # (the first by the lane from this thread, the second through the core connection)
        futures = [clock.add.call_one(1), clock.add.call_one(2)]
    for future in futures:
        future.get(timeout=30)
    return clock.seen_so_far.call_one().get(timeout=30)


@needs_lanes
def test_a_burst_keeps_its_order_while_the_senders_messages_are_held(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    assert _burst_behind_held_messages(procs.spawn("clock", Clock), pumped=False) == [-1, 1, 2]
    procs.stop().get(timeout=30)


@needs_lanes
def test_a_burst_through_an_agent_keeps_its_order_while_held(cluster):  # noqa: F811
    clock = _one_behind_an_agent(cluster, "clock", Clock)
    assert _burst_behind_held_messages(clock, pumped=True) == [-1, 1, 2]
    assert _burst_behind_held_messages(clock, pumped=False) == [-1, 1, 2, -1, 1, 2]
    meshrt.shutdown()


class _Unpicklable:
    def __reduce__(self):
        raise TypeError("cannot pickle this")


@needs_lanes
def test_a_message_that_cannot_be_pickled_costs_nothing_else(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    inbox = procs.spawn("inbox", Inbox)
    port = inbox.get_port.call_one().get(timeout=30)
    core = state.core()
    conn = core.worker_conns[core.actor_clients[inbox._procs[0]._actor_id].worker_id]
    port.send("before")
    assert wait_until(core.io.caught_up, 10)
    core.io.call_sync(conn.send, _Unpicklable())  # (alone in its frame: nothing is written)
    port.send("after")  # (its batch holds an unpicklable message: the rest still go)
    core.io.call_sync(lambda: (conn.send(_Unpicklable()), None)[1])
    assert wait_until(lambda: conn.frames_sent_if_idle() is not None, 10)
    # (a call by the lane does not wait for frames that never went out)
    assert inbox.arrived.call_one().get(timeout=10) == "before"
    assert inbox.arrived.call_one().get(timeout=10) == "after"
    procs.stop().get(timeout=30)

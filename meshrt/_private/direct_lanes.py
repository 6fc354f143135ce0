"""Direct lanes: an actor's calls from the driver on its host, straight to the
thread that runs them.

A call normally reaches an actor's plain ``def`` method in two steps: the core loop
of its process reads it, then hands it to the thread that runs it (a mesh actor's
lane thread, lanes.py; a plain Ray-style actor's main thread, executor.py). On a
small machine each thread wake-up costs more than the call itself. So each lane of
a process on the driver's host, and the main thread of a plain actor there (the
lane ``lanes.MAIN``), gets a socket of its own, read by that thread (inbox.py): the
driver writes a call there and the thread that runs it is the one that wakes.
Replies still go back through the core connection.

Setting up: the worker makes a SOCK_SEQPACKET socketpair for the lane, keeps one
end, and offers the other's descriptor number to the driver (``DirectLaneOffer``,
over its authenticated connection). The driver takes it from the worker's
descriptor table with ``pidfd_getfd`` (Linux 5.6+), which the kernel allows only to
a process that may ptrace the worker (the driver is its ancestor): no third process
can write to the lane unless it could already take over the worker. Where the kernel
refuses, or with ``MESHRT_DIRECT_LANES=0``, calls keep going through the core loop.

Order: the driver writes to a lane only when no call of its to that process is in
flight or queued (ActorClient.send_now), and the lane's thread reads its socket
before anything posted to it afterwards. So a call sent this way still runs before
whatever the driver sends after it, through any path.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import pickle
import select
import socket
import threading

from ..objstore.serialization import Payload
from . import lanes
from . import messages as m

log = logging.getLogger("meshrt")

_SYS_PIDFD_GETFD = 438  # the same number on every Linux architecture
MAX_FRAME = 64 * 1024  # larger calls take the core connection
_SEND_FLAGS = int(socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)  # (an int: enum arithmetic per send costs)


# -- the worker's side --------------------------------------------------------------------

def offer(core, lane) -> None:
    """A new lane (Lanes.on_new_lane): give its thread a socket, and the other end to
    whoever delivers calls on this host (the host's agent, or the driver on its host)."""
    if (not hasattr(os, "pidfd_open") or core.direct_refused
            or os.environ.get("MESHRT_DIRECT_LANES", "1") == "0"):
        return
    if core.agent is None and (core.host_id != 0 or core.ctl is None):
        return
    try:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    except OSError as err:  # (out of descriptors, say: the lane keeps its queue alone)
        log.warning("meshrt: lane %s takes its calls through the core loop (no socket for it: %s)", lane.key, err)
        return
    core.direct_offers[lane.key] = theirs
    lane.helper.attach_direct(mine, functools.partial(run_frame, core, lane))
    offer_msg = m.DirectLaneOffer(lane.key, theirs.fileno())
    if core.agent is not None:  # (to the agent itself, not relayed to the driver)
        core.io.post(core.agent.send, offer_msg)
    else:
        core.io.post(core.send_to, 0, offer_msg)


def run_frame(core, lane, packet: bytes) -> None:
    """On the lane's thread: run the call of one frame (``_frame``), once the core loop
    has taken every message its sender wrote to us before it (a port's value, a call to
    another actor: they came first), and handled them (none still waits behind a pull
    of lent bytes). One that may not run here (its lane ended meanwhile) goes to the
    core loop, where it fails as a late call."""
    # (only the driver or the agent holds the other end: see above)
    task_id, actor_id, method, data, buffers, num_returns, lent, src, after = pickle.loads(packet)
    if lent is not None:  # large bytes the caller lends until the call is over (loans.py)
        args = Payload(data, loans=lent)
    else:
        args = Payload(data, tuple(memoryview(b).toreadonly() for b in buffers)) if buffers else Payload(data)
    msg = m.ActorCall(task_id, actor_id, method, args, (), num_returns)
    conn = core.agent if core.agent is not None else core.ctl
    while not conn.wait_handled(after, 1.0):
        pass  # (the loop is behind: it reads and takes them; wait_handled returns once the connection ends)
    # The sender's messages may wait behind a pull of lent bytes (pulls.py; keyed by sender:
    # the driver's connection has peer id 0, a relayed message is handled as from ``src``).
    # Handed to the loop now, this call would land behind the sender's later messages.
    while not core.wait_unheld(src, 1.0):
        pass
    if lane.retired or not core.executor.run_direct(core.call_of(msg, src, [], []), lane):
        core.io.post(core.on_messages, conn, [msg if core.agent is None else m.Relay(core.worker_id, src, msg)])


def lane_of(msg) -> str | None:
    """The lane a call may take directly, with arguments that need nothing settled on
    arrival (no refs, store blocks or dependencies): the mesh actor lane it names, or
    else the main thread's (which only a plain actor's process offers)."""
    if type(msg) is not m.ActorCall or msg.deps or msg.pins or msg.group is not None or msg.name is not None:
        return None
    args = msg.args
    if (type(args) is not Payload or args.refs or args.shm is not None or args.is_error
            or args.copied_out):
        return None
    return lanes.split(msg.method)[1] or lanes.MAIN


def _frame(msg: m.ActorCall, src: int, after: int) -> bytes:
    """A call as a plain tuple: the lane takes only calls without refs, store blocks,
    dependencies or a concurrency group, and a tuple pickles and loads several times
    faster than the message records. ``after``: the frames written to the process's
    core connection before it (run_frame waits for those)."""
    args = msg.args
    if args.loans is not None:  # (the lender keeps the bytes themselves: only the loans go)
        return pickle.dumps((msg.task_id, msg.actor_id, msg.method, args.data, (), msg.num_returns, args.loans,
                             src, after), protocol=5)
    buffers = tuple(map(pickle.PickleBuffer, args.buffers)) if args.buffers else ()
    return pickle.dumps((msg.task_id, msg.actor_id, msg.method, args.data, buffers, msg.num_returns, None, src,
                         after), protocol=5)


def taken(core, msg: m.DirectLaneTaken) -> None:
    """The driver is done with the offered end: ours closes."""
    if msg.refused:
        core.direct_refused = True
    sock = core.direct_offers.pop(msg.lane, None)
    if sock is not None:
        sock.close()


# -- the sender's side (the driver, or an agent) -------------------------------------------


def _hung_up(sock: socket.socket) -> bool:
    """The lane's thread closed its end (its actor was stopped)."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLHUP)
    return bool(poller.poll(0))


def _take_fd(pid: int, fd: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        got = libc.syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0)
        if got < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return got
    finally:
        os.close(pidfd)


class DirectLanes:
    """The sockets of the lanes this process delivers calls to (the driver: its host's
    processes; an agent: its host's), by (worker id, lane key); any thread may send."""

    def __init__(self) -> None:
        self._socks: dict[tuple[int, str], socket.socket] = {}
        self._lock = threading.Lock()
        self.refused = False  # the kernel has no pidfd_getfd: it will not later
        self._refused_by: set[int] = set()  # workers the kernel will not let us take from (not dumpable, say)
        self._ended: set[tuple[int, str]] = set()  # lanes dropped as their actor stopped (keys are never reused)

    def take(self, worker_id: int, pid: int, lane: str, fd: int) -> bool:
        """Core loop: adopt the descriptor a worker offered for ``lane``."""
        if self.refused or not hasattr(os, "pidfd_open") or (worker_id, lane) in self._ended:
            return False
        try:
            got = _take_fd(pid, fd)
        except OSError as err:  # (a worker that died meanwhile is no reason to stop trying)
            if err.errno == errno.ENOSYS:
                self.refused = True
                log.info("meshrt: calls go through the core loop (this kernel has no pidfd_getfd)")
            elif err.errno in (errno.EPERM, errno.EACCES):
                if not self._refused_by:
                    log.info("meshrt: calls to worker %d go through the core loop (the kernel refused "
                             "pidfd_getfd: %s)", worker_id, err)
                self._refused_by.add(worker_id)
            return False
        try:
            sock = socket.socket(fileno=got)
        except OSError:
            os.close(got)
            return False
        sock.setblocking(False)
        with self._lock:
            # Lanes of this worker whose thread ended (their actor stopped) go now.
            ended = [k for k, s in self._socks.items() if k[0] == worker_id and _hung_up(s)]
            old = [self._socks.pop(k) for k in ended]
            if (worker_id, lane) in self._socks:
                old.append(self._socks.pop((worker_id, lane)))
            self._socks[(worker_id, lane)] = sock
        for stale in old:
            stale.close()
        return True

    def refused_for(self, worker_id: int) -> bool:
        """The worker should offer no more lanes: none can be taken from it."""
        return self.refused or worker_id in self._refused_by

    def has(self, worker_id: int, lane: str) -> bool:
        return (worker_id, lane) in self._socks

    def offer_call(self, worker_id: int, msg, conn, src: int = 0) -> bool:
        """Any thread: send a call its caller made with nothing else in flight to the
        process through the actor's lane, when it has one and nothing sent before is
        still queued on ``conn``, the process's connection (it would be overtaken). The
        lane runs it once the process has taken what ``conn`` carried before it."""
        lane = lane_of(msg)
        if lane is None or (worker_id, lane) not in self._socks:
            return False
        after = conn.frames_sent_if_idle()
        if after is None:
            return False
        return self.send(worker_id, lane, msg, src, after)

    def send(self, worker_id: int, lane: str, msg, src: int, after: int) -> bool:
        """Any thread: write one call to the lane; False if it cannot go this way (the
        caller then sends it through the core connection; nothing was written)."""
        if (worker_id, lane) not in self._socks:
            return False
        args = msg.args
        if args.loans is None and len(args.data) + sum(memoryview(b).nbytes for b in args.buffers) > MAX_FRAME:
            return False
        try:
            frame = _frame(msg, src, after)
        except Exception:  # noqa: BLE001 - (the core connection's path says what is wrong)
            return False
        if len(frame) > MAX_FRAME:
            return False
        with self._lock:  # (not closed by another thread in the middle)
            sock = self._socks.get((worker_id, lane))
            if sock is None:
                return False
            try:
                sock.send(frame, _SEND_FLAGS)
                return True
            except (BlockingIOError, InterruptedError):
                return False
            except OSError as err:
                if err.errno in (errno.EMSGSIZE, errno.ENOBUFS, errno.ENOMEM):
                    return False  # (this call only: the lane is fine)
                del self._socks[(worker_id, lane)]  # its thread ended (actor stopped, process died)
        sock.close()
        return False

    def drop(self, worker_id: int, lane: str | None = None) -> None:
        """Close one lane's socket (its actor is being stopped: one offered later is
        refused), or every socket to ``worker_id``."""
        with self._lock:
            if lane is not None:
                self._ended.add((worker_id, lane))
            else:  # (the process is gone: so are its lanes)
                self._ended = {k for k in self._ended if k[0] != worker_id}
                self._refused_by.discard(worker_id)
            keys = [k for k in self._socks if k[0] == worker_id and (lane is None or k[1] == lane)]
            socks = [self._socks.pop(k) for k in keys]
        for sock in socks:
            sock.close()

    def close(self) -> None:
        with self._lock:
            socks, self._socks = list(self._socks.values()), {}
        for sock in socks:
            sock.close()

"""Direct lanes: a mesh actor's calls from the driver on its host, straight to the
thread that runs them.

A call normally reaches an actor's plain ``def`` endpoint in two steps: the core
loop of its process reads it, then hands it to the actor's lane thread (lanes.py).
On a small machine each thread wake-up costs more than the call itself. So each
lane of a process on the driver's host gets a socket of its own, read by the lane's
thread (helper_thread.py): the driver writes a call there and the thread that runs
it is the one that wakes. Replies still go back through the core connection.

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
import functools
import logging
import os
import pickle
import socket
import threading

from ..objstore.serialization import Payload
from . import messages as m

log = logging.getLogger("meshrt")

_SYS_PIDFD_GETFD = 438  # the same number on every Linux architecture
MAX_FRAME = 64 * 1024  # larger calls take the core connection
_SEND_FLAGS = int(socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)  # (an int: enum arithmetic per send costs)


# -- the worker's side --------------------------------------------------------------------

def offer(core, lane) -> None:
    """A new lane (Lanes.on_new_lane) of a process on the driver's host: give its
    thread a socket, and the driver the other end."""
    if (core.agent is not None or core.host_id != 0 or core.ctl is None or not hasattr(os, "pidfd_open")
            or os.environ.get("MESHRT_DIRECT_LANES", "1") == "0"):
        return
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    core.direct_offers[lane.key] = theirs
    lane.helper.attach_direct(mine, functools.partial(run_frame, core, lane))
    core.io.post(core.send_to, 0, m.DirectLaneOffer(lane.key, theirs.fileno()))


def run_frame(core, lane, packet: bytes) -> None:
    """On the lane's thread: run the call of one frame (``_frame``); one that may not run
    this way (its lane ended meanwhile, say) goes to the core loop as if it came from there."""
    # (only the driver holds the other end: see above)
    task_id, actor_id, method, data, buffers, num_returns, lent = pickle.loads(packet)
    if lent is not None:  # large bytes the driver lends until the call is over (loans.py)
        args = Payload(data, loans=lent)
    else:
        args = Payload(data, tuple(memoryview(b).toreadonly() for b in buffers)) if buffers else Payload(data)
    msg = m.ActorCall(task_id, actor_id, method, args, (), num_returns)
    if lane.retired or not core.executor.run_direct(msg, lane):
        core.io.post(core.handle_message, core.ctl, msg)


def _frame(msg: m.ActorCall) -> bytes:
    """A call as a plain tuple: the lane takes only calls without refs, store blocks,
    dependencies or a concurrency group, and a tuple pickles and loads several times
    faster than the message records."""
    args = msg.args
    if args.loans is not None:  # (the lender keeps the bytes themselves: only the loans go)
        return pickle.dumps((msg.task_id, msg.actor_id, msg.method, args.data, (), msg.num_returns, args.loans),
                            protocol=5)
    buffers = tuple(map(pickle.PickleBuffer, args.buffers)) if args.buffers else ()
    return pickle.dumps((msg.task_id, msg.actor_id, msg.method, args.data, buffers, msg.num_returns, None),
                        protocol=5)


def taken(core, lane: str) -> None:
    """The driver is done with the offered end: ours closes."""
    sock = core.direct_offers.pop(lane, None)
    if sock is not None:
        sock.close()


# -- the driver's side --------------------------------------------------------------------


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
    """The driver's direct sockets, by (worker id, lane key); any thread may send."""

    def __init__(self) -> None:
        self._socks: dict[tuple[int, str], socket.socket] = {}
        self._lock = threading.Lock()
        self.refused = False  # the kernel said no once: it will again

    def take(self, worker_id: int, pid: int, lane: str, fd: int) -> bool:
        """Core loop: adopt the descriptor a worker offered for ``lane``."""
        if self.refused or not hasattr(os, "pidfd_open"):
            return False
        try:
            sock = socket.socket(fileno=_take_fd(pid, fd))
        except OSError as err:
            self.refused = True
            log.info("meshrt: calls go through the core loop (the kernel refused pidfd_getfd: %s)", err)
            return False
        sock.setblocking(False)
        with self._lock:
            old = self._socks.pop((worker_id, lane), None)
            self._socks[(worker_id, lane)] = sock
        if old is not None:
            old.close()
        return True

    def has(self, worker_id: int, lane: str) -> bool:
        return (worker_id, lane) in self._socks

    def send(self, worker_id: int, lane: str, msg) -> bool:
        """Any thread: write one call to the lane; False if it cannot go this way (the
        caller then sends it through the core connection; nothing was written)."""
        if (worker_id, lane) not in self._socks:
            return False
        frame = _frame(msg)
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
            except OSError:  # the lane's thread ended (its actor stopped, its process died)
                del self._socks[(worker_id, lane)]
        sock.close()
        return False

    def drop(self, worker_id: int, lane: str | None = None) -> None:
        """Close one lane's socket, or every socket to ``worker_id``."""
        with self._lock:
            keys = [k for k in self._socks if k[0] == worker_id and (lane is None or k[1] == lane)]
            socks = [self._socks.pop(k) for k in keys]
        for sock in socks:
            sock.close()

    def close(self) -> None:
        with self._lock:
            socks, self._socks = list(self._socks.values()), {}
        for sock in socks:
            sock.close()

"""The work queue of one thread that runs calls, which may also read a direct socket.

A thread that runs calls (a lane's helper thread, helper_thread.py; the main thread
of a plain actor, executor.py) takes them from a queue the core loop fills. Once
given a socket of its own (direct_lanes.py), it reads that too, so a caller's frame
wakes the thread that runs it instead of the core loop first. Either way it takes
work in arrival order: a frame before anything posted after it arrived.

Written by hand instead of selectors plus queue.Queue: this is the path of every
call, and one poll over a socket and an eventfd, signalled only while the thread is
about to sleep, is the least a wake-up can cost.
"""

from __future__ import annotations

import logging
import os
import queue
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from . import spin

log = logging.getLogger("meshrt")


class Inbox:
    """``put`` from any thread; ``next`` from the one thread that takes the work."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._wake_fd: int | None = None  # (polling: a direct socket is attached)
        self._idle = False  # polling and about to block: put() must signal _wake_fd
        self._direct: socket.socket | None = None
        self._in_direct = False  # reading frames: one may be taken and not yet counted (busy())
        self._poller = None
        self._on_frame: Callable[[bytes], None] | None = None
        self._spin: spin.SpinWindow | None = None  # (polling: how long to poll before sleeping)
        self._spin_fds: tuple = ()
        self._wake_lock = threading.Lock()

    def put(self, item: Any) -> None:
        """Any thread: ``item`` is taken after everything put before it."""
        self._queue.put(item)
        if self._idle:  # (polling: wake the thread from its poll)
            self._signal()

    def get_nowait(self) -> Any:
        """The next item put, without reading the socket; queue.Empty if none."""
        return self._queue.get_nowait()

    def waiting(self) -> bool:
        """Something put waits to be taken (frames unread in the socket aside)."""
        return not self._queue.empty()

    def take(self, wanted: Callable[[Any], bool]) -> list:
        """Any thread: remove the items put so far that ``wanted`` picks (the rest stay, in order)."""
        items = []
        while True:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                break
        for other in items:
            if not wanted(other):
                self._queue.put(other)
        return [item for item in items if wanted(item)]

    def attach_direct(self, sock: socket.socket, on_frame: Callable[[bytes], None]) -> None:
        """Read ``sock`` (SOCK_SEQPACKET, one frame per packet) on the taking thread too,
        and run ``on_frame(packet)`` there for each, before anything put after the
        packet arrived. (Set up by that thread itself, when it takes this marker.)"""
        sock.setblocking(False)
        self.put(_Attach(sock, on_frame))

    def next(self) -> Any:
        """On the taking thread: the next item put, running direct frames meanwhile."""
        while True:
            item = self._queue.get() if self._direct is None else self._polled()
            if type(item) is not _Attach:
                return item
            self._start_polling(item.sock, item.on_frame)

    def direct_pending(self) -> bool:
        """Any thread: a frame sent before now waits unread in the direct socket, or is
        being read (taken, its call not yet counted by the lane)."""
        with self._wake_lock:  # (the socket is not closed, its number reused, meanwhile)
            sock = self._direct
            if sock is None:
                return False
            try:  # (first the socket, then the flag: a frame taken in between shows in the flag)
                if sock.recv(1, _PEEK):
                    return True
            except OSError:
                pass
        return self._in_direct

    def discard_queued(self) -> int:
        """Drop what was put and has not been taken; returns how many. A None (the
        end, asked for already) stays."""
        dropped = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return dropped
            if item is None:
                self.put(None)
                return dropped
            dropped += 1

    def close(self) -> None:
        """On the taking thread, as it ends: the caller's later writes fail (it falls back
        to the core loop); frames already written still run first."""
        sock = self._direct
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RD)
            except OSError:
                pass
            self._read_direct()
            self._close_direct()
        with self._wake_lock:
            if self._wake_fd is not None:
                os.close(self._wake_fd)
                self._wake_fd = None

    # -- polling the direct socket ------------------------------------------------------------

    def _start_polling(self, sock: socket.socket, on_frame) -> None:
        self._direct, self._on_frame = sock, on_frame
        try:
            self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except OSError:  # (no descriptor left: frames sent already run, later ones take the core loop)
            self.close()
            return
        self._poller = select.poll()  # (not select(): it refuses descriptors above 1023)
        self._poller.register(sock.fileno(), select.POLLIN)
        self._poller.register(self._wake_fd, select.POLLIN)
        try:
            limit = spin.limit_ns()
        except ValueError as err:  # (set for this process alone: the driver and agent check theirs)
            log.warning("meshrt: lanes do not spin in this process: %s", err)
            limit = 0
        if limit:
            self._spin, self._spin_fds = spin.SpinWindow(limit), (sock.fileno(), self._wake_fd)

    def _signal(self) -> None:
        with self._wake_lock:  # (not closed, its number reused, in between)
            if self._wake_fd is not None:
                os.eventfd_write(self._wake_fd, 1)

    def _polled(self):
        try:
            return self._next_polling()
        except Exception:  # noqa: BLE001 - the thread keeps serving through its queue alone
            log.exception("meshrt: a lane's direct socket failed; calls take the core loop")
            self.close()
            return self._queue.get()

    def _next_polling(self):
        """The next item put, running direct frames as they come (each one before
        whatever was put after it was sent: its caller sent nothing else first)."""
        get_nowait = self._queue.get_nowait
        while True:
            self._read_direct()
            if self._direct is None:  # (its caller is gone: back to the queue alone)
                return self._queue.get()
            try:
                item = get_nowait()
            except queue.Empty:
                self._idle = True
                try:
                    item = get_nowait()  # (put before put() could see _idle)
                except queue.Empty:
                    item = _EMPTY
            if item is not _EMPTY:
                self._idle = False
                self._read_direct()  # (a frame that arrived before the item was put runs first)
                return item
            try:
                posted = self._wait()
            finally:
                self._idle = False
            if posted:
                try:
                    os.eventfd_read(self._wake_fd)
                except BlockingIOError:
                    pass

    def _wait(self) -> bool:
        """Until the socket or the wake-up eventfd is ready: polling for the spin window
        first (spin.py), then asleep. True when it was the eventfd."""
        window = self._spin
        if window is not None:
            started = time.monotonic_ns()
            try:
                ready = window.wait(self._spin_fds)
            except OSError:  # (poll failed: sleep from now on)
                log.exception("meshrt: a lane's thread stops spinning")
                self._spin = window = None
                ready = 0
            if ready:
                return bool(ready & 2)  # (bit 1: the eventfd, second of _spin_fds)
        try:
            readable = [fd for fd, _events in self._poller.poll()]
        except InterruptedError:
            readable = ()
        if window is not None:
            window.slept(time.monotonic_ns() - started)
        return self._wake_fd in readable

    def _read_direct(self) -> None:
        sock = self._direct
        self._in_direct = True
        try:
            while sock is not None:
                try:
                    packet = sock.recv(_MAX_PACKET)
                except (BlockingIOError, InterruptedError):
                    return
                except OSError:
                    packet = b""
                if not packet:  # the caller went away: nothing more comes this way
                    self._close_direct()
                    return
                try:
                    self._on_frame(packet)
                except BaseException:  # noqa: BLE001 - the frame's call reports its own errors
                    log.exception("meshrt: error running a call from a direct lane")
        finally:
            self._in_direct = False

    def _close_direct(self) -> None:
        with self._wake_lock:
            sock, self._direct = self._direct, None
        if sock is not None:
            sock.close()


class _Attach:
    __slots__ = ("sock", "on_frame")

    def __init__(self, sock: socket.socket, on_frame) -> None:
        self.sock = sock
        self.on_frame = on_frame


_MAX_PACKET = 1 << 20
_PEEK = int(socket.MSG_PEEK | socket.MSG_DONTWAIT)
_EMPTY = object()

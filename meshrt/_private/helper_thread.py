"""One thread that runs plain ``def`` methods of an async actor, in arrival order.

Written by hand instead of ``ThreadPoolExecutor(1)``: every actor call passes through
here, and the pool's per-item Future, lock and thread-count check cost more than the
call itself on a small machine. ``post`` is the hot path (no Future); ``submit`` keeps
the Executor interface for ``loop.run_in_executor``.
"""

from __future__ import annotations

import concurrent.futures
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


class HelperThread(concurrent.futures.Executor):
    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._wake_fd: int | None = None  # (polling: a direct socket is attached)
        self._idle = False  # polling and about to block: post() must signal _wake_fd
        self._direct: socket.socket | None = None
        self._in_direct = False  # reading frames: one may be taken and not yet counted (busy())
        self._poller = None
        self._on_frame: Callable[[bytes], None] | None = None
        self._spin: spin.SpinWindow | None = None  # (polling: how long to poll before sleeping)
        self._spin_fds: tuple = ()
        self._wake_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def ident(self) -> int | None:
        return self._thread.ident

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def post(self, fn: Callable, *args: Any) -> None:
        """Run ``fn(*args)`` on the helper thread after everything posted before it."""
        self._put((fn, args))

    def _put(self, item) -> None:
        self._queue.put(item)
        if self._idle:  # (polling: wake the thread from its select)
            self._signal()

    def attach_direct(self, sock: socket.socket, on_frame: Callable[[bytes], None]) -> None:
        """Read ``sock`` (SOCK_SEQPACKET, one frame per packet) on this thread too, and run
        ``on_frame(packet)`` for each, before anything posted after the packet arrived."""
        sock.setblocking(False)
        self._put((self._start_polling, (sock, on_frame)))

    def _start_polling(self, sock: socket.socket, on_frame) -> None:
        self._direct, self._on_frame = sock, on_frame
        try:
            self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except OSError:  # (no descriptor left: frames sent already run, later ones take the core loop)
            self._stop_polling()
            return
        self._poller = select.poll()  # (not select(): it refuses descriptors above 1023)
        self._poller.register(sock.fileno(), select.POLLIN)
        self._poller.register(self._wake_fd, select.POLLIN)
        try:
            limit = spin.limit_ns()
        except ValueError as err:  # (set for this process alone: the driver and agent check theirs)
            logging.getLogger("meshrt").warning("meshrt: lanes do not spin in this process: %s", err)
            limit = 0
        if limit:
            self._spin, self._spin_fds = spin.SpinWindow(limit), (sock.fileno(), self._wake_fd)

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

    def _signal(self) -> None:
        with self._wake_lock:  # (not closed, its number reused, in between)
            if self._wake_fd is not None:
                os.eventfd_write(self._wake_fd, 1)

    def submit(self, fn, /, *args, **kwargs) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as err:  # noqa: BLE001 - handed to whoever waits
                future.set_exception(err)

        self._put((run, ()))
        return future

    def discard_queued(self) -> int:
        """Drop what was posted and has not started (its actor ended); returns how many."""
        dropped = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return dropped
            if item is None:  # (a shutdown already asked for stays asked for)
                self._put(None)
                return dropped
            dropped += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._put(None)
        if wait and threading.current_thread() is not self._thread:
            self._thread.join()

    def _run(self) -> None:
        get = self._queue.get
        try:
            while True:
                item = get() if self._direct is None else self._polled()
                if item is None:
                    return
                _call(item)
        finally:
            self._stop_polling()

    def _polled(self):
        try:
            return self._next_polling()
        except Exception:  # noqa: BLE001 - the lane keeps serving through its queue alone
            logging.getLogger("meshrt").exception("meshrt: a lane's direct socket failed; calls take the core loop")
            self._stop_polling()
            return self._queue.get()

    def _next_polling(self):
        """The next posted item, running direct frames as they come (each one before
        whatever was posted after it was sent: its caller sent nothing else first)."""
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
                    item = get_nowait()  # (posted before post() could see _idle)
                except queue.Empty:
                    item = _EMPTY
            if item is not _EMPTY:
                self._idle = False
                self._read_direct()  # (a frame that arrived before the item was posted runs first)
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
                logging.getLogger("meshrt").exception("meshrt: a lane's thread stops spinning")
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
                _call((self._on_frame, (packet,)))
        finally:
            self._in_direct = False

    def _close_direct(self) -> None:
        with self._wake_lock:
            sock, self._direct = self._direct, None
        if sock is not None:
            sock.close()

    def _stop_polling(self) -> None:
        """Thread end: the caller's later writes fail (it falls back to the core loop);
        frames already written still run, on whatever is there to run them."""
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


_MAX_PACKET = 1 << 20
_PEEK = int(socket.MSG_PEEK | socket.MSG_DONTWAIT)
_EMPTY = object()


def _call(item) -> None:
    fn, args = item
    try:
        fn(*args)
    except BaseException:  # noqa: BLE001 - the callables report their own errors
        logging.getLogger("meshrt").exception("meshrt: error on the actor's helper thread")

"""One thread that runs plain ``def`` methods of an async actor, in arrival order.

Written by hand instead of ``ThreadPoolExecutor(1)``: every actor call passes through
here, and the pool's per-item Future, lock and thread-count check cost more than the
call itself on a small machine. ``post`` is the hot path (no Future); ``submit`` keeps
the Executor interface for ``loop.run_in_executor``.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any


class HelperThread(concurrent.futures.Executor):
    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
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
        self._queue.put((fn, args))

    def submit(self, fn, /, *args, **kwargs) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as err:  # noqa: BLE001 - handed to whoever waits
                future.set_exception(err)

        self._queue.put((run, ()))
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
                self._queue.put(None)
                return dropped
            dropped += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._queue.put(None)
        if wait and threading.current_thread() is not self._thread:
            self._thread.join()

    def _run(self) -> None:
        get = self._queue.get
        while True:
            item = get()
            if item is None:
                return
            fn, args = item
            try:
                fn(*args)
            except BaseException:  # noqa: BLE001 - the callables report their own errors
                import logging

                logging.getLogger("meshrt").exception("meshrt: error on the actor's helper thread")

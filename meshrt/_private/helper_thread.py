"""One thread that runs plain ``def`` methods of an async actor, in arrival order.

Written by hand instead of ``ThreadPoolExecutor(1)``: every actor call passes through
here, and the pool's per-item Future, lock and thread-count check cost more than the
call itself on a small machine. ``post`` is the hot path (no Future); ``submit`` keeps
the Executor interface for ``loop.run_in_executor``. Its queue, and the direct socket
a lane's thread reads besides, are an Inbox (inbox.py).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any

from .inbox import Inbox


class HelperThread(Inbox, concurrent.futures.Executor):
    def __init__(self, name: str) -> None:
        Inbox.__init__(self)
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
        self.put((fn, args))

    def submit(self, fn, /, *args, **kwargs) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as err:  # noqa: BLE001 - handed to whoever waits
                future.set_exception(err)

        self.put((run, ()))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.put(None)
        if wait and threading.current_thread() is not self._thread:
            self._thread.join()

    def _run(self) -> None:
        try:
            while True:
                item = self.next()
                if item is None:
                    return
                fn, args = item
                try:
                    fn(*args)
                except BaseException:  # noqa: BLE001 - the callables report their own errors
                    logging.getLogger("meshrt").exception("meshrt: error on the actor's helper thread")
        finally:
            self.close()

"""The calls a concurrent actor (threaded, or async) has been handed and not finished.
Its graceful end (its handles dropped, ``__ray_terminate__``) waits for them before
its exit hooks run and the process leaves, as Ray's does: a call already running is
answered, not failed. A plain actor needs no count: its end is queued behind them."""

from __future__ import annotations

import threading


class UnfinishedCalls:
    def __init__(self) -> None:
        self._count = 0
        self._changed = threading.Condition()

    def add(self) -> None:
        with self._changed:
            self._count += 1

    def done(self) -> None:
        with self._changed:
            self._count -= 1
            if self._count <= 1:
                self._changed.notify_all()

    def wait_for_others(self) -> None:
        """Block until every counted call but the one asking has ended."""
        with self._changed:
            self._changed.wait_for(lambda: self._count <= 1)

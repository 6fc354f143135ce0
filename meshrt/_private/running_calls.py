"""The calls a concurrent actor (threaded, or async) is running. Its graceful end (its
handles dropped, ``__ray_terminate__``) lets them finish before its exit hooks run and
the process leaves, as Ray's does: a call already running is answered, not failed.
Calls that would start after the end began are not run (their callers learn that the
actor died, as in Ray), nor is a second end. Only started calls count: one still queued
behind the end (for a pool thread or a ``max_concurrency`` slot) could never finish
first. A plain actor needs none of this: its end is queued behind its calls."""

from __future__ import annotations

import threading
from collections.abc import Callable


class RunningCalls:
    def __init__(self) -> None:
        self._count = 0
        self._ending = False
        self._changed = threading.Condition()

    def admit(self, end: bool) -> bool:
        """May this call start? An ordinary call is then counted until ``done()``; the
        first end is admitted (then ``wait_idle()``), any call after it is not."""
        with self._changed:
            if self._ending:
                return False
            if end:
                self._ending = True
            else:
                self._count += 1
            return True

    def done(self) -> None:
        with self._changed:
            self._count -= 1
            if self._count == 0:
                self._changed.notify_all()

    def wait_idle(self) -> None:
        """Block until every admitted call has ended (the end's own thread, not the loop)."""
        with self._changed:
            self._changed.wait_for(lambda: self._count == 0)

    def run(self, end: bool, fn: Callable, *args) -> None:
        """``fn(*args)`` on a pool thread, admitted, counted, and (an end) once the rest ended."""
        if not self.admit(end):
            return  # (after the actor's end began: its caller hears that it died)
        try:
            if end:
                self.wait_idle()
            fn(*args)
        finally:
            if not end:
                self.done()

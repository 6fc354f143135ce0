"""``wait()``: split refs (and streaming generators) into ready and not ready.

A streaming generator counts as ready once its next ref is there, or it has ended
(as in Ray, so a loop can wait on many generators and plain refs at once).
"""

from __future__ import annotations

import time

from .portal import Wakeup
from .refs import ObjectRefGenerator


class _NextOf:
    """A streaming generator in ``wait()``: ready when its next value is, or it ended."""

    __slots__ = ("stream",)

    def __init__(self, stream) -> None:
        self.stream = stream

    @property
    def payload(self):  # (the entry interface wait() reads: not None = ready)
        return True if self.stream.items or self.stream.finished else None

    owner = None
    fetching = True  # (nothing to fetch: its values arrive by themselves)

    def add_waiter(self, waiter) -> None:
        self.stream.waiters.append(waiter)
        if self.payload is not None:  # (arrived meanwhile: fire ourselves, as entries do)
            waiter.fire(None)

    def remove_waiter(self, waiter) -> None:
        try:
            self.stream.waiters.remove(waiter)
        except ValueError:
            pass


def wait(core, refs: list, num_returns: int, timeout: float | None) -> tuple[list, list]:
    entries = core.table.entries
    found = [_NextOf(r._stream) if type(r) is ObjectRefGenerator else (entries.get(r._id) or core._entry_for_unknown(r))
             for r in refs]
    deadline = None if timeout is None else time.monotonic() + timeout

    def ready_count():
        return sum(1 for e in found if e.payload is not None)

    if ready_count() < num_returns and timeout != 0:
        if core.io.in_loop():
            raise RuntimeError("meshrt.wait() was called from inside meshrt's event loop")
        # (as get() does: refuse a wait that could never end, an actor waiting on itself)
        core.refuse_waiting_on_itself([e for e in found if e.payload is None and type(e) is not _NextOf])
        waker = Wakeup()
        for e in found:
            if e.payload is None:
                if e.owner != core.worker_id and not e.fetching:
                    core.io.post(core._fetch, e)
                e.add_waiter(waker)
        core.on_block(True)
        try:
            while ready_count() < num_returns:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                waker.wait(remaining)
                for e in found:  # (a generator's waiter fires once: watch it again)
                    if type(e) is _NextOf and e.payload is None and waker not in e.stream.waiters:
                        e.add_waiter(waker)
        finally:
            core.on_block(False)
            for e in found:
                if e.payload is None:
                    e.remove_waiter(waker)
    ready, not_ready = [], []
    for ref, e in zip(refs, found, strict=True):
        if e.payload is not None and len(ready) < num_returns:
            ready.append(ref)
            if type(e) is not _NextOf:  # (as in Ray, an error waited on is not reported unhandled)
                e.seen = True
        else:
            not_ready.append(ref)
    return ready, not_ready

"""How long a lane's thread polls for its next call before it goes to sleep.

A call that finds the thread asleep on an idle CPU waits for that CPU to wake: tens of
microseconds on a virtual machine whose guest halts idle CPUs (a deep C-state costs
the same on bare metal), more than a small call takes to run. So after each call the
thread polls its socket for a short window (csrc/spin_poll.c: without the GIL, and
yielding the CPU between looks, so a thread with work on that CPU runs first; the
window still counts as CPU time used). A busy lane also keeps its CPU awake for the
threads its calls wake.

Only busy lanes spin: one whose next call came within the window spins the whole
window after each call; one that waited longer spins half as long each time, down to
not at all (Linux's haltpoll governor adapts the same way), so a lane called less
often than once a millisecond soon stops spinning. ``MESHRT_SPIN_US`` (default 1000) is the
window, up to 10 ms; 0 turns spinning off.
"""

from __future__ import annotations

import os

from .. import _C

DEFAULT_US = 1000
MAX_US = 10_000
_SHORTEST_NS = 50_000  # (a window halved below this is none)


def limit_ns() -> int:
    """The window, from ``MESHRT_SPIN_US``; a bad value is named (driver and agent
    check it as they start)."""
    raw = os.environ.get("MESHRT_SPIN_US")
    if raw is None or raw == "":
        return DEFAULT_US * 1000
    try:
        us = float(raw)
    except ValueError:
        us = -1.0
    if not 0 <= us <= MAX_US:
        raise ValueError(f"MESHRT_SPIN_US={raw!r}: give the microseconds a lane's thread polls for its next "
                         f"call before sleeping, at most {MAX_US} (default {DEFAULT_US}; 0 turns it off)")
    return int(us * 1000)


class SpinWindow:
    """One thread's window: ``wait`` before sleeping, ``slept`` after."""

    __slots__ = ("limit", "ns")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.ns = limit

    def wait(self, fds: tuple) -> int:
        """Poll ``fds`` for the current window: a mask of the ready ones (bit i: fds[i]),
        0 when none became ready."""
        return _C.spin_poll(fds, self.ns) if self.ns > 0 else 0

    def slept(self, idle_ns: int) -> None:
        """The window ran out and the thread slept: ``idle_ns`` from the window's start
        until it woke. Woken within the whole window: a busy lane, whose next wait
        spins it all. Otherwise half as long as this time."""
        if idle_ns <= self.limit:
            self.ns = self.limit
        else:
            half = self.ns // 2
            self.ns = half if half >= min(_SHORTEST_NS, self.limit) else 0


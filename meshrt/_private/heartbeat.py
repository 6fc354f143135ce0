"""Liveness between the head and its host agents.

A host that is hung, stopped (SIGSTOP, a debugger) or cut off without a FIN or RST
(power lost, a network partition) keeps its TCP connection open: nothing would ever
fail its actors' callers, and an agent would serve a head that is gone. So each side
sends a Heartbeat every quarter of the timeout and watches what arrives from the
other: a peer from which nothing arrived for ``MESHRT_HOST_TIMEOUT_S`` seconds
(default 30) is taken for dead.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from . import messages as m

DEFAULT_TIMEOUT_S = 30.0


def timeout_s() -> float:
    raw = os.environ.get("MESHRT_HOST_TIMEOUT_S")
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if value <= 0:
        raise ValueError(f"MESHRT_HOST_TIMEOUT_S={raw!r}: give the seconds of silence after which a host is "
                         "taken for dead (> 0)")
    return value


class Watch:
    """Sends heartbeats on the connections it watches, and calls ``on_silent(conn)``
    (once, on the loop) for one from which nothing arrived for ``timeout`` seconds."""

    def __init__(self, loop, timeout: float, on_silent: Callable) -> None:
        self.loop = loop
        self.timeout = timeout
        self.on_silent = on_silent
        self.watched: dict[int, list] = {}  # id(conn) -> [conn, progress, when it last changed]
        self._last_tick = loop.time()
        self._timer = loop.call_later(timeout / 4, self._tick)

    def add(self, conn) -> None:
        self.watched[id(conn)] = [conn, conn.progress(), self.loop.time()]

    def stop(self) -> None:
        self._timer.cancel()
        self.watched.clear()

    def _tick(self) -> None:
        now = self.loop.time()
        stalled = now - self._last_tick > self.timeout / 2
        self._last_tick = now
        for key, seen in list(self.watched.items()):
            conn = seen[0]
            if conn.closed:
                del self.watched[key]
                continue
            progress = conn.progress()
            if progress != seen[1] or stalled:
                # (after a stall of this loop, what the peer sent meanwhile may still wait
                # unread in the socket: judge from the next tick, not this one)
                seen[1], seen[2] = progress, now
            elif now - seen[2] > self.timeout:
                del self.watched[key]
                self.on_silent(conn, now - seen[2])
                continue
            conn.send(m.Heartbeat())
        self._timer = self.loop.call_later(self.timeout / 4, self._tick)

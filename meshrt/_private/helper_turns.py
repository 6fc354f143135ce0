"""A mesh actor's async endpoint runs after the plain calls that reached its lane
before it (each actor's calls run in arrival order, as in Monarch), so it waits for its
turn here. A lane's thread that blocks in get() on such a call lets it go at once: the
lane could never finish first (a plain endpoint waiting on an async one of its own actor)."""

from __future__ import annotations

import asyncio
import threading


class HelperTurns:
    def __init__(self) -> None:
        self._waiting: dict[int, tuple] = {}  # task id -> (lane, future that lets it go)
        self._lock = threading.Lock()

    def lane_blocks(self, lane, task_ids: frozenset, loop: asyncio.AbstractEventLoop) -> None:
        """On ``lane``'s thread, about to block on ``task_ids``: those waiting for it go on."""
        with self._lock:
            lane.waits_on = task_ids
            ready = [self._waiting.pop(t)[1] for t in task_ids if self._waiting.get(t, (None,))[0] is lane]
        for fut in ready:
            loop.call_soon_threadsafe(_set_if_pending, fut)

    async def wait(self, lanes, lane_key: str, task_id: int, loop: asyncio.AbstractEventLoop) -> None:
        """Loop: return once the plain calls for ``lane_key`` that arrived before call
        ``task_id`` have run, or as soon as that lane's thread blocks waiting on the call."""
        lane = lanes.route(lane_key)
        with self._lock:
            if task_id in lane.waits_on:
                return
            skip = loop.create_future()
            self._waiting[task_id] = (lane, skip)
        # (a marker through the lane's queue: the waiting calls resume in arrival order)
        drained = asyncio.wrap_future(lanes.marker(lane_key), loop=loop)
        lane.turns_waiting += 1
        try:
            await asyncio.wait((skip, drained), return_when=asyncio.FIRST_COMPLETED)
        finally:
            lane.turns_waiting -= 1
            with self._lock:
                self._waiting.pop(task_id, None)


def _set_if_pending(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)

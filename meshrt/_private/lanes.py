"""Lanes: one helper thread per mesh actor for the plain ``def`` methods of a process.

A process of a mesh may host several actor meshes. As in Monarch, each actor runs
its own plain ``def`` endpoints one at a time, in arrival order, without waiting for
the other actors of its process: so a blocking endpoint of one actor (``.get()`` on
another actor of the same process, a collective) never stalls the others. The caller
names the lane in the method it sends (``"call_sync:<actor key>"``), so the core
loop routes a call without unpickling its arguments. Methods without a lane (every
plain method of a Ray-style async actor, a process mesh's own ``stop``...) share the
default lane, the executor's ``pool``.
"""

from __future__ import annotations

import logging
import threading

from .helper_thread import HelperThread

SEP = ":"
MAIN = "*"  # the direct lane of a plain actor's main thread (no mesh actor's key is "*")
log = logging.getLogger("meshrt")


def _nothing() -> None:
    return None


def split(method: str) -> tuple[str, str]:
    """``"call_sync:key"`` -> ``("call_sync", "key")``; ``"ping"`` -> ``("ping", "")``."""
    target, _, lane = method.partition(SEP)
    return target, lane


def named(method: str, lane: str) -> str:
    return f"{method}{SEP}{lane}"


class Lane:
    """One helper thread and what the executor tracks about it."""

    __slots__ = ("key", "helper", "submitted", "done", "waits_on", "retired", "turns_waiting")

    def __init__(self, key: str, helper: HelperThread) -> None:
        self.key = key
        self.helper = helper
        self.submitted = 0  # written under Lanes.lock (post, count_in)
        self.done = 0  # written by the lane's thread only
        self.waits_on: frozenset = frozenset()  # calls its thread is blocked in get() on
        self.retired = False
        self.turns_waiting = 0  # async calls waiting for this lane's turn (the loop's only)

    def busy(self) -> bool:
        """Calls posted here before now have not all finished, or async calls that
        arrived before now still wait their turn behind them (a later one must not
        overtake those), or a call sent to the lane's own socket is not counted yet."""
        return self.done != self.submitted or self.turns_waiting > 0 or self.helper.direct_pending()


class Lanes:
    def __init__(self, default: HelperThread, name: str) -> None:
        self.name = name
        self.default = Lane("", default)
        self._lanes: dict[str, Lane] = {}
        self._retired: set[str] = set()  # keys of stopped actors: their late calls take the default lane
        self._by_thread: dict[int | None, Lane] = {default.ident: self.default}
        self.lock = threading.Lock()
        self.on_new_lane = None  # (lane) -> None, called with the lock held (direct lanes)

    def route(self, key: str) -> Lane:
        """The lane a call naming ``key`` runs on (made on first use; a retired one's
        late calls go to the default lane, where they fail fast: their actor is gone)."""
        if not key:
            return self.default
        with self.lock:
            return self._lane(key)

    def post(self, key: str, fn, *args) -> Lane:
        """Core loop: run ``fn(*args, lane)`` on the lane for ``key``, after what was posted there before."""
        with self.lock:  # (against retire(): nothing is posted behind a lane's end)
            lane = self._lane(key) if key else self.default
            lane.submitted += 1
            lane.helper.post(fn, *args, lane)
        return lane

    def count_in(self, lane: Lane) -> None:
        """A call the lane's thread took from its own socket (direct_lanes.py) and runs now."""
        with self.lock:
            lane.submitted += 1

    def marker(self, key: str):
        """A concurrent Future done once what was posted to ``key``'s lane before now has
        run (under the lock: a lane retired meanwhile gives the default lane's)."""
        with self.lock:
            lane = self._lane(key) if key else self.default
            return lane.helper.submit(_nothing)

    def _lane(self, key: str) -> Lane:
        lane = self._lanes.get(key)
        if lane is None:
            if key in self._retired:
                return self.default
            helper = HelperThread(f"{self.name}-{key.partition('#')[0][:24]}")
            lane = self._lanes[key] = Lane(key, helper)
            self._by_thread[helper.ident] = lane
            if self.on_new_lane is not None:
                try:
                    self.on_new_lane(lane)
                except Exception:  # noqa: BLE001 - the lane serves from its queue all the same
                    log.exception("meshrt: lane %s could not be set up for direct calls", key)
        return lane

    def current(self) -> Lane | None:
        """The lane whose thread this is, if any."""
        return self._by_thread.get(threading.get_ident())

    def retire(self, key: str) -> None:
        """The lane's actor was stopped (or never started): its thread ends once what was
        posted there has run; later calls naming it take the default lane."""
        with self.lock:
            self._retired.add(key)
            lane = self._lanes.pop(key, None)
            if lane is None:
                return
            lane.retired = True
            lane.helper.shutdown(wait=False)
            for ident, other in list(self._by_thread.items()):  # (threads of lanes retired before)
                if other.retired and not other.helper.alive:
                    del self._by_thread[ident]

    def all(self) -> list[Lane]:
        with self.lock:
            return [self.default, *self._lanes.values()]

    def drain_others(self, timeout: float | None = None) -> None:
        """From one lane's thread: wait until every other lane has run what was posted
        to it before now (so a process stopping finishes the calls it was given)."""
        me = self.current()
        events = []
        for lane in self.all():
            if lane is me:
                continue
            done = threading.Event()
            with self.lock:
                if lane.retired:
                    continue
                lane.helper.post(done.set)
            events.append(done)
        for done in events:
            done.wait(timeout)

    def discard_queued(self) -> None:
        for lane in self.all():
            lane.helper.discard_queued()

    def shutdown(self) -> None:
        for lane in self.all():
            lane.helper.shutdown(wait=False)

"""How much work the pool sends at once, from how long each function's chunks take.

Two numbers per function, from a moving average of how long one of its chunks runs:

- chunks per call: tiny chunks (one item of ``apply_async``, ``imap``'s chunksize 1)
  travel several to a call, about ``_CALL_S`` of work, so a call's own cost (a round
  trip to the actor) is shared, as the standard library shares a pipe write's;
- calls in flight per worker: enough to keep about ``_QUEUED_S`` of work queued in
  the worker's process (tiny work: up to ``_MOST_IN_FLIGHT``, so it never waits for
  its next call), down to one for long chunks, so that at the end no worker sits idle
  while another still holds several (the standard library's workers take one task at a
  time from a shared queue, for the same reason).

A function not seen yet (or a lambda made anew for each call) gets one chunk per call
and ``_FIRST_IN_FLIGHT`` calls until its first chunk comes back.
"""

from __future__ import annotations

import collections
from typing import Any

_QUEUED_S = 0.01
_MOST_IN_FLIGHT = 32
_FIRST_IN_FLIGHT = 2
_CALL_S = 0.001
_MOST_PER_CALL = 64
_KEPT = 256  # functions remembered (the least recently seen is forgotten first)


class Pace:
    def __init__(self) -> None:
        self._seconds: collections.OrderedDict = collections.OrderedDict()  # function -> seconds per chunk

    def chunks_per_call(self, func: Any) -> int:
        seconds = self._seconds.get(_key(func))
        if seconds is None or seconds >= _CALL_S / 2:
            return 1
        return min(_MOST_PER_CALL, int(_CALL_S / max(seconds, 1e-6)))

    def calls_in_flight(self, func: Any) -> int:
        seconds = self._seconds.get(_key(func))
        if seconds is None:
            return _FIRST_IN_FLIGHT
        per_call = seconds * self.chunks_per_call(func)
        return max(1, min(_MOST_IN_FLIGHT, int(_QUEUED_S / max(per_call, 1e-6)) + 1))

    def observed(self, func: Any, seconds_per_chunk: float) -> None:
        key = _key(func)
        before = self._seconds.pop(key, None)
        self._seconds[key] = seconds_per_chunk if before is None else 0.7 * before + 0.3 * seconds_per_chunk
        if len(self._seconds) > _KEPT:
            self._seconds.popitem(last=False)


def _key(func: Any) -> Any:
    try:
        hash(func)
    except TypeError:  # (an unhashable callable object: known by identity)
        return id(func)
    return func

"""Monarch's ``RDMAAction``: reads and writes of RDMABuffers queued, then submitted as
one unit that completes when every one of them has.

``action.read_remote(dst, buf)`` / ``action.write_remote(buf, src)`` queue whole-buffer
moves with RDMABuffer's meaning (sizes in bytes); ``submit()`` starts them all at once
(each on its own path: shared memory, CUDA IPC or UCX) and returns a Future for the
batch, which raises the first failure once all have ended. As in Monarch, two queued
ops may not touch the same local memory where one of them writes it (a read into it):
that is refused when the second op is queued. ``fetch_add`` and ``compare_and_swap``
are Monarch's names for remote atomics, which Monarch does not support yet either.
"""

from __future__ import annotations

import time
from typing import Any

from .mesh.future import Future
from .rdma import RDMABuffer, _bytes_of, _checked_timeout
from .tensor.memory import region_of


class RDMAAction:
    """A batch of RDMABuffer reads and writes: queue them, then ``submit()``."""

    def __init__(self) -> None:
        self._ops: list[tuple[str, RDMABuffer, Any, tuple]] = []  # (kind, buffer, local view, (device, start, end))

    def read_remote(self, dst: Any, src: RDMABuffer) -> RDMAAction:
        """Queue a read of the whole of ``src`` into the first ``src.size()`` bytes of ``dst``."""
        buf = _buffer(src, "read_remote(dst, src)")
        view = _bytes_of(dst, "read_remote(dst)")
        if view.nbytes < buf.size():
            raise ValueError(f"read_remote(dst, src): dst holds {view.nbytes} bytes, less than src's {buf.size()}; "
                             f"give a destination of at least src.size() bytes")
        return self._queue("read", buf, view, buf.size())

    def write_remote(self, dst: RDMABuffer, src: Any) -> RDMAAction:
        """Queue a write of all of ``src`` into ``dst`` from its first byte."""
        buf = _buffer(dst, "write_remote(dst, src)")
        view = _bytes_of(src, "write_remote(src)")
        if view.nbytes > buf.size():
            raise ValueError(f"write_remote(dst, src): src holds {view.nbytes} bytes, more than dst's {buf.size()}; "
                             f"write at most dst.size() bytes")
        return self._queue("write", buf, view, view.nbytes)

    def fetch_add(self, src: RDMABuffer, dst: Any, add: int) -> RDMAAction:
        raise NotImplementedError("RDMAAction.fetch_add: remote atomics are not supported (nor in Monarch yet); "
                                  "read, add and write back inside one actor's endpoint instead")

    def compare_and_swap(self, src: RDMABuffer, dst: Any, compare: int, swap: int) -> RDMAAction:
        raise NotImplementedError("RDMAAction.compare_and_swap: remote atomics are not supported (nor in Monarch "
                                  "yet); guard the buffer with an actor's endpoint instead")

    def submit(self, *, timeout: float = 60) -> Future:
        """Start every queued op; the Future resolves to None once all are done (each
        within ``timeout`` s), or raises the first failure. Submitting again runs the
        batch again."""
        limit = _checked_timeout(timeout, "submit")
        started = [self._start(kind, buf, view, limit) for kind, buf, view, _ in self._ops]

        async def aget() -> None:
            failure = None
            for future in started:
                try:
                    await future
                except Exception as err:  # noqa: BLE001 - every op ends before the first failure is raised
                    failure = failure or err
            if failure is not None:
                raise failure

        def get(wait: float | None) -> None:
            deadline = None if wait is None else time.monotonic() + wait
            failure = None
            for future in started:
                try:
                    future.get(None if deadline is None else max(deadline - time.monotonic(), 0))
                except TimeoutError:
                    raise
                except Exception as err:  # noqa: BLE001
                    failure = failure or err
            if failure is not None:
                raise failure

        return Future(aget, get)

    def _queue(self, kind: str, buf: RDMABuffer, view: Any, nbytes: int) -> RDMAAction:
        region = region_of(view, f"{kind}_remote")
        span = (region.device, region.ptr, region.ptr + nbytes)
        for i, (other_kind, _, _, other) in enumerate(self._ops):
            overlaps = span[0] == other[0] and span[1] < other[2] and other[1] < span[2]
            if overlaps and "read" in (kind, other_kind):
                raise ValueError(f"RDMAAction: this {kind}_remote's local memory overlaps that of op {i} "
                                 f"({other_kind}_remote), and a read writes it: the batch would race; use "
                                 f"separate memory, or submit them one after the other")
        self._ops.append((kind, buf, view, span))
        return self

    @staticmethod
    def _start(kind: str, buf: RDMABuffer, view: Any, timeout: float) -> Future:
        if kind == "read":
            return buf.read_into(view, timeout=timeout)
        return buf.write_from(view, timeout=timeout)

    def __repr__(self) -> str:
        return f"<RDMAAction of {len(self._ops)} op(s)>"


def _buffer(buf: Any, what: str) -> RDMABuffer:
    if not isinstance(buf, RDMABuffer):
        raise TypeError(f"{what}: expected an RDMABuffer, got {type(buf).__qualname__}")
    return buf

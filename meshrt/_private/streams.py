"""Owner-side state of one streaming generator call (``num_returns="streaming"``)."""

from __future__ import annotations

import asyncio
import collections
import time

from .. import exceptions as exc
from . import ids
from .portal import AsyncWaiter, Wakeup, bridge_for
from .refs import DynamicObjectRefGenerator, ObjectRef


class Stream:
    """Refs in arrival order; ``end`` marks the generator finished (optionally with an error).

    The loop thread pushes, user threads pop: ``items`` is a deque (atomic append and
    popleft) and waiters follow the same publish-then-fire rule as object entries.
    """

    __slots__ = ("task_id", "items", "finished", "next_index", "waiters", "closed", "done_ref", "dynamic")

    def __init__(self, task_id: int) -> None:
        self.task_id = task_id
        self.items: collections.deque = collections.deque()
        self.finished = False
        self.next_index = 0
        self.waiters: list = []
        self.closed = False
        self.done_ref: ObjectRef | None = None
        self.dynamic = False

    def as_dynamic(self, pending) -> ObjectRef:
        """A ``num_returns="dynamic"`` call (Ray's older generator form): its worker streams
        the values as for "streaming", and the caller gets one ref, the completion ref,
        which the end resolves to a DynamicObjectRefGenerator of them (``_end_dynamic``)."""
        self.dynamic = True
        pending.num_returns = -1  # (what the worker is asked for)
        ref, self.done_ref = self.done_ref, None  # (held by the caller only: dropping it frees it)
        return ref

    def _fire(self) -> None:
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            waiter.fire(None)

    def push(self, ref: ObjectRef, index: int) -> None:
        self.items.append(ref)
        self.next_index = index + 1
        self._fire()

    def end(self, core, error) -> None:
        """Loop thread: no more items; an error becomes one last ref that raises it."""
        if self.finished:
            return
        if self.dynamic:
            self._end_dynamic(core, error)
            return
        if error is not None and not self.closed:
            self._push_error(core, error)
        self.finished = True
        done = core.table.entries.get(ids.object_id(self.task_id, 0))
        if done is not None:
            core.table.resolve(done, error if error is not None else _none_payload())
            done.seen = True  # (an error is read as the last item: completed() need not be asked)
            core._check.append(done)
        self._fire()

    def _push_error(self, core, error) -> None:
        """The generator's error, as one more ref after its last value."""
        oid = ids.object_id(self.task_id, self.next_index + 1)
        core.table.resolve(core.table.owned(oid), error)
        self.items.append(ObjectRef(oid, core.worker_id, core.table.deltas))

    def _end_dynamic(self, core, error) -> None:
        """What the generator raised is its last ref's value, as in Ray; meshrt's own
        errors (its worker died, the call was cancelled) are the call's ref's instead."""
        from ..objstore.serialization import is_system_error, serialize

        own = error is not None and is_system_error(error)
        if error is not None and not own:
            self._push_error(core, error)
        self.finished = True
        done = core.table.entries.get(ids.object_id(self.task_id, 0))
        if done is not None:
            payload, held = (error, None) if own else serialize(DynamicObjectRefGenerator(self.items))
            core.table.resolve(done, payload, held)
            core._check.append(done)
        core.close_stream(self)  # (the refs now live in the value, or go with the error)

    def next_blocking(self, core, timeout: float | None) -> ObjectRef | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        blocked = False
        try:
            while True:
                if self.items:
                    return self.items.popleft()
                if self.finished:
                    return None
                waker = Wakeup()
                self.waiters.append(waker)
                if self.items or self.finished:
                    continue
                if not blocked:
                    core.on_block(True)
                    blocked = True
                remaining = None if deadline is None else deadline - time.monotonic()
                if not waker.wait(remaining) and not (self.items or self.finished):
                    raise exc.GetTimeoutError(
                        f"no value from the streaming generator within {timeout} s"
                    )
        finally:
            if blocked:
                core.on_block(False)

    async def next_async(self, core) -> ObjectRef | None:
        while True:
            if self.items:
                return self.items.popleft()
            if self.finished:
                return None
            loop = asyncio.get_running_loop()
            fut = loop.create_future()
            self.waiters.append(AsyncWaiter(fut, None if core.io.in_loop() else bridge_for(loop)))
            if self.items or self.finished:
                continue
            await fut

    def completed_ref(self, core) -> ObjectRef:
        if self.done_ref is None:
            raise RuntimeError("this generator's completion ref was not created")
        return self.done_ref


_NONE = None


def _none_payload():
    global _NONE
    if _NONE is None:
        from ..objstore.serialization import serialize

        _NONE = serialize(None)[0]
    return _NONE

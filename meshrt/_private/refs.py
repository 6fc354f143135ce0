"""ObjectRef and ObjectRefGenerator: the one awaitable ref type (STYLE 8).

A ref is a small handle (object id + owner worker id). Creating and dropping refs
only appends to the object table's delta queue; the counting happens on the core
loop. Refs have no public constructor: ``.remote()`` and ``put`` make them.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from ..objstore.serialization import ref_sink
from . import id_types, ids, state


class ObjectRef:
    """A future value: ``get(ref)``, ``await ref`` (in any event loop) or ``ref.get()``."""

    __slots__ = ("_id", "_owner", "_deltas", "__weakref__")

    def __init__(self, oid: int, owner: int, _deltas=None) -> None:
        self._id = oid
        self._owner = owner
        deltas = _deltas if _deltas is not None else state.deltas()
        self._deltas = deltas
        if deltas is not None:
            deltas.append((oid, 1))

    def __del__(self) -> None:
        deltas = self._deltas
        if deltas is not None:
            try:
                deltas.append((self._id, -1))
            except Exception:  # interpreter shutdown
                pass

    # -- identity -------------------------------------------------------------------

    def hex(self) -> str:
        return ids.to_hex(self._id, ids.OBJECT_HEX)

    def binary(self) -> bytes:
        return self._id.to_bytes(ids.OBJECT_BYTES, "big")

    def is_nil(self) -> bool:
        """Whether this is ``ObjectRef.nil()``, which names no object."""
        return self._id == _NIL_ID

    @classmethod
    def nil(cls) -> ObjectRef:
        """A ref that names no object (Ray's placeholder); getting it fails."""
        return cls(_NIL_ID, 0, _deltas=_NO_COUNT)

    @classmethod
    def size(cls) -> int:
        """An object id's length in bytes (``binary()``)."""
        return ids.OBJECT_BYTES

    def job_id(self) -> str | None:
        from . import context

        job = context.process.get("job_id")
        return id_types.JobID(job) if job is not None else None

    def task_id(self) -> str:
        return id_types.TaskID(ids.to_hex(ids.task_of(self._id)))

    def owner_id(self) -> int:
        return self._owner

    def __hash__(self) -> int:
        return hash(self._id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectRef) and other._id == self._id

    def __repr__(self) -> str:
        return f"ObjectRef({self.hex()})"

    def __reduce__(self):
        sink = ref_sink()
        if sink is not None:
            sink.append(self)
        return (_rebuild_ref, (self._id, self._owner))

    # -- values ---------------------------------------------------------------------

    def get(self, timeout: float | None = None) -> Any:
        """Block for the value, like ``meshrt.get(ref, timeout=...)``."""
        return state.core().get([self], timeout)[0]

    def __await__(self):
        return state.core().await_ref(self)

    def future(self):
        """A ``concurrent.futures.Future`` completed with the value (Ray's ``ref.future()``)."""
        return state.core().concurrent_future(self)

    def as_future(self) -> asyncio.Future:
        """An asyncio future in the running loop, completed with the value."""
        return asyncio.ensure_future(_awaited(self))


async def _awaited(ref: ObjectRef):
    return await ref


def _rebuild_ref(oid: int, owner: int) -> ObjectRef:
    core = state.core_or_none()
    if core is None:
        return ObjectRef(oid, owner, _deltas=_NO_COUNT)
    core.table.borrowed(oid, owner) if owner != core.worker_id else None
    return ObjectRef(oid, owner, core.table.deltas)


_NIL_ID = (1 << (8 * ids.OBJECT_BYTES)) - 1


class _NoCount:
    """Delta sink for refs unpickled where no runtime runs (counted nowhere)."""

    def append(self, _item) -> None:
        pass


_NO_COUNT = _NoCount()


class DynamicObjectRefGenerator:
    """What the ref of a ``num_returns="dynamic"`` call resolves to (Ray's form, which it
    has deprecated for "streaming"): a ref for each value the generator yielded, once it
    has finished; if it raised, the last ref raises that error. Each ref is handed out
    once, as Ray's is; ``len()`` counts those not yet handed out."""

    def __init__(self, refs) -> None:
        self._refs = collections.deque(refs)

    def __iter__(self):
        while self._refs:
            yield self._refs.popleft()

    def __len__(self) -> int:
        return len(self._refs)

    def __repr__(self) -> str:
        return f"DynamicObjectRefGenerator({len(self._refs)} refs)"


class ObjectRefGenerator:
    """The result of a ``num_returns="streaming"`` call: refs arrive in order as the
    remote generator yields, while it still runs.

    Iterate it (``for ref in gen``) or ``async for ref in gen``; each ref is ready
    when handed out. If the generator raised, the ref after its last value raises
    that error on ``get``.
    """

    def __init__(self, task_id: int, core) -> None:
        self._task_id = task_id
        self._core = core
        self._stream = core.open_stream(task_id)

    def __iter__(self):
        return self

    def __next__(self) -> ObjectRef:
        ref = self._core.next_stream_ref(self._stream, timeout=None)
        if ref is None:
            raise StopIteration
        return ref

    def __aiter__(self):
        return self

    async def __anext__(self) -> ObjectRef:
        ref = await self._core.next_stream_ref_async(self._stream)
        if ref is None:
            raise StopAsyncIteration
        return ref

    def next_ready(self) -> bool:
        """Whether ``next(gen)`` would hand out a ref at once (Ray's meaning; refs are
        ready when handed out); False once the stream has ended."""
        return bool(self._stream.items)

    def _next_sync(self, timeout_s: float | None = None) -> ObjectRef:
        """The next ref, waiting at most ``timeout_s`` s (None or -1: for as long as it
        takes); ``ObjectRef.nil()`` where none came in time (as Ray's)."""
        from ..exceptions import GetTimeoutError

        try:
            ref = self._core.next_stream_ref(self._stream, None if timeout_s in (None, -1) else timeout_s)
        except GetTimeoutError:
            return ObjectRef.nil()
        if ref is None:
            raise StopIteration
        return ref

    def is_finished(self) -> bool:
        """True once every value was handed out and the generator has ended."""
        return self._stream.finished and not self._stream.items

    def completed(self) -> ObjectRef:
        """Ray's name: a ref ready when the generator has ended."""
        return self._core.stream_completed_ref(self._stream)

    def task_id(self) -> str:
        return ids.to_hex(self._task_id)

    def __repr__(self) -> str:
        return f"ObjectRefGenerator({ids.to_hex(self._task_id)})"

    def __del__(self) -> None:
        try:
            self._core.close_stream(self._stream)
        except Exception:
            pass

"""A process's hands on the host store: write a value's buffers in, map them out.

``put`` copies a value's large buffers once, straight from the producer's memory
into an arena block (the one copy in). ``open`` maps a block privately and hands
out views (zero copies out); the mapping is pinned until the last view of it is
garbage-collected. A value only read from its mapping (numpy arrays are read-only
views; a tensor, built over the copy-on-write twin, may be written) lends that mapping
to the next ``open`` of it while it lives (``share``): another get of the same object
maps no more pages, as Ray's readers share one mapping of the store.

Backends: in the driver the store is in-process (LocalBackend); a worker reaches it
through the controller connection (RemoteBackend). Unpins come from garbage
collection, which may run on any thread at any moment, even inside the store's own
lock, so they are queued and applied later, never directly.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import threading
import weakref

from ..exceptions import ObjectStoreFullError
from . import disk_blocks
from .arena import Arena

ALIGN = 64  # each buffer of a value starts on a cache line inside its block


def layout_of(buffers: list) -> tuple[int, tuple]:
    """Total size and ((relative offset, nbytes), ...) of buffers laid back to back."""
    return layout_of_sizes([memoryview(buf).nbytes for buf in buffers])


def layout_of_sizes(sizes: list) -> tuple[int, tuple]:
    at = 0
    parts = []
    for n in sizes:
        parts.append((at, n))
        at += (n + ALIGN - 1) // ALIGN * ALIGN
    return at, tuple(parts)


class StoreClient:
    def __init__(self, arena: Arena, backend) -> None:
        self.arena = arena
        self.backend = backend
        self._read_only_maps: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # key -> mapping

    def put(self, key: int, owner: int, buffers: list, seal: bool = True, at_once: bool = False) -> tuple:
        """Write buffers into a new block; returns the descriptor payloads carry.
        ``seal=False``: the owner seals it when the value reaches it (one message less).
        ``at_once``: only where the store has room now, without waiting for the disk
        (a cache's copy, which may go without); else ObjectStoreFullError."""
        total, layout = layout_of(buffers)
        where = self.backend.allocate_at_once(key, total, owner) if at_once else self.backend.allocate(key, total, owner)
        if where is None:
            raise ObjectStoreFullError(f"no room for {total} bytes in the store without spilling")
        try:
            self._space(where).write(where, [(rel, buf) for (rel, _), buf in zip(layout, buffers, strict=True)])
        except BaseException:
            self.backend.free(key)
            raise
        if seal:
            self.backend.seal(key)
        return (key, total, layout)

    def open(self, desc: tuple, fresh: bool = False) -> tuple[list, list]:
        """Read-only and writable (copy-on-write) views of each buffer of a stored value
        (``fresh``: over a mapping of their own, never one shared with earlier reads)."""
        key, _total, layout = desc
        mapping = None if fresh else self._read_only_maps.get(key)
        whole = memoryview(mapping if mapping is not None else self._map_pinned(key))
        writable = [whole[rel : rel + n] for rel, n in layout]
        return [v.toreadonly() for v in writable], writable

    def share(self, key: int, view: memoryview) -> None:
        """What was built from ``view``'s mapping (one ``open`` gave) only reads it: later
        opens of ``key`` may reuse the mapping while it lives (pinned as long)."""
        self._read_only_maps[key] = view.obj

    @contextlib.contextmanager
    def reading(self, desc: tuple):
        """Read-only views of each buffer of a stored value for a reader that copies them
        before the block ends: over this process's shared mapping, pinned meanwhile."""
        key, total, layout = desc
        where, _size = self.backend.pin(key)
        try:
            whole = self._space(where).shared_view(where, total)
            views = [whole[rel : rel + n] for rel, n in layout]
            try:
                yield views
            finally:
                for view in views:
                    view.release()  # raises if the reader kept one: never unpin under a view
                whole.release()
        finally:
            self.backend.unpin_later(key)

    def open_block(self, desc: tuple) -> memoryview:
        """The whole block, mapped privately; pinned while the view lives."""
        return memoryview(self._map_pinned(desc[0]))[:desc[1]]

    def _map_pinned(self, key: int):
        """A private mapping of the block, pinned until it is garbage-collected."""
        where, size = self.backend.pin(key)
        try:
            mapping = self._space(where).view_private(where, size)
        except BaseException:
            self.backend.unpin_later(key)
            raise
        weakref.finalize(mapping, self.backend.unpin_later, key)
        return mapping

    def reserve(self, key: int, owner: int, total: int) -> memoryview:
        """A new block to fill in place; ``seal(key)`` once it is written, ``free``
        the descriptor if the write failed."""
        where = self.backend.allocate(key, total, owner)
        return self._space(where).block_view(where, total)

    async def reserve_async(self, key: int, owner: int, total: int) -> memoryview:
        """reserve(), for a coroutine on the store owner's loop: a spill it needs runs
        off that loop (store_service.py)."""
        allocate = getattr(self.backend, "allocate_async", None)
        where = await allocate(key, total, owner) if allocate is not None else self.backend.allocate(key, total, owner)
        return self._space(where).block_view(where, total)

    def _space(self, where: int | str):
        """Where a block lives: the arena (an offset), or a file (its path, when shared
        memory had no room: store.py)."""
        return self.arena if type(where) is int else disk_blocks

    def seal(self, key: int) -> None:
        self.backend.seal(key)

    def free(self, desc: tuple) -> None:
        self.backend.free(desc[0])


class LocalBackend:
    """The driver's: the store lives in this process."""

    def __init__(self, store, worker_id: int = 0) -> None:
        self.store = store
        self.worker_id = worker_id
        self.service = None  # the store owner's StoreService (store_service.py): its loop never waits for a spill

    def allocate(self, key: int, size: int, owner: int) -> int | str:
        return self.store.allocate(key, size, owner, self.worker_id)

    def allocate_at_once(self, key: int, size: int, owner: int) -> int | None:
        """Room now, or None; never waits for a spill (nor, on the loop, for the store)."""
        def now():
            return self.store.allocate_at_once(key, size, owner, self.worker_id)

        return self.service.try_now(now) if self.service is not None and self.service.on_loop() else now()

    async def allocate_async(self, key: int, size: int, owner: int) -> int | str:
        if self.service is not None and self.service.on_loop():
            return await self.service.ask(self.worker_id, "store_allocate", (key, size, owner))
        return self.allocate(key, size, owner)

    def has_used_room(self, size: int) -> bool:
        return self.store.has_used_room(size)

    def seal(self, key: int) -> None:
        self._bookkeep(self.store.seal, key)

    def pin(self, key: int) -> tuple[int | str, int]:
        self.drain()
        return self.store.pin(key, self.worker_id)

    def unpin_later(self, key: int) -> None:
        self.store.unpin_later(key, self.worker_id)

    def free(self, key: int) -> None:
        self._bookkeep(self.store.free, key)

    def _bookkeep(self, method, key: int) -> None:
        if self.service is not None:
            self.service.run(functools.partial(method, key), self.worker_id)
        else:
            method(key)

    def drain(self) -> None:
        self.store.drain_unpins()


class RemoteBackend:
    """A worker's: allocation and pins are requests to the host's store owner (the
    controller on the head, the agent elsewhere), the rest messages."""

    def __init__(self, core) -> None:
        self.core = core
        self._unpins: collections.deque = collections.deque()
        # key -> [offset, size, count]: pins the store's owner took for us (ActorCall.pins),
        # each spent by one pin() or given back by release_grants.
        self._grants: dict[int, list] = {}
        self._grants_lock = threading.Lock()

    def allocate(self, key: int, size: int, owner: int) -> int:
        return self.core.store_request_sync("store_allocate", key, size, owner)

    def has_used_room(self, size: int) -> bool:
        return False  # (asking would cost what it saves)

    def grant(self, pins: tuple) -> None:
        with self._grants_lock:
            for key, offset, size in pins:
                granted = self._grants.get(key)
                if granted is None:
                    self._grants[key] = [offset, size, 1]
                else:  # still pinned, so still in the same place
                    granted[2] += 1

    def _spend(self, key: int) -> tuple[int, int] | None:
        with self._grants_lock:
            granted = self._grants.get(key)
            if granted is None:
                return None
            granted[2] -= 1
            if not granted[2]:
                del self._grants[key]
            return granted[0], granted[1]

    def release_grants(self, keys: tuple) -> None:
        for key in keys:
            if self._spend(key) is not None:
                self.unpin_later(key)

    def seal(self, key: int) -> None:
        from .._private import messages as m

        self.core.to_store(m.StoreUpdate((key,), (), ()))

    def pin(self, key: int) -> tuple[int, int]:
        granted = self._spend(key)
        if granted is not None:
            return granted
        return self.core.store_request_sync("store_pin", key)

    def unpin_later(self, key: int) -> None:
        self._unpins.append(key)

    def has_unpins(self) -> bool:
        return bool(self._unpins)

    def free(self, key: int) -> None:
        from .._private import messages as m

        self.core.to_store(m.StoreUpdate((), (), (key,)))

    def flush(self) -> bool:
        """Core loop: send queued unpins in one message (True when there were some)."""
        update = self.take_unpins()
        if update is not None:
            self.core.send_store(update)
        return update is not None

    def take_unpins(self):
        """The queued unpins as one StoreUpdate (None if there are none): for the core
        loop, or for a thread that sends it ahead of a reply on the store's connection."""
        if not self._unpins:
            return None
        from .._private import messages as m

        keys = []
        while self._unpins:
            keys.append(self._unpins.popleft())
        return m.StoreUpdate((), tuple(keys), ())

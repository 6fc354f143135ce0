"""The host's object store: which objects live where in the arena, pins, and spilling.

One per host, inside the controller process on the head host. It never copies
values on the hot path: producers write their own bytes into blocks it hands out,
readers map blocks themselves. It decides placement and what to spill.

Lifetime is the owner's call (objstore/table.py counts references): the owner says
``free`` when no ref is left anywhere. A reader that still maps a block (a numpy
view outliving its ref) pins it; a freed but pinned block is reclaimed when the
last pin goes. A process that dies drops its pins, and its own objects are freed.

Under pressure, unpinned objects are spilled least recently used first to files in
the spill directory, and read back on the next ``pin``. Only when pinned objects
alone fill the arena does ``allocate`` raise ObjectStoreFullError.
"""

from __future__ import annotations

import collections
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field

from ..exceptions import ObjectLostError, ObjectStoreFullError
from .allocator import Allocator, round_up
from .arena import Arena, ArenaFullError, create_arena_fd

MiB = 1 << 20


@dataclass
class StoredObject:
    key: int
    owner: int
    size: int
    offset: int | None  # None while spilled
    spill_path: str | None = None
    pins: dict = field(default_factory=dict)  # worker id -> count
    sealed: bool = False
    freed: bool = False
    last_access: float = 0.0


class SharedStore:
    def __init__(self, capacity: int, spill_dir: str | None = None, directory: str | None = None) -> None:
        capacity = round_up(max(capacity, 1 << 20))
        self.capacity = capacity
        self.fd = create_arena_fd(capacity, directory or os.environ.get("MESHRT_STORE_DIR"))
        self.arena = Arena(self.fd, capacity)
        self.blocks = Allocator(capacity)
        self.objects: dict[int, StoredObject] = {}
        self.lock = threading.RLock()
        self._spill_root = spill_dir
        self._spill_dir: str | None = None
        self.spilled_bytes = 0
        self.spill_count = 0
        self.restore_count = 0
        self._unpins: collections.deque = collections.deque()  # (key, worker) from finalizers

    # -- producers ---------------------------------------------------------------------------

    def allocate(self, key: int, size: int, owner: int) -> int:
        """A block for a new object: its offset in the arena."""
        need = round_up(max(size, 1))
        if need > self.capacity:
            raise ObjectStoreFullError(
                f"an object of {_mib(size)} is larger than the whole object store "
                f"({_mib(self.capacity)}); raise init(object_store_memory=...)"
            )
        with self.lock:
            if key in self.objects:  # (its block would be lost to the allocator for good)
                raise ValueError(f"object {key:x} is already in the store")
            offset = self.blocks.alloc(need)
            if offset is None:
                offset = self._make_room(need, f"an object of {_mib(size)}")
            self.objects[key] = StoredObject(key, owner, size, offset, last_access=time.monotonic())
        try:
            self.arena.reserve(offset, need)
        except ArenaFullError as err:
            with self.lock:
                self.objects.pop(key, None)
                self.blocks.free(offset, need)
            raise ObjectStoreFullError(str(err)) from None
        return offset

    def has_used_room(self, size: int) -> bool:
        """Room for ``size`` bytes in pages used before (see Allocator.fits_in_used)."""
        with self.lock:
            return self.blocks.fits_in_used(size)

    def seal(self, key: int) -> None:
        with self.lock:
            obj = self.objects.get(key)
            if obj is not None:
                obj.sealed = True

    # -- readers -------------------------------------------------------------------------------

    def pin(self, key: int, worker: int) -> tuple[int, int]:
        """Keep an object in place while ``worker`` maps it; restores it if spilled."""
        with self.lock:
            obj = self.objects.get(key)
            if obj is None or obj.freed:
                raise ObjectLostError(f"{key:x}", "its owner has freed it")
            if obj.offset is None:
                self._restore(obj)
            obj.pins[worker] = obj.pins.get(worker, 0) + 1
            obj.last_access = time.monotonic()
            return obj.offset, obj.size

    def unpin_later(self, key: int, worker: int) -> None:
        """Safe from a garbage-collection finalizer on any thread: applied by drain_unpins."""
        self._unpins.append((key, worker))

    def drain_unpins(self) -> None:
        if not self._unpins:
            return
        with self.lock:
            while self._unpins:
                key, worker = self._unpins.popleft()
                self.unpin(key, worker)

    def apply(self, update, worker: int) -> None:
        """A process's StoreUpdate: blocks it sealed, mappings it dropped, blocks it freed."""
        for key in update.sealed:
            self.seal(key)
        for key in update.unpinned:
            self.unpin(key, worker)
        for key in update.freed:
            self.free(key)

    def serve(self, caller: int, method: str, args: tuple):
        """A store request from a process of this host (whoever owns the store answers)."""
        if method == "store_allocate":
            return self.allocate(*args)
        self.drain_unpins()
        if method == "store_pin":
            return self.pin(args[0], caller)
        if method == "store_summary":
            return {"usage": self.usage(), "objects": self.records()}
        raise ValueError(f"unknown store request {method!r}")

    def unpin(self, key: int, worker: int, count: int = 1) -> None:
        with self.lock:
            obj = self.objects.get(key)
            if obj is None:
                return
            left = obj.pins.get(worker, 0) - count
            if left > 0:
                obj.pins[worker] = left
            else:
                obj.pins.pop(worker, None)
            if obj.freed and not obj.pins:
                self._reclaim(obj)

    # -- owners ----------------------------------------------------------------------------------

    def free(self, key: int) -> None:
        with self.lock:
            obj = self.objects.get(key)
            if obj is None:
                return
            if obj.pins:
                obj.freed = True  # reclaimed when the last reader lets go
            else:
                self._reclaim(obj)

    def worker_died(self, worker: int) -> None:
        with self.lock:
            for obj in list(self.objects.values()):
                if obj.pins.pop(worker, None) is not None and obj.freed and not obj.pins:
                    self._reclaim(obj)
                elif obj.owner == worker and obj.key in self.objects:
                    obj.freed = True  # nobody can free it any more
                    if not obj.pins:
                        self._reclaim(obj)

    def _reclaim(self, obj: StoredObject) -> None:
        self.objects.pop(obj.key, None)
        if obj.offset is not None:
            self.blocks.free(obj.offset, round_up(max(obj.size, 1)))
            obj.offset = None
        if obj.spill_path is not None:
            self.spilled_bytes -= obj.size
            _remove(obj.spill_path)
            obj.spill_path = None

    # -- pressure ----------------------------------------------------------------------------------

    def _make_room(self, need: int, what: str) -> int:
        """Spill unpinned objects, least recently used first, until ``need`` bytes fit."""
        candidates = sorted(
            (o for o in self.objects.values() if o.offset is not None and o.sealed and not o.pins),
            key=lambda o: o.last_access,
        )
        for obj in candidates:
            if obj.offset is None or obj.pins or self.objects.get(obj.key) is not obj:
                continue
            self._spill(obj)
            offset = self.blocks.alloc(need)
            if offset is not None:
                return offset
        pinned = sum(round_up(max(o.size, 1)) for o in self.objects.values() if o.offset is not None)
        raise ObjectStoreFullError(
            f"the object store is full: {what} needs {_mib(need)}, but {_mib(pinned)} of its "
            f"{_mib(self.capacity)} are held by objects still being written or mapped by readers "
            f"(largest free block: {_mib(self.blocks.largest_free())}); release views of stored "
            "objects, or raise init(object_store_memory=...)"
        )

    def _spill(self, obj: StoredObject) -> None:
        path = os.path.join(self.spill_dir(), f"{obj.key:x}")
        shared, _ = self.arena._mapping()
        with open(path, "wb") as f:
            f.write(memoryview(shared)[obj.offset : obj.offset + obj.size])
        self.blocks.free(obj.offset, round_up(max(obj.size, 1)))
        obj.offset = None
        obj.spill_path = path
        self.spilled_bytes += obj.size
        self.spill_count += 1

    def _restore(self, obj: StoredObject) -> None:
        need = round_up(max(obj.size, 1))
        offset = self.blocks.alloc(need)
        if offset is None:
            offset = self._make_room(need, f"restoring a spilled object of {_mib(obj.size)}")
        try:
            self.arena.reserve(offset, need)
            shared, _ = self.arena._mapping()
            with open(obj.spill_path, "rb") as f:
                got = f.readinto(memoryview(shared)[offset : offset + obj.size])
            if got != obj.size:
                raise OSError(f"short read: {got} of {obj.size} bytes")
        except (OSError, ArenaFullError) as err:
            self.blocks.free(offset, need)
            path = obj.spill_path
            self._reclaim(obj)
            raise ObjectLostError(f"{obj.key:x}", f"its spilled copy at {path} could not be read back ({err})") from None
        _remove(obj.spill_path)
        self.spilled_bytes -= obj.size
        obj.spill_path = None
        obj.offset = offset
        self.restore_count += 1

    def spill_dir(self) -> str:
        if self._spill_dir is None:
            root = self._spill_root or tempfile.gettempdir()
            os.makedirs(root, exist_ok=True)
            self._spill_dir = tempfile.mkdtemp(prefix="meshrt-spill-", dir=root)
        return self._spill_dir

    # -- looking at it ------------------------------------------------------------------------------

    def usage(self) -> dict:
        with self.lock:
            in_memory = [o for o in self.objects.values() if o.offset is not None]
            return {
                "capacity": self.capacity,
                "used": self.blocks.used,
                "objects": len(in_memory),
                "pinned": sum(1 for o in in_memory if o.pins),
                "spilled_objects": sum(1 for o in self.objects.values() if o.spill_path),
                "spilled_bytes": self.spilled_bytes,
                "spills": self.spill_count,
                "restores": self.restore_count,
            }

    def records(self) -> list[dict]:
        with self.lock:
            return [
                {"key": o.key, "owner": o.owner, "size": o.size,
                 "where": "shared memory" if o.offset is not None else "spilled",
                 "pins": dict(o.pins), "freed": o.freed}
                for o in self.objects.values()
            ]

    def close(self) -> None:
        with self.lock:
            self.objects.clear()
        self.arena.close()
        try:
            os.close(self.fd)
        except OSError:
            pass
        if self._spill_dir is not None:
            shutil.rmtree(self._spill_dir, ignore_errors=True)


def _mib(n: int) -> str:
    return f"{n / MiB:.1f} MiB"


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass

"""The host's object store: which objects live where in the arena, pins, and spilling.

One per host, inside the controller process on the head host. It never copies
values on the hot path: producers write their own bytes into blocks it hands out,
readers map blocks themselves. It decides placement and what to spill.

Lifetime is the owner's call (objstore/table.py counts references): the owner says
``free`` when no ref is left anywhere. A reader that still maps a block (a numpy
view outliving its ref) pins it; a freed but pinned block is reclaimed when the
last pin goes. A process that dies drops its pins, and its own objects are freed.

Under pressure, unpinned objects are spilled least recently used first to files in
the spill directory, and read back on the next ``pin``. When pinned objects alone
fill the arena (or a value is larger than it), the value is written to a file there
instead, and readers that find no room to bring a spilled value back map its file:
as Ray's fallback allocation, slower but never an error while the disk has room.
Where a block is: an int (its offset in the arena) or a str (the path of its file).
"""

from __future__ import annotations

import collections
import logging
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
log = logging.getLogger("meshrt")


class AlreadyStored(KeyError):
    """A key taken: a retried generator writing again a value its owner already has."""


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
    writer: int | None = None  # the process writing it (its leftovers go if it dies)


class SharedStore:
    def __init__(self, capacity: int, spill_dir: str | None = None, directory: str | None = None) -> None:
        capacity = round_up(max(capacity, 1 << 20))
        self.capacity = capacity
        self.fd = create_arena_fd(capacity, directory or os.environ.get("MESHRT_STORE_DIR"))
        self.arena = Arena(self.fd, capacity)
        self.blocks = Allocator(capacity)
        self.objects: dict[int, StoredObject] = {}
        self.lock = threading.RLock()
        self._spill_root = spill_dir or os.environ.get("MESHRT_SPILL_DIR")
        self._spill_dir: str | None = None
        self.spilled_bytes = 0
        self.spill_count = 0
        self.restore_count = 0
        self.fallback_count = 0  # objects written to a file for want of room (see _on_disk)
        self._unpins: collections.deque = collections.deque()  # (key, worker) from finalizers
        self._why_not = ""  # why the last allocation found no room in the arena

    # -- producers ---------------------------------------------------------------------------

    def allocate(self, key: int, size: int, owner: int, writer: int | None = None) -> int | str:
        """Where to write a new object: an offset in the arena, or a file's path when
        the arena has no room for it (see the module docstring)."""
        self.drain_unpins()  # (views dropped just now may be what makes room)
        with self.lock:
            offset = self._allocate(key, size, owner, writer, self._find_room)
            return offset if offset is not None else self._on_disk(key, owner, size, writer, self._why_not)

    def allocate_at_once(self, key: int, size: int, owner: int, writer: int | None = None) -> int | None:
        """allocate() where it needs no disk: an offset in the arena, or None where the
        object would have to go to disk or others be spilled for it (then allocate())."""
        with self.lock:
            return self._allocate(key, size, owner, writer, self.blocks.alloc)

    def _allocate(self, key: int, size: int, owner: int, writer: int | None, find) -> int | None:
        need = round_up(max(size, 1))
        if key in self.objects:  # (its block would be lost to the allocator for good)
            raise AlreadyStored(f"object {key:x} is already in the store")
        offset = find(need) if need <= self.capacity else None
        if offset is None:
            self._why_not = "it does not fit in shared memory"
            return None
        try:
            self.arena.reserve(offset, need)
        except ArenaFullError as err:
            self.blocks.free(offset, need)
            self._why_not = str(err)
            return None
        self.objects[key] = StoredObject(key, owner, size, offset, last_access=time.monotonic(), writer=writer)
        return offset

    def _on_disk(self, key: int, owner: int, size: int, writer: int | None, why: str) -> str:
        """Ray's fallback allocation: the object's block is a file in the spill directory."""
        path = os.path.join(self.spill_dir(), f"{key:x}")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                if size:
                    os.posix_fallocate(fd, 0, size)  # the disk's room is taken now, not at the first write
            finally:
                os.close(fd)
        except OSError as err:
            _remove(path)
            raise ObjectStoreFullError(
                f"no room for an object of {_mib(size)}: the object store ({_mib(self.capacity)}, "
                f"{_mib(self._pinned_bytes())} held by pinned or unwritten objects) cannot take it, and "
                f"the spill directory {self.spill_dir()} cannot either ({err.strerror}); release views of "
                "stored objects, raise init(object_store_memory=...) or free disk space"
            ) from None
        if not self.fallback_count:
            log.warning("meshrt: an object of %s goes to disk (%s): %s; set init(object_store_memory=...) "
                        "higher if this is the working set", _mib(size), why, self.spill_dir())
        self.fallback_count += 1
        self.spilled_bytes += size
        self.objects[key] = StoredObject(key, owner, size, None, spill_path=path,
                                         last_access=time.monotonic(), writer=writer)
        return path

    def _pinned_bytes(self) -> int:
        return sum(round_up(max(o.size, 1)) for o in self.objects.values() if o.offset is not None)

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

    def pin(self, key: int, worker: int) -> tuple[int | str, int]:
        """Keep an object in place while ``worker`` maps it; restores it if spilled (or,
        with no room to, has it mapped from its file)."""
        with self.lock:
            obj = self._live(key)
            if obj.offset is None and not obj.pins:  # (pinned: readers map its file, which must stay)
                self._restore(obj)
            return self._pin(obj, worker)

    def pin_at_once(self, key: int, worker: int) -> tuple[int | str, int] | None:
        """pin() where it needs no disk; None where the object must be read back first."""
        with self.lock:
            obj = self._live(key)
            return None if obj.offset is None and not obj.pins else self._pin(obj, worker)

    def _live(self, key: int) -> StoredObject:
        obj = self.objects.get(key)
        if obj is None or obj.freed:
            raise ObjectLostError(f"{key:x}", "its owner has freed it")
        return obj

    def _pin(self, obj: StoredObject, worker: int) -> tuple[int | str, int]:
        obj.pins[worker] = obj.pins.get(worker, 0) + 1
        obj.last_access = time.monotonic()
        return (obj.spill_path if obj.offset is None else obj.offset), obj.size

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
                elif (obj.owner == worker or (obj.writer == worker and not obj.sealed)) and obj.key in self.objects:
                    # nobody can free it any more: its owner is gone, or it is a block the dead
                    # process was writing for an owner it never reached (a retry writes anew)
                    obj.freed = True
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

    def _find_room(self, need: int) -> int | None:
        """A free block of ``need`` bytes in the arena, spilling for it if need be; None
        if there is none to be had."""
        if need > self.capacity:
            return None
        offset = self.blocks.alloc(need)
        return offset if offset is not None else self._make_room(need)

    def _make_room(self, need: int) -> int | None:
        """Spill unpinned objects, least recently used first, until ``need`` bytes fit;
        None if pinned objects leave no room."""
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
        return None

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
        """Back into the arena; left in its file (which readers then map) when there is
        no room. Lost only when the file cannot be read."""
        if not os.path.exists(obj.spill_path):
            path = obj.spill_path
            self._reclaim(obj)
            raise ObjectLostError(f"{obj.key:x}", f"its spilled copy at {path} is gone")
        need = round_up(max(obj.size, 1))
        offset = self._find_room(need)
        if offset is None:
            return
        try:
            self.arena.reserve(offset, need)
        except ArenaFullError:
            self.blocks.free(offset, need)
            return
        try:
            shared, _ = self.arena._mapping()
            with open(obj.spill_path, "rb") as f:
                got = f.readinto(memoryview(shared)[offset : offset + obj.size])
            if got != obj.size:
                raise OSError(f"short read: {got} of {obj.size} bytes")
        except OSError as err:
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
                "fallback_allocations": self.fallback_count,
            }

    def summary(self) -> dict:
        """What ``meshrt status`` and the state API show of it."""
        self.drain_unpins()
        return {"usage": self.usage(), "objects": self.records()}

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

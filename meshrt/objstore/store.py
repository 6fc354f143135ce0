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

The disk is never written or read under the lock: a spill marks its object, copies it
out with the lock released (others allocate, pin and free meanwhile) and gives its
block back only if nobody pinned or freed it in the meantime; a restore reads into a
block nobody else can see yet, and readers of that object wait for it.
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

from .._private import temp_root
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
    spilling: bool = False  # being copied to its file (still readable where it is)
    restoring: bool = False  # being read back from its file (readers wait for it)


class SharedStore:
    def __init__(self, capacity: int, spill_dir: str | None = None, directory: str | None = None) -> None:
        capacity = round_up(max(capacity, 1 << 20))
        self.capacity = capacity
        self.fd = create_arena_fd(capacity, directory or os.environ.get("MESHRT_STORE_DIR"))
        self.arena = Arena(self.fd, capacity)
        self.blocks = Allocator(capacity)
        self.objects: dict[int, StoredObject] = {}
        self.lock = threading.RLock()
        self._moved = threading.Condition(self.lock)  # a restore ended (its readers wait for it)
        self._spill_root = spill_dir or os.environ.get("MESHRT_SPILL_DIR")
        self._spill_dir: str | None = None
        self.spilled_bytes = 0
        self.spill_count = 0
        self.restore_count = 0
        self.fallback_count = 0  # objects written to a file for want of room (see _on_disk)
        self._unpins: collections.deque = collections.deque()  # (key, worker) from finalizers
        self._why_not = ""  # why the last allocation found no room in the arena
        self._spill_may_help = False  # ... and whether spilling others would make it

    # -- producers ---------------------------------------------------------------------------

    def allocate(self, key: int, size: int, owner: int, writer: int | None = None) -> int | str:
        """Where to write a new object: an offset in the arena (spilling others for it,
        without holding the lock while the disk writes), or a file's path when the arena
        has no room for it (see the module docstring)."""
        self.drain_unpins()  # (views dropped just now may be what makes room)
        while True:
            with self.lock:
                offset = self._allocate(key, size, owner, writer)
                if offset is not None:
                    return offset
                victim = self._choose_victim() if self._spill_may_help else None
                if victim is None:
                    return self._on_disk(key, owner, size, writer, self._why_not)
            self._spill(*victim)  # (then again: another process may have taken the room meanwhile)

    def allocate_at_once(self, key: int, size: int, owner: int, writer: int | None = None) -> int | None:
        """allocate() where it needs no disk: an offset in the arena, or None where the
        object would have to go to disk or others be spilled for it (then allocate())."""
        with self.lock:
            return self._allocate(key, size, owner, writer)

    def _allocate(self, key: int, size: int, owner: int, writer: int | None) -> int | None:
        need = round_up(max(size, 1))
        if key in self.objects:  # (its block would be lost to the allocator for good)
            raise AlreadyStored(f"object {key:x} is already in the store")
        self._spill_may_help = False
        offset = self.blocks.alloc(need) if need <= self.capacity else None
        if offset is None:
            self._why_not = "it does not fit in shared memory"
            self._spill_may_help = need <= self.capacity
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
        while True:
            with self.lock:
                obj = self._live(key)
                while obj.restoring:  # (another thread is reading it back)
                    self._moved.wait()
                    obj = self._live(key)
                if obj.offset is not None or obj.pins:  # (pinned: readers map its file, which must stay)
                    return self._pin(obj, worker)
                offset, victim = self._restore_target(obj)
                if offset is None and victim is None:  # no room to be had: its readers map its file
                    return self._pin(obj, worker)
                path = obj.spill_path
            if victim is not None:
                self._spill(*victim)
                continue
            self._read_back(obj, offset, path)
            with self.lock:
                return self._pin(self._live(key), worker)

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

    def _choose_victim(self) -> tuple[StoredObject, int] | None:
        """The least recently used object that may be spilled (sealed, in the arena, not
        mapped, not being spilled already), marked as being spilled; None if none may."""
        best = None
        for obj in self.objects.values():
            if (obj.offset is not None and obj.sealed and not obj.pins and not obj.spilling
                    and (best is None or obj.last_access < best.last_access)):
                best = obj
        if best is None:
            return None
        best.spilling = True
        return best, best.offset

    def _spill(self, obj: StoredObject, offset: int) -> None:
        """Copy ``obj`` (at ``offset``) to its file with the lock released, then give its
        block back; unless a reader pinned it meanwhile (it stays, the file goes) or its
        owner freed it (its block is back already)."""
        path = os.path.join(self.spill_dir(), f"{obj.key:x}")
        try:
            shared, _ = self.arena._mapping()
            with open(path, "wb") as f:
                f.write(memoryview(shared)[offset : offset + obj.size])
        except BaseException:
            with self.lock:
                obj.spilling = False
            _remove(path)
            raise
        with self.lock:
            obj.spilling = False
            if self.objects.get(obj.key) is not obj or obj.pins or obj.offset != offset:
                _remove(path)
                return
            self.blocks.free(offset, round_up(max(obj.size, 1)))
            obj.offset = None
            obj.spill_path = path
            self.spilled_bytes += obj.size
            self.spill_count += 1

    def _restore_target(self, obj: StoredObject) -> tuple[int | None, tuple | None]:
        """(Under the lock.) A block reserved to read spilled ``obj`` back into, with
        ``obj`` marked as being restored; else (None, a victim to spill first), or
        (None, None) where no room can be made. Lost only when its file is gone."""
        if not os.path.exists(obj.spill_path):
            path = obj.spill_path
            self._reclaim(obj)
            raise ObjectLostError(f"{obj.key:x}", f"its spilled copy at {path} is gone")
        need = round_up(max(obj.size, 1))
        offset = self.blocks.alloc(need) if need <= self.capacity else None
        if offset is None:
            return None, (self._choose_victim() if need <= self.capacity else None)
        try:
            self.arena.reserve(offset, need)
        except ArenaFullError:
            self.blocks.free(offset, need)
            return None, None
        obj.restoring = True
        return offset, None

    def _read_back(self, obj: StoredObject, offset: int, path: str) -> None:
        """Read ``obj``'s file into the block at ``offset`` with the lock released (nobody
        else knows the block yet), then put it there."""
        need = round_up(max(obj.size, 1))
        error = None
        try:
            shared, _ = self.arena._mapping()
            with open(path, "rb") as f:
                got = f.readinto(memoryview(shared)[offset : offset + obj.size])
            if got != obj.size:
                error = f"short read: {got} of {obj.size} bytes"
        except BaseException as err:  # (its readers must not wait for it for ever)
            error = str(err) or type(err).__name__
        with self.lock:
            obj.restoring = False
            self._moved.notify_all()
            if self.objects.get(obj.key) is not obj:  # (freed meanwhile: _reclaim took its file)
                self.blocks.free(offset, need)
                return
            if error is not None:
                self.blocks.free(offset, need)
                self._reclaim(obj)
                raise ObjectLostError(f"{obj.key:x}", f"its spilled copy at {path} could not be read back ({error})")
            _remove(path)
            self.spilled_bytes -= obj.size
            obj.spill_path = None
            obj.offset = offset
            self.restore_count += 1

    def spill_dir(self) -> str:
        if self._spill_dir is None:
            root = self._spill_root or temp_root.root()
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

"""The store holds no lock while the disk works: while one process's allocation spills
an object, other processes allocate, pin and free (their requests do not queue behind
the disk), a reader that pins the object being spilled keeps it in memory, and two
readers of a spilled object read it back once.

A spill or restore is held mid-way on a named pipe put where its file goes: the disk
write (or read) waits until the test opens the other end, exactly as long as it says.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading

import pytest

from meshrt.objstore.store import SharedStore
from meshrt.objstore.store_service import StoreService

from .helpers import wait_until

MiB = 1 << 20


class HeldPipe:
    """A named pipe where the store will write (or read) a file: the store's open() waits
    for this end, and its write (or read) for ``release()``."""

    def __init__(self, path: str, writing_back: bytes | None = None) -> None:
        os.mkfifo(path)
        self.path, self.data = path, writing_back
        self.opened, self.released, self.received = threading.Event(), threading.Event(), bytearray()
        self.thread = threading.Thread(target=self._other_end, daemon=True)
        self.thread.start()

    def _other_end(self) -> None:
        with open(self.path, "rb" if self.data is None else "wb") as end:
            self.opened.set()
            self.released.wait(30)
            if self.data is None:
                while chunk := end.read(1 << 16):
                    self.received += chunk
            else:
                end.write(self.data)

    def release(self) -> None:
        self.released.set()
        self.thread.join(30)


def arena_bytes(store: SharedStore, offset: int, size: int) -> bytes:
    shared, _ = store.arena._mapping()
    return bytes(memoryview(shared)[offset : offset + size])


def fill(store: SharedStore, key: int, size: int) -> None:
    offset = store.objects[key].offset
    shared, _ = store.arena._mapping()
    memoryview(shared)[offset : offset + size] = bytes([key]) * size


@contextlib.asynccontextmanager
async def spill_held(tmp_path):
    """A store whose object 1 is being spilled for caller 7's allocation of object 3,
    its disk write held: yields (store, service, pipe, the allocation's future)."""
    store = SharedStore(4 * MiB, spill_dir=str(tmp_path))
    for key, size in ((1, 2 * MiB), (2, MiB)):
        store.allocate(key, size, owner=5, writer=5)
        fill(store, key, size)
        store.seal(key)
    service = StoreService(store, asyncio.get_running_loop())
    pipe = HeldPipe(os.path.join(store.spill_dir(), "1"))
    try:
        allocation = service.ask(7, "store_allocate", (3, 2 * MiB, 7))
        assert await asyncio.to_thread(pipe.opened.wait, 30), "the spill never started"
        assert store.objects[1].spilling and not allocation.done()
        yield store, service, pipe, allocation
    finally:
        pipe.release()
        service.close()
        store.close()


@pytest.mark.timeout(60)
def test_while_a_spill_writes_other_processes_allocate_pin_and_free(tmp_path):
    async def scenario():
        async with spill_held(tmp_path) as (store, service, pipe, allocation):
            later_of_7: list = []
            service.run(lambda: later_of_7.append("seal"), 7)  # (caller 7 waits its turn)
            pinned = await asyncio.wait_for(service.ask(8, "store_pin", (2,)), 10)
            room = await asyncio.wait_for(service.ask(9, "store_allocate", (4, MiB // 2, 9)), 10)
            service.run(lambda: store.free(4), 9)
            summary = await asyncio.wait_for(service.call(store.usage), 10)
            assert pinned == (store.objects[2].offset, MiB) and isinstance(room, int)
            assert summary["spills"] == 0 and not allocation.done() and later_of_7 == []
            pipe.release()
            offset = await asyncio.wait_for(allocation, 30)
            assert isinstance(offset, int) and later_of_7 == ["seal"] and 4 not in store.objects
            assert store.usage()["spills"] == 1 and bytes(pipe.received) == b"\x01" * (2 * MiB)
            assert store.objects[1].offset is None and store.objects[1].spill_path.endswith("/1")

    asyncio.run(scenario())


@pytest.mark.timeout(60)
def test_a_value_pinned_while_it_spills_stays_in_memory(tmp_path):
    async def scenario():
        async with spill_held(tmp_path) as (store, service, pipe, allocation):
            pinned = await asyncio.wait_for(service.ask(8, "store_pin", (1,)), 10)
            pipe.release()
            offset = await asyncio.wait_for(allocation, 30)  # (object 2 went instead)
            one, two = store.objects[1], store.objects[2]
            assert pinned == (one.offset, 2 * MiB) and one.spill_path is None and two.offset is None
            assert arena_bytes(store, one.offset, 2 * MiB) == b"\x01" * (2 * MiB)
            assert isinstance(offset, int) and sorted(os.listdir(store.spill_dir())) == ["2"]

    asyncio.run(scenario())


@pytest.mark.timeout(60)
def test_a_value_freed_while_it_spills_leaves_no_file(tmp_path):
    async def scenario():
        async with spill_held(tmp_path) as (store, service, pipe, allocation):
            service.run(lambda: store.free(1), 5)
            assert await asyncio.wait_for(service.call(lambda: 1 in store.objects), 10) is False
            pipe.release()
            assert isinstance(await asyncio.wait_for(allocation, 30), int)
            assert os.listdir(store.spill_dir()) == [] and store.usage()["spilled_bytes"] == 0
            assert store.objects[2].offset is not None  # (nothing else had to go)

    asyncio.run(scenario())


@pytest.mark.timeout(60)
def test_two_readers_of_a_spilled_value_read_it_back_once(tmp_path):
    store = SharedStore(4 * MiB, spill_dir=str(tmp_path))
    try:
        for key in (1, 2):  # object 1 is spilled to make room for 2
            store.allocate(key, 3 * MiB, owner=5, writer=5)
            fill(store, key, 3 * MiB)
            store.seal(key)
        one = store.objects[1]
        assert one.offset is None
        store.free(2)
        path = one.spill_path
        os.unlink(path)
        pipe = HeldPipe(path, writing_back=b"\x01" * (3 * MiB))  # the read back waits for it
        got: dict = {}
        readers = [threading.Thread(target=lambda w=w: got.__setitem__(w, store.pin(1, w))) for w in (8, 9)]
        readers[0].start()
        assert pipe.opened.wait(30) and one.restoring
        readers[1].start()
        assert wait_until(lambda: len(store._moved._waiters) == 1, timeout=30)  # (the second waits for it)
        pipe.release()
        for reader in readers:
            reader.join(30)
        assert got[8] == got[9] == (one.offset, 3 * MiB) and one.pins == {8: 1, 9: 1}
        assert store.usage()["restores"] == 1 and not os.path.exists(path)
        assert arena_bytes(store, one.offset, 3 * MiB) == b"\x01" * (3 * MiB)
    finally:
        store.close()

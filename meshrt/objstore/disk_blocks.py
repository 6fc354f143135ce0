"""Blocks kept in files: where the store puts a value when shared memory has no room
for it (store.py, ``_on_disk``). Arena's methods, under Arena's names, with a file's
path where the arena takes an offset: StoreClient calls either alike."""

from __future__ import annotations

import mmap
import os


def write(path: str, parts: list) -> None:
    """Write each (offset, buffer) of a value into its file."""
    fd = os.open(path, os.O_WRONLY)
    try:
        for rel, buf in parts:
            view = memoryview(buf).cast("B")
            done = 0
            while done < view.nbytes:  # (one pwrite moves at most ~2 GiB)
                done += os.pwrite(fd, view[done:], rel + done)
    finally:
        os.close(fd)


def view_private(path: str, size: int) -> mmap.mmap:
    """A copy-on-write mapping: readers may write to their views, never to the file."""
    return _map(path, size, mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE)


def shared_view(path: str, size: int) -> memoryview:
    """The file itself, read-only."""
    return memoryview(_map(path, size, mmap.MAP_SHARED, mmap.PROT_READ))[:size].toreadonly()


def block_view(path: str, size: int) -> memoryview:
    """The file itself, writable: for a transport that fills it in place."""
    return memoryview(_map(path, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE))[:size]


def _map(path: str, size: int, flags: int, prot: int) -> mmap.mmap:
    if not size:  # (an empty file cannot be mapped)
        return mmap.mmap(-1, 1)
    fd = os.open(path, os.O_RDWR if prot & mmap.PROT_WRITE and flags == mmap.MAP_SHARED else os.O_RDONLY)
    try:
        return mmap.mmap(fd, size, flags=flags, prot=prot)
    finally:
        os.close(fd)  # (the mapping keeps the file, even once the store removes it)

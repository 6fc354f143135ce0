"""The shared-memory arena: one memory file per host, mapped by every process on it.

The file is a memfd (or an unlinked file in /dev/shm where memfd is missing): it has
no name, so nothing is left behind however the processes end, and the zygote
inherits its descriptor, so every worker does too.

Writers copy into one long-lived shared mapping of the whole arena, whose pages
stay mapped once touched: reusing a block is a plain memcpy (~11 GB/s here), while
first use of fresh pages runs at ~3 GB/s (the kernel allocates and zeroes them).
Readers map each object on its own, privately (copy-on-write): views are zero-copy,
a write by a reader (a torch tensor, say) never reaches the stored bytes, and the
mapping's lifetime tells when the reader is done with it.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import threading

from .allocator import PAGE

# Linux >= 5.14: populate a range's page tables in one call instead of one fault
# per page (batched, several times faster than touching pages).
MADV_POPULATE_WRITE = 23
_GRAIN = 2 << 20  # this process remembers which 2 MiB grains of the arena it has mapped

_libc = ctypes.CDLL(None, use_errno=True)
_memmove = _libc.memmove
_memmove.restype = ctypes.c_void_p
_memmove.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]


class ArenaFullError(Exception):
    """The host ran out of shared memory while reserving pages (not a bus error)."""


def create_arena_fd(capacity: int, directory: str | None = None) -> int:
    """A nameless memory file of ``capacity`` bytes (sparse: no memory used yet).

    ``directory`` (``MESHRT_STORE_DIR``) puts it on a chosen filesystem instead of
    anonymous memory, e.g. a dedicated tmpfs or hugetlbfs mount; it is unlinked at
    once, so it still leaves nothing behind.
    """
    if directory:
        import tempfile

        fd, path = tempfile.mkstemp(prefix="meshrt-objects-", dir=directory)
        os.unlink(path)
        _warn_if_small(directory, capacity)
    elif hasattr(os, "memfd_create"):
        fd = os.memfd_create("meshrt-objects", getattr(os, "MFD_CLOEXEC", 0))
    else:  # pragma: no cover - non-Linux
        import tempfile

        directory = "/dev/shm" if os.path.isdir("/dev/shm") else None
        fd, path = tempfile.mkstemp(prefix="meshrt-objects-", dir=directory)
        os.unlink(path)
    os.ftruncate(fd, capacity)
    return fd


def _warn_if_small(directory: str, capacity: int) -> None:
    try:
        st = os.statvfs(directory)
    except OSError:
        return
    free = st.f_bavail * st.f_frsize
    if free < capacity:
        import logging

        logging.getLogger("meshrt").warning(
            "meshrt: the object store (%d MiB) is larger than the free space of %s (%d MiB); "
            "values beyond that go to disk (slower). Lower init(object_store_memory=...)",
            capacity >> 20, directory, free >> 20)


class Arena:
    """One process's view of the arena: the fd plus a shared mapping made on first write."""

    def __init__(self, fd: int, capacity: int) -> None:
        self.fd = fd
        self.capacity = capacity
        self._shared: mmap.mmap | None = None
        self._base = 0
        self._lock = threading.Lock()
        self._mapped = bytearray(capacity // _GRAIN + 1)
        self.reserved = 0  # everything below this offset was fallocated before

    def _mapping(self) -> tuple[mmap.mmap, int]:
        if self._shared is None:
            with self._lock:
                if self._shared is None:
                    shared = mmap.mmap(self.fd, self.capacity, flags=mmap.MAP_SHARED)
                    self._base = ctypes.addressof(ctypes.c_char.from_buffer(shared))
                    self._shared = shared
        return self._shared, self._base

    def reserve(self, offset: int, size: int) -> None:
        """Make sure the pages behind a block exist, or fail cleanly.

        A write to a page the kernel cannot back is a SIGBUS that kills the process;
        fallocate reports the same shortage as an error we can explain. Pages are
        never given back while the store runs, so only the part above everything
        reserved so far needs it (fallocate walks every page, even existing ones).
        """
        end = offset + size
        if end <= self.reserved:
            return
        start = max(offset, self.reserved)
        try:
            os.posix_fallocate(self.fd, start, end - start)
        except OSError as err:
            if err.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
                raise ArenaFullError(
                    f"the host has no shared memory left for {size >> 20} MiB "
                    f"({os.strerror(err.errno)}); free memory, or lower "
                    "init(object_store_memory=...)"
                ) from None
            raise
        if start == self.reserved:  # no gap below: the reserved prefix grows
            self.reserved = end

    def write(self, offset: int, parts: list) -> None:
        """Copy buffers into the block at ``offset``; ``parts`` is [(relative offset, buffer)].

        First the block's grains that this process has not mapped yet are populated in
        one call (a batched populate beats one page fault per page); then each buffer
        is copied, large ones by two threads: on these machines regular stores from
        two cores (13.6 GB/s) beat one core (7-12 GB/s, depending on whether glibc
        switches to non-temporal stores, which it does only above ~180 MiB here).
        """
        shared, base = self._mapping()
        views = []
        end = offset
        for rel, buf in parts:
            view = buf if isinstance(buf, memoryview) else memoryview(buf)
            if view.ndim != 1 or view.format != "B":
                view = view.cast("B")
            if view.nbytes:
                views.append((rel, view))
                end = max(end, offset + rel + view.nbytes)
        if end > offset:
            self._ensure_mapped(shared, offset, end - offset)
        for rel, view in views:
            _copy(base + offset + rel, _address(view), view.nbytes)

    def _ensure_mapped(self, shared: mmap.mmap, offset: int, length: int) -> None:
        mapped = self._mapped
        first, last = offset // _GRAIN, (offset + length - 1) // _GRAIN
        i = first
        while i <= last:
            if mapped[i]:
                i += 1
                continue
            j = i
            while j <= last and not mapped[j]:
                j += 1
            start = i * _GRAIN
            _populate(shared, start, min(j * _GRAIN, self.capacity) - start)
            mapped[i:j] = b"\x01" * (j - i)
            i = j

    def block_view(self, offset: int, size: int) -> memoryview:
        """The block itself, writable and shared: for a transport that fills it in place."""
        shared, _base = self._mapping()
        if size:
            self._ensure_mapped(shared, offset, size)
        return memoryview(shared)[offset:offset + size]

    def shared_view(self, offset: int, size: int) -> memoryview:
        """The block read-only through the long-lived shared mapping (pages stay mapped)."""
        shared, _base = self._mapping()
        if size:
            self._ensure_mapped(shared, offset, size)
        return memoryview(shared)[offset:offset + size].toreadonly()

    def view_private(self, offset: int, size: int) -> mmap.mmap:
        """A private, copy-on-write mapping of one block (offset is page-aligned)."""
        length = max(size, 1)
        return mmap.mmap(self.fd, length, flags=mmap.MAP_PRIVATE,
                         prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)

    def close(self) -> None:
        if self._shared is not None:
            try:
                self._shared.close()
            except BufferError:  # a caller still holds a view; the OS reclaims it at exit
                pass
            self._shared = None


_SPLIT = 8 << 20  # copies at least this large use two threads
_helper = None
_helper_lock = threading.Lock()


def _copy(dst: int, src: int, n: int) -> None:
    if n < _SPLIT:
        _memmove(dst, src, n)
        return
    global _helper
    if _helper is None:
        with _helper_lock:
            if _helper is None:  # made on first use: the zygote must stay single-threaded
                from concurrent.futures import ThreadPoolExecutor

                _helper = ThreadPoolExecutor(1, thread_name_prefix="meshrt-copy")
    half = (n // 2) & ~(PAGE - 1)
    other = _helper.submit(_memmove, dst, src, half)
    _memmove(dst + half, src + half, n - half)  # ctypes releases the GIL for both
    other.result()


def stop_copy_helper() -> None:
    """End the copy thread (at shutdown): a driver with no thread of ours left can fork
    its zygote at the next init instead of starting a fresh interpreter (~1.5 s)."""
    global _helper
    with _helper_lock:
        helper, _helper = _helper, None
    if helper is not None:
        helper.shutdown(wait=True)


def _populate(shared: mmap.mmap, offset: int, length: int) -> None:
    start = offset - offset % PAGE
    try:
        shared.madvise(MADV_POPULATE_WRITE, start, length + (offset - start))
    except (OSError, ValueError):
        pass  # older kernels: the copy faults pages in itself


def _address(view: memoryview) -> int:
    if view.readonly:
        # ctypes cannot take the address of a read-only buffer; numpy can, without copying.
        import numpy as np

        return np.frombuffer(view, dtype=np.uint8).ctypes.data
    return ctypes.addressof(ctypes.c_char.from_buffer(view))

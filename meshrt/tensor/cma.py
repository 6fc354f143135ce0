"""Same-machine CPU copies by cross-memory attach (see csrc/cma_copy.h for why not
UCX's shared memory), with the buffer's generation check (before a write, after a
read).

Small copies run right in the caller's thread: a 4 KiB copy is a ~7 us syscall, less
than handing it to another thread. Large ones are split across a few threads, which
the kernel then copies in parallel (one thread reaches about half of memcpy's speed
here, two about three quarters).
"""

from __future__ import annotations

import concurrent.futures
import errno
import logging
import os
import threading

import numpy as np

from .. import _C

log = logging.getLogger("meshrt")
INLINE_BYTES = 1 << 20
CHUNK_MIN_BYTES = 8 << 20
_THREADS = max(2, min(4, os.cpu_count() or 2))
_pool = concurrent.futures.ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix="meshrt-cma")
_refused: set[int] = set()  # owner pids the kernel will not let us attach to


class GenerationMismatch(Exception):
    """The buffer's slot no longer holds the handle's generation: it was dropped."""


def transfer(pid: int, local: int, remote: int, nbytes: int, write: bool, slot: int,
             generation: int) -> concurrent.futures.Future:
    """Settles with None, GenerationMismatch, PermissionError (attach refused: use UCX
    instead) or ProcessLookupError (the owner is gone)."""
    done: concurrent.futures.Future = concurrent.futures.Future()
    try:
        if write:
            _check(pid, slot, generation)
        if nbytes <= INLINE_BYTES:
            _copy(pid, local, remote, nbytes, write)
            if not write:
                _check(pid, slot, generation)
            done.set_result(None)
            return done
    except Exception as err:  # noqa: BLE001 - handed to the waiter
        done.set_exception(err)
        return done
    parts = max(1, min(_THREADS, nbytes // CHUNK_MIN_BYTES))
    _Split(pid, local, remote, nbytes, write, slot, generation, parts, done)
    return done


class _Split:
    """One copy in ``parts`` ranges on the pool; the last to finish settles it."""

    def __init__(self, pid, local, remote, nbytes, write, slot, generation, parts, done) -> None:
        self.pid, self.write, self.slot, self.generation, self.done = pid, write, slot, generation, done
        step = (-(-nbytes // parts) + 4095) & ~4095  # page-aligned ranges
        ranges = [(start, min(step, nbytes - start)) for start in range(0, nbytes, step)]
        self.left = len(ranges)
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        for start, n in ranges:
            _pool.submit(_copy, pid, local + start, remote + start, n, write).add_done_callback(self._part_done)

    def _part_done(self, f) -> None:
        with self.lock:
            self.error = self.error or f.exception()
            self.left -= 1
            if self.left:
                return
        try:
            if self.error is not None:
                raise self.error
            if not self.write:
                _check(self.pid, self.slot, self.generation)
            self.done.set_result(None)
        except Exception as err:  # noqa: BLE001
            self.done.set_exception(err)


def _check(pid: int, slot: int, generation: int) -> None:
    word = np.zeros(1, dtype=np.uint64)
    _copy(pid, word.ctypes.data, slot, 8, False)
    if int(word[0]) != generation:
        raise GenerationMismatch()


def _copy(pid: int, local: int, remote: int, nbytes: int, write: bool) -> None:
    try:
        _C.cma_copy(pid, local, remote, nbytes, write)
    except OSError as err:
        if err.errno == errno.ESRCH:
            raise ProcessLookupError(f"process {pid} has exited") from None
        if err.errno == errno.EFAULT:
            raise ProcessLookupError(f"the memory of process {pid} is no longer mapped (freed?)") from None
        raise


def refused(pid: int) -> bool:
    return pid in _refused


def refuse(pid: int) -> None:
    if pid not in _refused:
        _refused.add(pid)
        log.info("meshrt: the kernel refuses cross-memory attach to process %d (ptrace rules, e.g. "
                 "Yama's ptrace_scope); its TensorBuffers go through UCX", pid)

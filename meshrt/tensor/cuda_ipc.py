"""CUDA IPC between processes of one machine: a peer's allocation mapped once into
this process, then device-to-device copies with no host staging."""

from __future__ import annotations

import concurrent.futures
import threading

from .. import _C

_opened: dict[tuple[bytes, int], int] = {}  # (ipc handle, device) -> base pointer here
_lock = threading.Lock()
_copies = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="meshrt-cuda-ipc")


def available() -> tuple[int, str]:
    """(number of GPUs, why there are none)."""
    return _C.cuda_available()


def export(ptr: int) -> tuple[bytes, int, int] | None:
    """(handle, offset in its allocation, device) for CUDA memory at ``ptr``, or None
    without a usable driver (the buffer is then reached through UCX only)."""
    if available()[0] == 0:
        return None
    return _C.cuda_ipc_export(ptr)


def peer_pointer(handle: bytes, offset: int, device: int) -> int:
    key = (handle, device)
    with _lock:
        base = _opened.get(key)
        if base is None:
            base = _opened[key] = _C.cuda_ipc_open(handle, device)
    return base + offset


def forget(handle: bytes, device: int) -> None:
    with _lock:
        base = _opened.pop((handle, device), None)
    if base is not None:
        _C.cuda_ipc_close(base, device)


def copy(dst: int, src: int, nbytes: int, device: int) -> concurrent.futures.Future:
    """Copy off the caller's thread (cuMemcpy blocks until done)."""
    return _copies.submit(_C.cuda_memcpy, dst, src, nbytes, device)

"""CUDA IPC between processes of one machine: a peer's allocation mapped once into
this process, then device-to-device copies with no host staging."""

from __future__ import annotations

import concurrent.futures
import threading

from .. import _C

_opened: dict[bytes, list] = {}  # ipc handle -> [base pointer here, device, copies running, forgotten]
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
    """The peer's allocation mapped here (once per handle: tensors of one allocator
    segment share it)."""
    with _lock:
        entry = _opened.get(handle)
        if entry is None:
            entry = _opened[handle] = [_C.cuda_ipc_open(handle, device), device, 0, False]
        entry[3] = False
    return entry[0] + offset


def forget(handle: bytes) -> None:
    """A holder dropped a buffer: unmap once no copy uses the mapping. Other buffers
    of the same segment map it again when they need it."""
    with _lock:
        entry = _opened.get(handle)
        if entry is None:
            return
        entry[3] = True
        if entry[2]:
            return  # the last copy to finish unmaps it
        del _opened[handle]
    _C.cuda_ipc_close(entry[0], entry[1])


def copy(dst: int, src: int, nbytes: int, device: int, handle: bytes | None = None) -> concurrent.futures.Future:
    """Copy off the caller's thread (cuMemcpy blocks until done); the mapping of
    ``handle`` stays open while it runs."""
    if handle is not None:
        with _lock:
            _opened[handle][2] += 1
    return _copies.submit(_copy, dst, src, nbytes, device, handle)


def _copy(dst: int, src: int, nbytes: int, device: int, handle: bytes | None) -> None:
    try:
        _C.cuda_memcpy(dst, src, nbytes, device)
    finally:
        if handle is not None:
            close = None
            with _lock:
                entry = _opened.get(handle)
                if entry is not None:
                    entry[2] -= 1
                    if entry[3] and not entry[2]:
                        close = _opened.pop(handle)
            if close is not None:
                _C.cuda_ipc_close(close[0], close[1])

"""Monarch's ``monarch.rdma`` names, over meshrt's TensorBuffer.

Code written for Monarch's ``RDMABuffer`` runs after changing its import to
``from meshrt.rdma import RDMABuffer``. An RDMABuffer is a TensorBuffer over the bytes
of a contiguous tensor, array or memoryview, and keeps Monarch's meaning: sizes count
bytes, and a read or a write moves the whole buffer (a read needs room for all of it;
a write fills it from the start). The bytes take meshrt's paths (tensor/buffer.py):
shared memory on one host, CUDA IPC between GPUs, UCX across hosts (GPUDirect RDMA
where the NIC offers it). Use TensorBuffer itself for typed elements, offsets and
partial reads.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

from .mesh.future import Future, ready
from .tensor import TensorBuffer
from .tensor.memory import region_of

__all__ = ["RDMABuffer", "get_rdma_backend", "is_ibverbs_available", "is_rdma_available"]

_IB_DEVICES = "/sys/class/infiniband"  # (where Linux lists InfiniBand and RoCE devices)


def is_ibverbs_available() -> bool:
    """Whether this host has an InfiniBand or RoCE device (ibverbs), which UCX uses
    between hosts."""
    try:
        return bool(os.listdir(_IB_DEVICES))
    except OSError:
        return False


def is_rdma_available() -> bool:
    """Monarch's older name for ``is_ibverbs_available()`` (deprecated there too)."""
    warnings.warn("is_rdma_available() is deprecated, as in Monarch: use is_ibverbs_available() or "
                  "get_rdma_backend()", DeprecationWarning, stacklevel=2)
    return is_ibverbs_available()


def get_rdma_backend() -> str:
    """``"ibverbs"`` where this host has an InfiniBand or RoCE device, else ``"tcp"``:
    how buffers move between hosts (UCX over ibverbs, or over TCP). Within a host they
    move through shared memory or CUDA IPC either way; unlike Monarch, meshrt always has
    a path, so never ``"none"``."""
    return "ibverbs" if is_ibverbs_available() else "tcp"


class RDMABuffer:
    """``RDMABuffer(data)``: the bytes of ``data`` (a contiguous torch tensor on CPU or
    CUDA, numpy array or memoryview; not empty), registered without a copy. Send it to
    other actors; they ``await buf.read_into(dst)`` or ``buf.write_from(src)``. The
    process that made it keeps ``data`` alive until ``drop()``."""

    __slots__ = ("_buffer",)

    def __init__(self, data: Any) -> None:
        view = _bytes_of(data, "RDMABuffer(data)")
        if _nbytes(view) == 0:
            raise ValueError("RDMABuffer(data): data holds no bytes; give a non-empty tensor or memoryview")
        self._buffer = TensorBuffer(view)

    @property
    def backend(self) -> str:
        return get_rdma_backend()

    @property
    def owner(self) -> str:
        """The process holding the memory."""
        return f"pid {self._buffer.owner_pid}"

    def size(self) -> int:
        """The buffer's length in bytes."""
        return self._buffer.nbytes

    def read_into(self, dst: Any, *, timeout: float = 60) -> Future:
        """Copy the whole buffer into the first ``size()`` bytes of ``dst`` (a writable
        contiguous tensor, array or memoryview at least that long); resolves to None."""
        view = _bytes_of(dst, "read_into(dst)")
        if _nbytes(view) < self.size():
            raise ValueError(f"read_into(dst): dst holds {_nbytes(view)} bytes, less than the buffer's {self.size()}; "
                             f"give a destination of at least buf.size() bytes")
        return self._buffer.read_into(view, 0, self.size(), timeout=_checked_timeout(timeout, "read_into"))

    def write_from(self, src: Any, *, timeout: float = 60) -> Future:
        """Copy all of ``src`` into the buffer, from its first byte (``src`` may be
        shorter than the buffer, not longer); resolves to None."""
        view = _bytes_of(src, "write_from(src)")
        if _nbytes(view) > self.size():
            raise ValueError(f"write_from(src): src holds {_nbytes(view)} bytes, more than the buffer's "
                             f"{self.size()}; write at most buf.size() bytes")
        return self._buffer.write_from(view, 0, timeout=_checked_timeout(timeout, "write_from"))

    def drop(self) -> Future:
        """In the process that made it: release the memory (later reads and writes by
        anyone fail with BufferDroppedError). Elsewhere: forget this handle. Returns a
        Future that is already done, as Monarch's returns one."""
        self._buffer.drop()
        return ready(None)

    def __reduce__(self):
        return (_rebuilt, (self._buffer,))

    def __repr__(self) -> str:
        return f"<RDMABuffer {self.size()} bytes of {self.owner}>"


def _rebuilt(buffer: TensorBuffer) -> RDMABuffer:
    rebuilt = RDMABuffer.__new__(RDMABuffer)
    rebuilt._buffer = buffer
    return rebuilt


def _bytes_of(obj: Any, what: str) -> Any:
    """``obj``'s memory as one flat run of bytes (uint8), without a copy (what is not a
    contiguous tensor, array or buffer is named by region_of)."""
    region_of(obj, what)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return obj.reshape(-1).view(torch.uint8)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, np.ndarray):
        return obj.reshape(-1).view(np.uint8)
    view = memoryview(obj)
    return view.cast("B") if view.nbytes else view


def _nbytes(view: Any) -> int:
    return view.nbytes  # (a tensor's, an array's and a memoryview's alike)


def _checked_timeout(timeout: Any, op: str) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"{op}(timeout=...): give the seconds to wait, a number above 0; got {timeout!r}")
    return float(timeout)


from .rdma_action import RDMAAction  # noqa: E402 - (it builds on RDMABuffer, above)

__all__ += ["RDMAAction"]

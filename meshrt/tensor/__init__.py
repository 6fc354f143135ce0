"""Tensor movement: one-sided TensorBuffers over shared memory, CUDA IPC and UCX.

The Python face of ``meshrt._C`` (csrc/): see buffer.py for the paths a transfer takes.

The names are loaded on first use (PEP 562): buffer.py imports its sibling modules
through this package, so a package that imported buffer.py while being initialized
would be a cycle, and two threads importing both at once (a worker unpickling a
handle while its core loop lends a value) could each see the other half-done.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["BufferDroppedError", "TensorBuffer", "TransferError"]

if TYPE_CHECKING:
    from .buffer import BufferDroppedError, TensorBuffer
    from .ucx import TransferError


def __getattr__(name: str):
    if name in ("BufferDroppedError", "TensorBuffer"):
        from . import buffer

        return getattr(buffer, name)
    if name == "TransferError":
        from .ucx import TransferError

        return TransferError
    raise AttributeError(f"module 'meshrt.tensor' has no attribute {name!r}")

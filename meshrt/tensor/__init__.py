"""Tensor movement: one-sided TensorBuffers over shared memory, CUDA IPC and UCX.

The Python face of ``meshrt._C`` (csrc/): see buffer.py for the paths a transfer takes.
"""

from .buffer import BufferDroppedError, TensorBuffer
from .ucx import TransferError

__all__ = ["BufferDroppedError", "TensorBuffer", "TransferError"]

"""Where a tensor's bytes are: pointer, size, dtype, device, for torch tensors, numpy
arrays and memoryviews alike, with the errors that name what to change."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

# memoryview formats -> dtype names shared with numpy and torch
_FORMATS = {"B": "uint8", "b": "int8", "c": "uint8", "h": "int16", "H": "uint16", "i": "int32",
            "I": "uint32", "l": "int64", "L": "uint64", "q": "int64", "Q": "uint64", "e": "float16",
            "f": "float32", "d": "float64", "?": "bool"}


@dataclass(frozen=True)
class Region:
    """Contiguous memory in this process. ``keep`` holds the object that owns it."""

    ptr: int
    nbytes: int
    dtype: str  # "float32", "bfloat16", ...
    itemsize: int
    shape: tuple
    device: str  # "cpu" or "cuda:N"
    writable: bool
    keep: Any

    @property
    def numel(self) -> int:
        return self.nbytes // self.itemsize if self.itemsize else 0

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def device_index(self) -> int:
        return int(self.device.split(":")[1]) if ":" in self.device else 0


def region_of(obj: Any, what: str) -> Region:
    """The memory of a torch tensor, numpy array or buffer object; ``what`` names it in errors."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        if not obj.is_contiguous():
            raise ValueError(f"{what}: the tensor is not contiguous (strides {obj.stride()} for shape "
                             f"{tuple(obj.shape)}); pass tensor.contiguous()")
        if obj.device.type not in ("cpu", "cuda"):
            raise ValueError(f"{what}: tensors on {obj.device} are not supported; use a CPU or CUDA tensor")
        device = "cpu" if obj.device.type == "cpu" else f"cuda:{obj.device.index or 0}"
        return Region(obj.data_ptr(), obj.numel() * obj.element_size(), str(obj.dtype).removeprefix("torch."),
                      obj.element_size(), tuple(obj.shape), device, True, obj)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, np.ndarray):
        if not obj.flags.c_contiguous:
            raise ValueError(f"{what}: the array is not C-contiguous; pass numpy.ascontiguousarray(array)")
        return Region(obj.ctypes.data, obj.nbytes, obj.dtype.name, obj.itemsize, obj.shape, "cpu",
                      bool(obj.flags.writeable), obj)
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError(f"{what}: expected a torch tensor, numpy array or buffer (bytes, bytearray, "
                        f"memoryview), got {type(obj).__qualname__}") from None
    if not view.c_contiguous:
        raise ValueError(f"{what}: the memoryview is not contiguous; copy it with bytes(view)")
    dtype = _FORMATS.get(view.format.lstrip("@=<"))
    if dtype is None:
        raise TypeError(f"{what}: memoryview format {view.format!r} has no tensor dtype; use view.cast('B')")
    if view.readonly:  # bytes: ctypes refuses read-only buffers, numpy does not
        ptr = _readonly_address(view)
    else:
        import ctypes

        ptr = ctypes.addressof(ctypes.c_char.from_buffer(view)) if view.nbytes else 0
    return Region(ptr, view.nbytes, dtype, view.itemsize, view.shape or (), "cpu", not view.readonly, view)


def _readonly_address(view: memoryview) -> int:
    import numpy as np

    return np.frombuffer(view, dtype=np.uint8).ctypes.data if view.nbytes else 0

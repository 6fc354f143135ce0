"""Peak tensor memory of one training step, on any device.

CUDA has allocator statistics; a CPU process has only its resident size, which also
counts libraries, communication buffers and the allocator's slack. This tracker sees
every tensor an op returns (forward, backward and optimizer all run through the
dispatcher on the calling thread) plus the tensors alive when it starts, and counts
each storage once until it is freed. We wrote it instead of using torch's
``MemTracker`` because that one refuses modules called more than once per step, which
is what a pipeline schedule does with its microbatches.
"""

from __future__ import annotations

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

_SWEEP_EVERY = 4  # ops between checks for freed storages: bounded cost, small overcount


class TensorMemory(TorchDispatchMode):
    """``with TensorMemory(existing) as m: ...``; then ``m.peak`` (bytes)."""

    def __init__(self, existing=()) -> None:
        super().__init__()
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.current = 0
        self.peak = 0
        self._ops = 0
        for t in existing:
            self._add(t)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            self._add(t)
        self._ops += 1
        if self._ops % _SWEEP_EVERY == 0:
            self._sweep()
        return out

    def _add(self, t) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            return
        local = getattr(t, "_local_tensor", None)  # a DTensor: its shard is what is held
        if local is not None:
            t = local
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # tensors without storage (sparse, fakes)
            return
        key = storage._cdata
        size = storage.nbytes()
        if key in self.live or size == 0:
            return
        self.live[key] = (StorageWeakRef(storage), size)
        self.current += size
        self.peak = max(self.peak, self.current)

    def _sweep(self) -> None:
        for key in [k for k, (ref, _) in self.live.items() if ref.expired()]:
            self.current -= self.live.pop(key)[1]


def training_tensors(model, optimizer) -> list:
    """What a step starts with: parameters, buffers, gradients, optimizer state."""
    out = list(model.parameters()) + list(model.buffers())
    out += [p.grad for p in model.parameters() if p.grad is not None]
    for state in optimizer.state.values():
        out += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return out

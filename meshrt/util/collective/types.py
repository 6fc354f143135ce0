"""The names Ray's ``ray.util.collective.types`` gives backends and reduce operations."""

from __future__ import annotations

from enum import Enum


class Backend:
    """``Backend("gloo")`` -> ``"GLOO"``; ``Backend.NCCL``, ``Backend.GLOO``."""

    NCCL = "NCCL"
    GLOO = "GLOO"

    def __new__(cls, name: str) -> str:  # (a normalized name, as Ray's: not an instance)
        upper = str(name).upper()
        if upper == "TORCH_GLOO":
            return cls.GLOO
        if upper not in (cls.NCCL, cls.GLOO):
            raise ValueError(f"collective backend {name!r}: give 'nccl' (CUDA tensors) or 'gloo' (CPU tensors)")
        return upper


class ReduceOp(Enum):
    SUM = 0
    PRODUCT = 1
    MIN = 2
    MAX = 3

"""Collective communication between actors (Ray's ``ray.util.collective``): allreduce,
broadcast, allgather, reducescatter, reduce, send/recv and barrier over named groups,
on torch.distributed (gloo for CPU tensors, NCCL for CUDA ones)."""

from .collective import (
    allgather,
    allreduce,
    barrier,
    broadcast,
    create_collective_group,
    destroy_collective_group,
    get_collective_group_size,
    get_group_handle,
    get_rank,
    gloo_available,
    init_collective_group,
    is_backend_available,
    is_group_initialized,
    nccl_available,
    recv,
    reduce,
    reducescatter,
    send,
)
from .types import Backend, ReduceOp

__all__ = ["Backend", "ReduceOp", "allgather", "allreduce", "barrier", "broadcast", "create_collective_group",
           "destroy_collective_group", "get_collective_group_size", "get_group_handle", "get_rank",
           "gloo_available", "init_collective_group", "is_backend_available", "is_group_initialized",
           "nccl_available", "recv", "reduce", "reducescatter", "send"]

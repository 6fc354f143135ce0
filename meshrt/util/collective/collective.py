"""Ray's ``ray.util.collective`` calls, on torch.distributed process groups (groups.py).

Tensors are torch tensors or numpy arrays (changed in place, as in Ray); gloo moves CPU
tensors, NCCL CUDA ones. Each call blocks until its operation is done on this rank.
"""

from __future__ import annotations

from typing import Any

from ..._private import toplevel
from ..._private.ids import to_hex
from . import groups
from .types import Backend, ReduceOp


def nccl_available() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_nccl_available()


def gloo_available() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_gloo_available()


def is_backend_available(backend: str) -> bool:
    return nccl_available() if Backend(backend) == Backend.NCCL else gloo_available()


def is_group_initialized(group_name: str) -> bool:
    return groups.registry.get(group_name) is not None


def init_collective_group(world_size: int, rank: int, backend: str = Backend.NCCL, group_name: str = "default",
                          gloo_timeout: int = 30000) -> None:
    """Join group ``group_name`` as ``rank`` of ``world_size``: every rank calls it (in
    its actor); returns once all have joined."""
    _check_inside_actor("init_collective_group")
    backend = _available(backend)
    _check_group(world_size, [rank], group_name, gloo_timeout)
    groups.registry.add(groups.Group(group_name, world_size, rank, backend, gloo_timeout))


def create_collective_group(actors: list, world_size: int, ranks: list, backend: str = Backend.NCCL,
                            group_name: str = "default", gloo_timeout: int = 30000) -> None:
    """From the driver: make ``actors`` a group, ``ranks[i]`` being the rank of
    ``actors[i]``; each sets its part up at its first collective call."""
    backend = _available(backend)
    if len(actors) != len(ranks):
        raise ValueError(f"create_collective_group(): {len(actors)} actors but {len(ranks)} ranks; give one rank "
                         f"per actor")
    if sorted(ranks) != list(range(len(ranks))):
        raise ValueError(f"create_collective_group(ranks={ranks}): ranks must be 0..{len(ranks) - 1}, each once")
    _check_group(world_size, ranks, group_name, gloo_timeout)
    if world_size != len(ranks):
        raise ValueError(f"create_collective_group(world_size={world_size}): {len(ranks)} actors were given")
    ids = [getattr(actor, "_actor_id", None) for actor in actors]
    if any(i is None for i in ids):
        raise TypeError("create_collective_group(actors=...): give actor handles")
    plan = (world_size, {to_hex(i): r for i, r in zip(ids, ranks, strict=True)}, backend, gloo_timeout)
    if not toplevel.get(groups.meeting(group_name).set_plan.remote(plan)):
        raise RuntimeError(f"create_collective_group(group_name={group_name!r}): that group exists already; "
                           f"destroy it in its actors, or name this one otherwise")


def destroy_collective_group(group_name: str = "default") -> None:
    """Leave the group in this process (rank 0 also removes its meeting place, so the
    name may be used again)."""
    _check_inside_actor("destroy_collective_group")
    group = groups.registry.pop(group_name)
    if group is None:
        return
    group.destroy()
    if group.rank == 0:
        try:
            toplevel.kill(group.meeting)
        except Exception:  # noqa: BLE001 - gone already
            pass


def get_rank(group_name: str = "default") -> int:
    """This process's rank in the group; -1 when it is not in it."""
    _check_inside_actor("get_rank")
    group = _group_or_none(group_name)
    return -1 if group is None else group.rank


def get_collective_group_size(group_name: str = "default") -> int:
    """The group's size; -1 when this process is not in it."""
    _check_inside_actor("get_collective_group_size")
    group = _group_or_none(group_name)
    return -1 if group is None else group.world_size


def get_group_handle(group_name: str = "default") -> groups.Group:
    _check_inside_actor("get_group_handle")
    group = _group_or_none(group_name)
    if group is None:
        raise RuntimeError(f"collective group {group_name!r} is not set up in this process: call "
                           f"init_collective_group(...) in each of its actors, or create_collective_group(...) "
                           f"from the driver first")
    return group


# -- operations ---------------------------------------------------------------------------------


def allreduce(tensor: Any, group_name: str = "default", op: ReduceOp = ReduceOp.SUM) -> None:
    import torch.distributed as dist

    group = get_group_handle(group_name)
    opts = dist.AllreduceOptions()
    opts.reduceOp = _op(op)
    group.pg.allreduce([groups.tensor_of(tensor, "allreduce(tensor)")], opts).wait()


def barrier(group_name: str = "default") -> None:
    get_group_handle(group_name).pg.barrier().wait()


def reduce(tensor: Any, dst_rank: int = 0, group_name: str = "default", op: ReduceOp = ReduceOp.SUM) -> None:
    import torch.distributed as dist

    group = get_group_handle(group_name)
    opts = dist.ReduceOptions()
    opts.reduceOp = _op(op)
    opts.rootRank = _rank(group, dst_rank, "reduce(dst_rank=...)")
    opts.rootTensor = 0
    group.pg.reduce([groups.tensor_of(tensor, "reduce(tensor)")], opts).wait()


def broadcast(tensor: Any, src_rank: int = 0, group_name: str = "default") -> None:
    import torch.distributed as dist

    group = get_group_handle(group_name)
    opts = dist.BroadcastOptions()
    opts.rootRank = _rank(group, src_rank, "broadcast(src_rank=...)")
    opts.rootTensor = 0
    group.pg.broadcast([groups.tensor_of(tensor, "broadcast(tensor)")], opts).wait()


def allgather(tensor_list: list, tensor: Any, group_name: str = "default") -> None:
    """Fill ``tensor_list`` (one tensor per rank) with every rank's ``tensor``."""
    group = get_group_handle(group_name)
    outputs = _per_rank(group, tensor_list, "allgather(tensor_list)")
    group.pg.allgather([outputs], [groups.tensor_of(tensor, "allgather(tensor)")]).wait()


def reducescatter(tensor: Any, tensor_list: list, group_name: str = "default",
                  op: ReduceOp = ReduceOp.SUM) -> None:
    """``tensor`` gets this rank's share: ``tensor_list[rank]`` reduced over all ranks."""
    import torch.distributed as dist

    group = get_group_handle(group_name)
    inputs = _per_rank(group, tensor_list, "reducescatter(tensor_list)")
    out = groups.tensor_of(tensor, "reducescatter(tensor)")
    if group.backend == Backend.GLOO:
        # (gloo has no reduce-scatter for every dtype: reduce all, keep this rank's part)
        import torch

        stacked = torch.stack([t.reshape(-1) for t in inputs])
        allreduce(stacked, group_name, op)
        out.copy_(stacked[group.rank].reshape(out.shape))
        return
    opts = dist.ReduceScatterOptions()
    opts.reduceOp = _op(op)
    group.pg.reduce_scatter([out], [inputs], opts).wait()


def send(tensor: Any, dst_rank: int, group_name: str = "default") -> None:
    _point_to_point("send", tensor, dst_rank, group_name)


def recv(tensor: Any, src_rank: int, group_name: str = "default") -> None:
    _point_to_point("recv", tensor, src_rank, group_name)


def _point_to_point(op: str, tensor: Any, peer: int, group_name: str) -> None:
    group = get_group_handle(group_name)
    what = "dst_rank" if op == "send" else "src_rank"
    peer = _rank(group, peer, f"{op}({what}=...)")
    if peer == group.rank:
        raise ValueError(f"{op}({what}=...): {peer} is this rank; a rank cannot {op} to itself")
    getattr(group.pg, op)([groups.tensor_of(tensor, f"{op}(tensor)")], peer, 0).wait()


# -- checks -------------------------------------------------------------------------------------


def _group_or_none(group_name: str) -> groups.Group | None:
    return groups.registry.get(group_name) or groups.planned_group(group_name)


def _check_inside_actor(call: str) -> None:
    if toplevel.get_runtime_context().get_actor_id() is None:
        raise RuntimeError(f"{call}() runs inside the actors of a collective group; call it in an actor method "
                           f"(from the driver, use create_collective_group)")


def _check_group(world_size: Any, ranks: list, group_name: Any, timeout: Any) -> None:
    if not isinstance(group_name, str) or not group_name:
        raise ValueError(f"group_name={group_name!r}: give a non-empty str")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size={world_size!r}: give a number of ranks >= 1")
    for rank in ranks:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ValueError(f"rank={rank!r}: give a rank in 0..{world_size - 1}")
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0:
        raise ValueError(f"gloo_timeout={timeout!r}: give milliseconds, a number above 0")


def _available(backend: str) -> str:
    backend = Backend(backend)
    if not is_backend_available(backend):
        raise RuntimeError(f"collective backend {backend.lower()!r} is not available in this torch build: "
                           f"use backend={'gloo' if backend == Backend.NCCL else 'nccl'!r} (gloo: CPU tensors, nccl: CUDA)")
    return backend


def _rank(group: groups.Group, rank: Any, what: str) -> int:
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < group.world_size:
        raise ValueError(f"{what}: {rank!r} is no rank of group {group.name!r} (0..{group.world_size - 1})")
    return rank


def _per_rank(group: groups.Group, tensor_list: Any, what: str) -> list:
    if not isinstance(tensor_list, (list, tuple)) or len(tensor_list) != group.world_size:
        raise ValueError(f"{what}: give a list of {group.world_size} tensors, one per rank of group "
                         f"{group.name!r}")
    return [groups.tensor_of(t, what) for t in tensor_list]


def _op(op: ReduceOp):
    import torch.distributed as dist

    if not isinstance(op, ReduceOp):
        raise TypeError(f"op={op!r}: give a ReduceOp (SUM, PRODUCT, MIN, MAX)")
    return {ReduceOp.SUM: dist.ReduceOp.SUM, ReduceOp.PRODUCT: dist.ReduceOp.PRODUCT,
            ReduceOp.MIN: dist.ReduceOp.MIN, ReduceOp.MAX: dist.ReduceOp.MAX}[op]


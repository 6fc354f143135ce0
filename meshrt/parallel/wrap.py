"""Inside one process: turn the model into its parallel form with PyTorch's own machinery.

- ``dp`` alone: ``DistributedDataParallel`` over the dp group, gradients as bucket views.
- ``fsdp``: FSDP2 ``fully_shard`` on every layer, then the root; with ``dp`` too, a
  2-D (replicate, shard) mesh: hybrid sharding.
- ``tp``: DTensor ``parallelize_module`` with the pairs of ``tensor_plan``; then FSDP2
  over the fsdp (and dp) dims, or, with dp alone, one bucketed gradient all-reduce over
  the dp group after backward. DDP only supports one dim of parallelism, so it cannot
  wrap a tensor-parallel model; averaging the gradients is all it would do here.
- ``pp``: the stage (see pipeline.py) is wrapped like a whole model, except that dp
  averages gradients once after all microbatches, as above: DDP's bucket rebuilding
  trips over the schedule's per-microbatch backward calls.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn

from .layers import layer_units
from .strategy import DIMS, Strategy
from .tensor_plan import plan_for


def device_mesh_for(strategy: Strategy, device_type: str):
    """The 4-D DeviceMesh ``(pp, dp, fsdp, tp)`` over the default process group."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device_type, strategy.sizes, mesh_dim_names=DIMS)


class GradAverager:
    """Average gradients over the dp group in one all-reduce per dtype (tensor-parallel
    gradients are DTensors: their local shards are what the dp peers share)."""

    def __init__(self, model: nn.Module, group, size: int) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.group = group
        self.size = size

    def __call__(self) -> None:
        by_dtype: dict = {}
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grad = p.grad
            local = grad.to_local() if hasattr(grad, "to_local") else grad
            by_dtype.setdefault(local.dtype, []).append(local)
        for grads in by_dtype.values():
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, group=self.group)
            flat /= self.size
            offset = 0
            for g in grads:
                n = g.numel()
                g.copy_(flat[offset:offset + n].view_as(g))
                offset += n


def parallelize(model: nn.Module, strategy: Strategy, mesh) -> tuple[nn.Module, GradAverager | None]:
    """``(model to train, what to run after backward or None)``."""
    if strategy.tp > 1:
        from torch.distributed.tensor.parallel import parallelize_module

        from . import gpt2_tp

        plan = plan_for(model, strategy.tp)
        gpt2_tp.convert(model, strategy.tp)
        model = parallelize_module(model, mesh["tp"], plan)
    if strategy.fsdp > 1:
        from torch.distributed.fsdp import fully_shard

        shard_mesh = mesh["dp", "fsdp"] if strategy.dp > 1 else mesh["fsdp"]
        for unit in _separately_shardable(model):
            fully_shard(unit, mesh=shard_mesh)
        fully_shard(model, mesh=shard_mesh)
        return model, None
    if strategy.dp > 1 and (strategy.tp > 1 or strategy.pp > 1):
        return model, GradAverager(model, mesh["dp"].get_group(), strategy.dp)
    if strategy.dp > 1:
        from torch.nn.parallel import DistributedDataParallel

        # Gradients as views into DDP's all-reduce buckets: no second copy of every
        # gradient and no copy into and out of the buckets each step (off by default in
        # PyTorch, which keeps grads their own tensors for code that detach_()es them).
        return DistributedDataParallel(model, process_group=mesh["dp"].get_group(),
                                       gradient_as_bucket_view=True), None
    return model, None


def _separately_shardable(model: nn.Module) -> list[nn.Module]:
    """Layers that get an FSDP group of their own: the middle ones (the repeated
    blocks). The first and last (embedding, output head) stay in the root's group,
    as in a hand-written FSDP2 script: three fewer collectives per layer each step
    (gloo pays a round trip for each). So do layers sharing a weight (a tied
    embedding and head): a group frees its gathered weights after its layer runs,
    which would leave the other user a shard."""
    units = [unit for _name, unit in layer_units(model) if unit is not model]
    if len(units) >= 3:
        units = units[1:-1]
    users: dict[int, int] = {}
    for unit in units:
        for p in unit.parameters():
            users[id(p)] = users.get(id(p), 0) + 1
    return [unit for unit in units
            if any(True for _ in unit.parameters()) and all(users[id(p)] == 1 for p in unit.parameters())]


def unwrap(model: nn.Module) -> nn.Module:
    """The user's module inside DDP and torch.compile wrappers (FSDP2 keeps the module)."""
    if isinstance(model, nn.parallel.DistributedDataParallel):
        model = model.module
    return getattr(model, "_orig_mod", model)  # torch.compile

"""Weights that two pipeline stages share, such as GPT-2's token embedding and output
head (one tensor in the model). Each stage keeps its own copy; after backward the
copies' gradients are summed over the processes holding them, so the copies take the
same optimizer steps and stay equal, and the sum is the gradient the single tensor
gets in one process."""

from __future__ import annotations

import torch.nn as nn

from .layers import layer_units
from .strategy import Strategy


def shared_weights(model: nn.Module, starts: list[int]) -> list[dict[int, str]]:
    """For each weight used by more than one stage: ``{stage: its name there}``. Read
    from the whole model, so every process computes the same list."""
    units = layer_units(model)
    stage_of = []
    for stage, (a, b) in enumerate(zip(starts, starts[1:] + [len(units)], strict=True)):
        stage_of += [stage] * (b - a)
    users: dict[int, dict[int, str]] = {}
    for k, (unit_name, unit) in enumerate(units):
        for name, p in unit.named_parameters(remove_duplicate=False):
            users.setdefault(id(p), {}).setdefault(stage_of[k], f"{unit_name}.{name}")
    return [stages for stages in users.values() if len(stages) > 1]


class TiedGradients:
    """Sums the shared weights' gradients across stages. Building it is collective: every
    process of the job creates the same process groups in the same order."""

    def __init__(self, shared: list[dict[int, str]], strategy: Strategy, rank: int, model: nn.Module) -> None:
        import torch.distributed as dist

        self.pairs = []
        coords = [strategy.coords(r) for r in range(strategy.size)]
        me = coords[rank]
        for stages in shared:
            replicas: dict[tuple, list[int]] = {}
            for r, c in enumerate(coords):
                if c["pp"] in stages:
                    replicas.setdefault((c["dp"], c["fsdp"], c["tp"]), []).append(r)
            for key in sorted(replicas):
                group = dist.new_group(replicas[key])
                if rank in replicas[key]:
                    self.pairs.append((model.get_parameter(stages[me["pp"]]), group))

    def __bool__(self) -> bool:
        return bool(self.pairs)

    def __call__(self) -> None:
        import torch.distributed as dist

        for param, group in self.pairs:
            grad = param.grad
            if grad is not None:
                dist.all_reduce(grad.to_local() if hasattr(grad, "to_local") else grad, group=group)

"""Pipeline parallelism inside one process: this process's stage, driven by PyTorch's
GPipe or 1F1B schedule (``torch.distributed.pipelining``), which moves activations
and gradients between neighbouring stages with send/recv over the pp group.

Why torch.distributed's send/recv and not the tensor engine: on GPUs it is NCCL,
device to device, inside the schedule's own stream ordering. On a CPU host the
engine copies faster (benchmarks/results/tensor.md: 7.0 GB/s against gloo's 1.2 GB/s
at 1 MiB) but the activations are small beside the compute: the pipeline rows of
benchmarks/parallel.py send 1.5 to 15 MiB per step, a few milliseconds of a step
of hundreds, so a second transport beside the schedule's would not pay for itself.

The stage module keeps the model's own parameter names (an ``nn.Sequential`` slice
with its original child names, or a language model cut down by ``decoder``), so
state dicts and checkpoints of all stages together read like the unsplit model's.

The schedule's loss target is the microbatch's sample indices: the last stage looks
the microbatch up in the step's batch and hands ``loss_fn(output, microbatch)`` the
same kind of batch a single process would (inputs included), so one ``loss_fn``
serves every strategy.
"""

from __future__ import annotations

import collections
from typing import Any

import torch
import torch.nn as nn

from . import batch as batches
from .decoder import PipelineLayoutError, check_batch, decoder_stage, family_of
from .layers import cut_groups, layer_units


def stage_module(model: nn.Module, starts: list[int], stage: int) -> nn.Module:
    """This stage's part of ``model``; ``starts`` index ``layer_units(model)``."""
    units = layer_units(model)
    ends = starts[1:] + [len(units)]
    mine = units[starts[stage]:ends[stage]]
    if not isinstance(model, nn.Sequential):
        family = check_pipelinable(model)
        return decoder_stage(model, family, [n for n, _ in mine], stage == 0, stage == len(starts) - 1)
    if not any(True for _n, unit in mine for _ in unit.parameters()):
        raise PipelineLayoutError(
            f"pipeline stage {stage} would hold only parameter-free layers "
            f"({', '.join(n for n, _ in mine)}); use fewer stages (pp) for this model")
    return nn.Sequential(collections.OrderedDict(mine))


def check_pipelinable(model: nn.Module):
    """None for an ``nn.Sequential``; a language model's family; raises for anything else."""
    if isinstance(model, nn.Sequential):
        children = list(model)
        if len({id(c) for c in children}) != len(children):
            twice = next(i for i, c in enumerate(children) if any(c is d for d in children[:i]))
            raise PipelineLayoutError(
                f"pipeline parallelism (pp > 1): the nn.Sequential uses one module at two positions "
                f"(again at {twice}); stages are built from its distinct children, so that use would be "
                "lost: give each position a module of its own, or use dp/fsdp for this model")
        return None
    family = family_of(model)
    if family is None:
        raise PipelineLayoutError(
            f"pipeline parallelism (pp > 1) needs an nn.Sequential model or a Hugging Face "
            f"GPT-2 or Llama-style language model in this version, got {type(model).__name__}; "
            "wrap the layers in nn.Sequential or use dp/fsdp/tp")
    return family


def even_starts(model: nn.Module, stages: int) -> list[int]:
    """Stage boundaries balancing parameter counts, for a Strategy given without a Plan."""
    from .partition import partition

    units = layer_units(model)
    groups = cut_groups(model)
    if len(groups) < stages:
        raise PipelineLayoutError(f"{len(groups)} layers cannot fill pp={stages} stages; lower pp")
    sizes = [float(sum(p.numel() for k in g for p in units[k][1].parameters()) + 1) for g in groups]
    zeros = [0.0] * len(sizes)
    starts = partition(sizes, zeros, zeros, stages, cap=float("inf")).starts
    return [groups[g][0] for g in starts]


def starts_from_plan(model: nn.Module, stage_layers: list[list[str]]) -> list[int]:
    names = [n for n, _ in layer_units(model)]
    try:
        # a plan names the layers a stage cannot separate as one, "first+...+last"
        starts = [names.index(layers[0].split("+")[0]) for layers in stage_layers]
    except ValueError as err:
        raise PipelineLayoutError(f"the plan's stages name a layer this model lacks ({err}); "
                                  "make the plan with this model_fn") from None
    first, last = stage_layers[0][0].split("+")[0], stage_layers[-1][-1].split("+")[-1]
    if (first, last) != (names[0], names[-1]):
        raise PipelineLayoutError(
            f"the plan's stages run from layer {first!r} to {last!r}, but this model's layers run from "
            f"{names[0]!r} to {names[-1]!r}: the plan was made for another model; make it with this model_fn")
    return starts


class PipelineRunner:
    """Runs one training step's forward and backward of this stage under the schedule."""

    def __init__(self, module: nn.Module, stage: int, stages: int, microbatches: int, schedule: str,
                 group, device, loss_fn, output=None) -> None:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        self.stage, self.stages = stage, stages
        self.microbatches = microbatches
        self.user_loss = loss_fn
        self.output = output  # (last stage's tensor, microbatch) -> what the whole model returns
        self.batch: Any = None
        pipe_stage = PipelineStage(module, stage, stages, device, group=group)
        kind = ScheduleGPipe if schedule == "gpipe" else Schedule1F1B
        self.schedule = kind(pipe_stage, n_microbatches=microbatches, loss_fn=self._loss, scale_grads=True)

    @property
    def is_last(self) -> bool:
        return self.stage == self.stages - 1

    def run(self, batch: Any) -> float | None:
        """Forward and backward of every microbatch; the mean loss on the last stage."""
        n = batches.check_divisible(batch, self.microbatches, f"{self.microbatches} microbatches")
        self.batch = batch
        target = torch.arange(n)
        losses: list = []
        if self.stage == 0:
            if self.output is not None:
                inputs = check_batch(batch)
            elif isinstance(batch, dict):
                raise PipelineLayoutError("a pipeline's first stage takes one input tensor; pass the "
                                          "batch as a tensor or as (inputs, targets)")
            else:
                inputs = batch[0] if isinstance(batch, (tuple, list)) else batch
            if self.is_last:
                self.schedule.step(inputs, target=target, losses=losses)
            else:
                self.schedule.step(inputs)
        elif self.is_last:
            self.schedule.step(target=target, losses=losses)
        else:
            self.schedule.step()
        self.batch = None
        if not self.is_last:
            return None
        return float(sum(float(x.detach()) for x in losses) / len(losses))

    def _loss(self, output, index):
        mb = batches.select(self.batch, index)
        if self.output is not None:
            output = self.output(output, mb)
        return self.user_loss(output, mb)

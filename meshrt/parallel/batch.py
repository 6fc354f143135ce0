"""Batches: how one is fed to the model and cut into per-replica and per-microbatch parts.

A batch is a tensor, a tuple/list whose first item is the model's input (the rest,
targets, are for ``loss_fn``), or a dict of keyword arguments (Hugging Face style:
``model(**batch)``). Every tensor in it shares its first dim, the samples.
"""

from __future__ import annotations

from typing import Any

import torch


def forward(model, batch: Any):
    from .wrap import unwrap

    if getattr(unwrap(model), "whole_batch", False):  # parallel.lightning: training_step(batch)
        return model(batch)
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(batch[0])
    return model(batch)


def batch_size(batch: Any) -> int:
    sizes = {t.shape[0] for t in _tensors(batch) if t.dim() > 0}
    if not sizes:
        raise ValueError("the batch holds no tensor with a samples dim; pass a tensor, a tuple "
                         "(inputs, targets) or a dict of tensors")
    if len(sizes) > 1:
        raise ValueError(f"the batch's tensors disagree on the number of samples (first dims "
                         f"{sorted(sizes)}); every tensor needs the same first dim")
    return sizes.pop()


def check_divisible(batch: Any, parts: int, what: str) -> int:
    n = batch_size(batch)
    if n % parts:
        raise ValueError(f"a batch of {n} samples cannot be split evenly into {what}; "
                         f"use a batch size that is a multiple of {parts}")
    return n


def split(batch: Any, parts: int, index: int) -> Any:
    """Part ``index`` of ``parts`` equal parts along the samples dim."""
    if parts == 1:
        return batch
    n = batch_size(batch)
    step = n // parts
    lo, hi = index * step, (index + 1) * step
    return _map(batch, lambda t: t[lo:hi] if t.dim() > 0 else t)


def select(batch: Any, index) -> Any:
    """The samples at ``index`` (a tensor of sample positions) of every tensor."""
    return _map(batch, lambda t: t[index.to(t.device)] if t.dim() > 0 else t)


def to_device(batch: Any, device) -> Any:
    return _map(batch, lambda t: t.to(device, non_blocking=True))


def _map(batch: Any, fn) -> Any:
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, dict):
        return {k: _map(v, fn) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(_map(v, fn) for v in batch)
    return batch


def _tensors(batch: Any):
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, dict):
        for v in batch.values():
            yield from _tensors(v)
    elif isinstance(batch, (tuple, list)):
        for v in batch:
            yield from _tensors(v)

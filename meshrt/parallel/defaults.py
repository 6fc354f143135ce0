"""What ``plan()`` and ``Trainer`` use when no ``optimizer`` or ``loss_fn`` is given, and
how they make the optimizer either way: a model's own ``configure_optimizers()`` (the
PyTorch Lightning convention) when it has one, else AdamW(lr=1e-3); the output's
``.loss`` (Hugging Face), its ``["loss"]``, or the output itself when it is a scalar."""

from __future__ import annotations

from typing import Any

import torch


def make_optimizer(optimizer_fn, model: torch.nn.Module):
    """``(optimizer, lr scheduler or None)`` over the parameters as they are now (after
    sharding: FSDP and tensor parallelism replace them)."""
    from .wrap import unwrap

    if optimizer_fn is not None:
        return optimizer_fn(model.parameters()), None
    inner = unwrap(model)
    if hasattr(inner, "configure_optimizers"):
        return _lightning_optimizers(inner.configure_optimizers(), type(inner).__name__)
    return torch.optim.AdamW(model.parameters(), lr=1e-3), None


def default_loss(out: Any, batch: Any):
    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    if loss is None and isinstance(out, torch.Tensor):
        loss = out if out.dim() == 0 else out.float().mean()
    if loss is None:
        raise TypeError(f"the model returned {type(out).__name__}, which has no loss; pass "
                        "loss_fn=(output, batch) -> loss tensor")
    return loss


def _lightning_optimizers(configured, owner: str):
    """One optimizer, optionally with one scheduler, from any of the shapes Lightning's
    ``configure_optimizers`` may return."""
    scheduler = None
    if isinstance(configured, dict):
        scheduler = configured.get("lr_scheduler")
        configured = configured.get("optimizer")
    elif isinstance(configured, (tuple, list)) and len(configured) == 2 and isinstance(configured[0], (list, tuple)):
        optimizers, schedulers = configured
        if len(schedulers) > 1:
            raise ValueError(f"{owner}.configure_optimizers() returned {len(schedulers)} schedulers; "
                             "parallel.Trainer steps one")
        configured, scheduler = list(optimizers), (schedulers[0] if schedulers else None)
    if isinstance(configured, (tuple, list)):
        if len(configured) != 1:
            raise ValueError(f"{owner}.configure_optimizers() returned {len(configured)} optimizers; "
                             "parallel.Trainer trains with one (manual optimization is not supported)")
        configured = configured[0]
    if not isinstance(configured, torch.optim.Optimizer):
        raise TypeError(f"{owner}.configure_optimizers() returned {type(configured).__name__}, not an "
                        "optimizer; return one torch.optim.Optimizer (optionally with an lr_scheduler)")
    if isinstance(scheduler, dict):
        if scheduler.get("interval", "epoch") != "step":
            raise ValueError(f"{owner}.configure_optimizers(): parallel.Trainer has no epochs; give the "
                             "lr_scheduler interval='step' (it is stepped after every optimizer step)")
        scheduler = scheduler["scheduler"]
    return configured, scheduler

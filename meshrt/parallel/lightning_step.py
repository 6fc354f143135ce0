"""PyTorch Lightning modules under ``parallel.Trainer``: the module's ``training_step`` is
the step and its ``configure_optimizers`` the optimizer, so a LightningModule trains
with any Strategy (dp, fsdp, tp) without a Lightning Trainer::

    trainer = parallel.Trainer(parallel.lightning(MyModule), mesh, Strategy(dp=2))
    loss = trainer.step(batch).get()

``training_step`` runs as the forward of a wrapper module, so DDP's and FSDP's hooks
see it as they would see ``forward`` (Lightning does the same in its strategies).
The wrapper holds the module's children under their own names, so state dicts and
checkpoints read like the LightningModule's. ``self.log`` outside a Lightning
Trainer only warns; nothing is logged. Pipeline stages (pp > 1) need a model
meshrt can cut (an ``nn.Sequential`` or a GPT-2/Llama-style language model), which a
``training_step`` is not.
"""

from __future__ import annotations

import torch.nn as nn


class lightning:  # noqa: N801 - used like a function: parallel.lightning(MyModule)
    """A picklable ``model_fn`` building ``module_fn()`` wrapped for parallel.Trainer."""

    def __init__(self, module_fn) -> None:
        if not callable(module_fn):
            raise TypeError(f"parallel.lightning(module_fn): expected a LightningModule class or a "
                            f"function returning one, got {module_fn!r}")
        self.module_fn = module_fn

    def __call__(self) -> LightningStep:
        module = self.module_fn()
        if not hasattr(module, "training_step"):
            raise TypeError(f"parallel.lightning: {type(module).__name__} has no training_step; "
                            "pass a LightningModule")
        return LightningStep(module)


class LightningStep(nn.Module):
    """``forward(batch)`` is ``module.training_step(batch, batch_idx)``, returning the loss."""

    whole_batch = True  # batch.forward hands the batch over as it is

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        for name, child in module.named_children():
            self.add_module(name, child)
        for name, param in module.named_parameters(recurse=False):
            self.register_parameter(name, param)
        object.__setattr__(self, "lit", module)  # not a child: its parameters keep their names
        self.batch_idx = 0

    def forward(self, batch):
        out = self.lit.training_step(batch, self.batch_idx)
        self.batch_idx += 1
        if isinstance(out, dict):
            out = out["loss"]
        if out is None:
            raise ValueError(f"{type(self.lit).__name__}.training_step returned None (a skipped step); "
                             "parallel.Trainer needs every process to return a loss")
        return out

    def configure_optimizers(self):
        return self.lit.configure_optimizers()

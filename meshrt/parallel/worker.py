"""The actor every process of a Trainer's mesh runs: builds its part of the model and
takes its part of each step. Endpoints are plain ``def``: training blocks in
collectives, so it runs on the process's helper thread and leaves the loop free."""

from __future__ import annotations

import os
from typing import Any

from ..mesh import Actor, current_rank, endpoint
from . import batch as batches
from .strategy import Strategy


class ParallelWorker(Actor):
    def __init__(self, model_fn, strategy: dict, optimizer_fn, loss_fn, seed: int) -> None:
        self.model_fn = model_fn
        self.strategy = Strategy.from_dict(strategy)
        self.optimizer_fn = optimizer_fn
        self.loss_fn = loss_fn
        self.seed = seed
        self.model = None

    @endpoint
    def setup(self) -> dict:
        """Build the model (same seed everywhere: identical initial weights), shard it and
        make the optimizer over this process's parameters."""
        import torch

        from .wrap import device_mesh_for, parallelize

        s = self.strategy
        self.rank = current_rank().rank
        self.coords = s.coords(self.rank)
        cuda = torch.cuda.is_available()
        self.device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        self.mesh = device_mesh_for(s, self.device.type)
        torch.manual_seed(self.seed)
        model = self.model_fn().to(self.device)
        self.model, self.after_backward = parallelize(model, s, self.mesh)
        self.optimizer = self.optimizer_fn(self.model.parameters())
        if s.compile:
            self.model = torch.compile(self.model)
        return {"rank": self.rank, "coords": self.coords, "pid": os.getpid(),
                "local_params": sum(_local(p).numel() for p in self.model.parameters())}

    @endpoint
    def step(self, batch: Any) -> float | None:
        """One optimizer step on this replica's share of ``batch``; the loss comes back from
        one process per replica (the others return None)."""
        s = self.strategy
        replica = self.coords["dp"] * s.fsdp + self.coords["fsdp"]
        mine = batches.to_device(batches.split(batch, s.replicas, replica), self.device)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        out = batches.forward(self.model, mine)
        loss = self.loss_fn(out, mine)
        loss.backward()
        if self.after_backward is not None:
            self.after_backward()
        self.optimizer.step()
        value = float(loss.detach().full_tensor() if hasattr(loss, "full_tensor") else loss.detach())
        return value if self.coords["tp"] == 0 else None

    @endpoint
    def state_dict(self) -> dict | None:
        """The full (unsharded) model state on rank 0, on the CPU; None elsewhere.
        Every rank takes part: gathering the shards is collective."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True,
                                                                         cpu_offload=True))
        return dict(full) if self.rank == 0 else None

    @endpoint
    def save(self, path: str) -> None:
        """Each rank writes its shards (torch.distributed.checkpoint): no gather, and a
        mesh of another shape can read them back."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=path)

    @endpoint
    def load(self, path: str) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        state = {"model": model_state, "optim": optim_state}
        dcp.load(state, checkpoint_id=path)
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])


def _local(p):
    return p.to_local() if hasattr(p, "to_local") else p

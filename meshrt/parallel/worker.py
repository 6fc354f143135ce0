"""The actor every process of a Trainer's mesh runs: builds its part of the model and
takes its part of each step. Endpoints are plain ``def``: training blocks in
collectives, so it runs on the process's helper thread and leaves the loop free."""

from __future__ import annotations

import os
from typing import Any

from ..mesh import Actor, current_rank, endpoint
from . import batch as batches
from .defaults import default_loss
from .strategy import Strategy


class ParallelWorker(Actor):
    def __init__(self, model_fn, strategy: dict, optimizer_fn, loss_fn, seed: int,
                 stage_layers: list | None = None) -> None:
        self.model_fn = model_fn
        self.stage_layers = stage_layers  # a Plan's layer names per pipeline stage
        self.strategy = Strategy.from_dict(strategy)
        self.optimizer_fn = optimizer_fn
        self.loss_fn = loss_fn or default_loss
        self.seed = seed
        self.model = None

    @endpoint
    def setup(self) -> dict:
        """Build the model (same seed everywhere: identical initial weights), shard it and
        make the optimizer over this process's parameters."""
        import torch

        from .defaults import make_optimizer
        from .wrap import device_mesh_for, parallelize

        s = self.strategy
        _import_machinery()
        self.rss_base = _peak_rss()
        share_cpu_threads()
        self.rank = current_rank().rank
        self.coords = s.coords(self.rank)
        cuda = torch.cuda.is_available()
        self.device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        self.mesh = device_mesh_for(s, self.device.type)
        torch.manual_seed(self.seed)
        model = self.model_fn().to(self.device)
        self.pipeline = None
        stage_output, shared = None, []
        if s.pp > 1:
            model, shared = self._my_stage(model)
            stage_output = getattr(model, "output", None)  # a language model's stage: logits -> outputs
        self.model, self.after_backward = parallelize(model, s, self.mesh)
        self.grads_in_buckets = isinstance(self.model, torch.nn.parallel.DistributedDataParallel)
        if shared:
            from .tied import TiedGradients

            tied = TiedGradients(shared, s, self.rank, self.model)
            if tied:
                self.after_backward = _chain(tied, self.after_backward)
        self.optimizer, self.scheduler = make_optimizer(self.optimizer_fn, self.model)
        if s.compile:
            self.model = torch.compile(self.model)
        if s.pp > 1:
            from .pipeline import PipelineRunner

            self.pipeline = PipelineRunner(self.model, self.coords["pp"], s.pp, s.microbatches, s.schedule,
                                           self.mesh["pp"].get_group(), self.device, self.loss_fn,
                                           output=stage_output)
        return {"rank": self.rank, "coords": self.coords, "pid": os.getpid(),
                "local_params": sum(_local(p).numel() for p in self.model.parameters())}

    def _my_stage(self, model):
        from .pipeline import check_pipelinable, even_starts, stage_module, starts_from_plan
        from .tied import shared_weights

        check_pipelinable(model)
        if self.stage_layers:
            starts = starts_from_plan(model, self.stage_layers)
        else:
            starts = even_starts(model, self.strategy.pp)
        shared = shared_weights(model, starts)
        return stage_module(model, starts, self.coords["pp"]), shared

    @endpoint
    def step(self, batch: Any, track_memory: bool = False) -> float | None:
        """One optimizer step on this replica's share of ``batch``; the loss comes back from
        one process per replica (the others return None)."""
        if track_memory:
            return self._tracked(batch)
        s = self.strategy
        replica = self.coords["dp"] * s.fsdp + self.coords["fsdp"]
        mine = batches.to_device(batches.split(batch, s.replicas, replica), self.device)
        self.model.train()
        # DDP's gradients are views into its all-reduce buckets: zeroing them in place lets
        # backward accumulate straight into the buckets (set to None, each step would
        # allocate fresh gradients and copy them in)
        self.optimizer.zero_grad(set_to_none=not self.grads_in_buckets)
        if self.pipeline is not None:
            value = self.pipeline.run(mine)
        else:
            # no name for the output: held here, it would outlive backward and add its
            # size (the logits, often the largest activation) to the optimizer step's peak
            loss = self.loss_fn(batches.forward(self.model, mine), mine)
            loss.backward()
            value = float(loss.detach().full_tensor() if hasattr(loss, "full_tensor") else loss.detach())
        if self.after_backward is not None:
            self.after_backward()
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        return value if self.coords["tp"] == 0 else None

    def _tracked(self, batch: Any) -> float | None:
        """The step with every tensor counted (parameters, gradients, optimizer state,
        activations, temporaries): the memory the strategy decides, without the
        allocator's and libraries' own."""
        from .memory import TensorMemory, training_tensors

        with TensorMemory(training_tensors(self.model, self.optimizer)) as tracker:
            value = self.step(batch)
        self.tensor_peak = max(getattr(self, "tensor_peak", 0), tracker.peak)
        return value

    @endpoint
    def stats(self) -> dict:
        """Peak memory of this process (bytes): its resident high-water mark, what it held
        before the model was built, and the peak of its tensors over the steps run with
        ``track_memory=True`` (None if none was)."""
        return {"rank": self.rank, "peak_rss": _peak_rss(), "base_rss": self.rss_base,
                "peak_tensor_bytes": getattr(self, "tensor_peak", None)}

    @endpoint
    def state_dict(self) -> dict | None:
        """This stage's full (unsharded) state, on the CPU, from the first process of each
        pipeline stage; None elsewhere. Every rank takes part: gathering is collective."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        from .gpt2_tp import hf_layout

        full = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True))
        first_of_stage = all(v == 0 for d, v in self.coords.items() if d != "pp")
        if not first_of_stage:
            return None
        return hf_layout({k: v.detach().cpu().clone() for k, v in full.items()})

    @endpoint
    def save(self, path: str) -> None:
        """Each rank writes its shards (torch.distributed.checkpoint): no gather, and a
        mesh of another shape can read them back."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optim_state = get_state_dict(self.model, self.optimizer, options=_flat_optimizer())
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=path)

    @endpoint
    def load(self, path: str) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model_state, optim_state = get_state_dict(self.model, self.optimizer, options=_flat_optimizer())
        state = {"model": model_state, "optim": optim_state}
        dcp.load(state, checkpoint_id=path)
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"], options=_flat_optimizer())


def _flat_optimizer():
    """The optimizer's state and hyperparameters keyed by parameter name: pipeline stages
    each have a param group 0 of their own, and under one key one stage's was lost (a
    resumed stage got the other's group, and failed in optimizer.step())."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=True)


def share_cpu_threads() -> None:
    """One compute thread per core this process may use: several processes on one host
    each running a thread per core oversubscribe it, and OpenMP's spinning threads then
    run many times slower. ``OMP_NUM_THREADS`` set by the user wins."""
    import torch

    if "OMP_NUM_THREADS" in os.environ:
        return
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    torch.set_num_threads(max(1, cores // max(local, 1)))


def _import_machinery() -> None:
    """Load the parallel libraries before the memory baseline is taken: their code is
    the same for every strategy, the model's memory is what stats() should show."""
    import torch.distributed.fsdp  # noqa: F401
    import torch.distributed.pipelining  # noqa: F401
    import torch.distributed.tensor.parallel  # noqa: F401
    import torch.nn.parallel  # noqa: F401


def _peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _chain(first, then):
    if then is None:
        return first

    def both() -> None:
        first()
        then()
    return both


def _local(p):
    return p.to_local() if hasattr(p, "to_local") else p

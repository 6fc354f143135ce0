"""Trainer: one model trained over a ProcMesh with a Plan (or a bare Strategy).

The constructor returns at once; bring-up (torch.distributed, the 4-D DeviceMesh,
model build and sharding in every process) runs on a thread of its own, and the
first ``step`` waits for it. Each step sends the batch once (the object store holds
it; every process takes its replica's share) and comes back as soon as every
process finished, or as soon as one failed: a process that dies in a collective
leaves the others blocked in it, so waiting for all would hang.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import os
from typing import Any

from .. import exceptions as exc
from .._private import state
from ..mesh.future import Future
from . import batch as batches
from . import lane
from .plan import Plan
from .strategy import Strategy
from .worker import ParallelWorker

_names = itertools.count()
_GRACE_S = 10.0  # after a first failure, how long to look for the process that died


class Trainer:
    """``Trainer(model_fn, mesh, plan, optimizer=, loss_fn=)``; then ``await trainer.step(batch)``.

    Every process builds ``model_fn()`` after ``torch.manual_seed(seed)``, so all start
    from the same weights (and a single process seeded the same way is the reference).
    """

    def __init__(self, model_fn, mesh, plan: Plan | Strategy, *, optimizer=None, loss_fn=None,
                 seed: int = 0, _resume_from: str | None = None) -> None:
        strategy = plan.strategy if isinstance(plan, Plan) else plan
        if not isinstance(strategy, Strategy):
            raise TypeError(f"Trainer(plan=...) takes a parallel.Plan or parallel.Strategy, "
                            f"got {type(plan).__name__}")
        if not callable(model_fn) or any(f is not None and not callable(f) for f in (optimizer, loss_fn)):
            raise TypeError("Trainer(model_fn, mesh, plan, optimizer=, loss_fn=): model_fn, "
                            "optimizer (params -> torch.optim.Optimizer) and loss_fn "
                            "((output, batch) -> loss tensor) must be callables; optimizer and "
                            "loss_fn may be left out (see parallel.defaults)")
        strategy.check_size(len(mesh), f"the mesh {mesh.extent}")
        self.plan = plan if isinstance(plan, Plan) else None
        self.strategy = strategy
        self._mesh = mesh
        if getattr(mesh, "_state", None) is not None:  # (it reports a rank that died, then stops the rest)
            mesh._state.callers_handle_deaths = True
        self._name = f"meshrt-parallel-{os.getpid()}-{next(_names)}"
        stage_layers = [st["layers"] for st in plan.stages] if isinstance(plan, Plan) and strategy.pp > 1 else None
        self._args = (model_fn, strategy.to_dict(), optimizer, loss_fn, seed, stage_layers)
        self._workers = None
        self._broken: BaseException | None = None
        # Calls go out one at a time, in the order they were made, from the call thread
        # of these processes (shared with any other trainer on them): see lane.py.
        self._lane = lane.key_of(mesh)
        self._submit(self._bring_up, _resume_from)

    def _submit(self, fn, *args) -> concurrent.futures.Future:
        def unless_broken(*a):
            if self._broken is not None:
                raise self._broken
            return fn(*a)
        return lane.submit(self._lane, unless_broken, *args)

    def _bring_up(self, resume_from: str | None) -> list:
        try:
            self._mesh.init_torch_distributed().get()
            self._workers = self._mesh.spawn(self._name, ParallelWorker, *self._args)
            info = self._collect(self._workers.setup, ())
            if resume_from is not None:
                self._collect(self._workers.load, (resume_from,))
            return info
        except BaseException as err:
            if self._broken is None:
                self._broken = err  # nothing can run on a trainer that did not come up
            raise

    # -- calls ------------------------------------------------------------------------------

    def step(self, batch: Any, *, track_memory: bool = False) -> Future:
        """One optimizer step over ``batch`` (split evenly over the dp x fsdp replicas);
        resolves to the loss averaged over the replicas. ``track_memory=True`` records
        each process's peak tensor memory during this step (slower; see ``stats()``)."""
        s = self.strategy
        if s.pp > 1:
            if isinstance(batch, dict):  # only language models' stages take dict batches
                from .decoder import check_batch

                check_batch(batch)
            batches.check_divisible(batch, s.replicas * s.microbatches,
                                    f"{s.replicas} data-parallel replicas x {s.microbatches} microbatches")
        else:
            batches.check_divisible(batch, s.replicas, f"{s.replicas} data-parallel replicas (dp x fsdp)")
        args = (batch, True) if track_memory else (batch,)
        return self._call("step", args, lambda losses: _mean([v for v in losses if v is not None]))

    def state_dict(self) -> Future:
        """One full state dict of the model, gathered from the shards, on the CPU."""
        return self._call("state_dict", (), _merge)

    def stats(self) -> Future:
        """Per process, in rank order: ``peak_rss`` (its memory high-water mark, bytes),
        ``base_rss`` (what it held before the model was built) and ``peak_tensor_bytes``
        (the tensors' peak over steps run with ``track_memory=True``, else None)."""
        return self._call("stats", (), list)

    def save(self, path: str) -> Future:
        """A sharded checkpoint (torch.distributed.checkpoint) plus the plan, in directory
        ``path``; ``Trainer.load(path, mesh, ...)`` resumes from it."""
        path = os.path.abspath(path)
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "meshrt_plan.json"), "w") as f:
            json.dump({"strategy": self.strategy.to_dict(),
                       "plan": self.plan.to_dict() if self.plan else None}, f)
        return self._call("save", (path,), lambda values: None)

    @classmethod
    def load(cls, path: str, mesh, model_fn, *, optimizer=None, loss_fn=None, plan=None,
             seed: int = 0) -> Trainer:
        """A Trainer on ``mesh`` resumed from ``save(path)`` (model and optimizer state):
        the saved plan unless ``plan`` is given (the checkpoint is resharded to fit)."""
        path = os.path.abspath(path)
        meta_file = os.path.join(path, "meshrt_plan.json")
        if not os.path.exists(meta_file):
            raise FileNotFoundError(f"{path} is not a meshrt.parallel checkpoint (no meshrt_plan.json); "
                                    "pass the directory given to trainer.save()")
        if plan is None:
            with open(meta_file) as f:
                meta = json.load(f)
            plan = Plan.from_dict(meta["plan"]) if meta["plan"] else Strategy.from_dict(meta["strategy"])
        return cls(model_fn, mesh, plan, optimizer=optimizer, loss_fn=loss_fn, seed=seed,
                   _resume_from=path)

    def ready(self) -> Future:
        """Resolves once every process has built its part of the model."""
        return _future(self._submit(lambda: None))

    def _call(self, endpoint: str, args: tuple, reduce) -> Future:
        def run():
            return reduce(self._collect(getattr(self._workers, endpoint), args))

        return _future(self._submit(run))

    def _collect(self, endpoint, args: tuple) -> list:
        """Every process's reply in rank order; the first failure ends the wait (preferring
        a process that died, named by rank and coordinates, over its peers' errors)."""
        core = state.core()
        refs = endpoint._send(endpoint._mesh._shape.ranks(), args, {})
        rank_of = {ref: i for i, ref in enumerate(refs)}
        pending = list(refs)
        first: BaseException | None = None
        first_rank = -1
        while pending:
            ready, pending = core.wait(pending, 1, None if first is None else _GRACE_S)
            if not ready:
                break
            for ref in ready:
                try:
                    core.get([ref], 0)
                except exc.RayActorError as err:
                    if not isinstance(err, exc.TaskError):
                        raise self._died(rank_of[ref], err) from None
                    first, first_rank = first or err, first_rank if first else rank_of[ref]
                except Exception as err:  # noqa: BLE001
                    first, first_rank = first or err, first_rank if first else rank_of[ref]
        if first is not None:
            if pending:  # its peers are stuck in a collective it never joined: nothing more can run
                self._broken_by(first_rank, first, len(pending))
            raise first
        return core.get(refs, 0)

    def _broken_by(self, rank: int, err: BaseException, stuck: int) -> None:
        coords = self.strategy.coords(rank)
        where = ", ".join(f"{d}={v}" for d, v in coords.items())
        cause = getattr(err, "cause", None) or err
        self._broken = exc.ActorDiedError(
            class_name="meshrt.parallel trainer",
            cause=f"a call failed on rank {rank} ({where}: {type(cause).__name__}: {cause}) while {stuck} of its "
                  f"peers were still in a collective after {_GRACE_S:g} s; they were stopped. Rebuild the trainer "
                  "on a new mesh, e.g. Trainer.load(checkpoint, new_mesh, ...)")
        self._stop_processes()

    def _died(self, rank: int, err: BaseException) -> BaseException:
        coords = self.strategy.coords(rank)
        where = ", ".join(f"{d}={v}" for d, v in coords.items())
        stage = coords["pp"]
        self._broken = exc.ActorDiedError(
            class_name=f"meshrt.parallel worker of stage {stage}, rank {rank} ({where})",
            cause=f"{getattr(err, 'cause', err)}; its peers were stopped too (they were blocked "
                  "in collectives with it). Rebuild the trainer on a new mesh, e.g. "
                  "Trainer.load(checkpoint, new_mesh, ...)",
            stderr_tail=getattr(err, "stderr_tail", ()))
        self._stop_processes()
        return self._broken

    def _stop_processes(self) -> None:
        from .._private.toplevel import kill

        mesh_state = getattr(self._mesh, "_state", None)
        if mesh_state is not None:
            # On purpose, after the caller heard of the failure: the deaths that follow
            # are not failures for the mesh's supervisor (which would end the driver).
            mesh_state.stopping = True
        for handle in self._mesh._procs:
            try:
                kill(handle)
            except Exception:  # noqa: BLE001 - already gone
                pass

    def __repr__(self) -> str:
        return f"<Trainer {self.strategy} on {self._mesh.extent}>"


def _future(cf: concurrent.futures.Future) -> Future:
    from ..mesh.future import from_concurrent

    return from_concurrent(cf)


def _merge(parts: list) -> dict:
    """One state dict from the pipeline stages' parts (each stage's first process sends one)."""
    merged: dict = {}
    for part in parts:
        if part:
            merged.update(part)
    return merged


def _mean(values: list) -> float:
    return sum(values) / len(values)

"""``parallel.plan(model_fn, mesh, sample_batch, strategy="auto")``: measure on the mesh,
then choose.

The layer profile runs in one of the mesh's own processes (the device training will
use); the links are measured with torch.distributed among all of them (an
all-reduce and a send/recv of 8 MiB), so the numbers include the collective
library's own overheads.
"""

from __future__ import annotations

import os
import time

from ..mesh import Actor, current_rank, endpoint
from . import batch as batches
from .auto import choose, plan_for_strategy
from .cost import Links
from .plan import Plan
from .strategy import Strategy

_LINK_BYTES = 8 << 20


class _Prober(Actor):
    @endpoint
    def profile(self, model_fn, sample_batch, optimizer_fn, loss_fn, seed, processes_on_host,
                tp_degrees) -> dict:
        import torch

        from .decoder import family_of
        from .layers import cut_groups, layer_units
        from .profile import memory_per_process, merge_layers, profile_model
        from .tensor_plan import TensorParallelError, plan_for
        from .worker import share_cpu_threads

        share_cpu_threads()  # measure with the threads training will have
        torch.manual_seed(seed)
        model = model_fn()
        names = [name for name, _ in layer_units(model)]
        groups = cut_groups(model)  # units a pipeline stage cannot separate are one layer here
        tp_split = {}
        for tp in tp_degrees:
            try:
                planned = plan_for(model, tp)
            except TensorParallelError:
                continue
            split = [any(p == n or p.startswith(n + ".") for p in planned) for n in names]
            tp_split[tp] = [any(split[k] for k in group) for group in groups]
        layers = merge_layers(profile_model(model_fn, sample_batch, optimizer_fn, loss_fn, seed), groups)
        # Timed alone, but trained beside the host's other processes: on a CPU host with
        # fewer cores than processes they share the cores (the cost model's cpu_share).
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        share = 1.0 if torch.cuda.is_available() else max(1.0, processes_on_host / cores)
        return {"layers": layers, "cap": memory_per_process(processes_on_host), "tp_split": tp_split,
                "cpu_share": share,
                "pipelinable": isinstance(model, torch.nn.Sequential) or family_of(model) is not None}

    @endpoint
    def links(self) -> dict:
        import torch
        import torch.distributed as dist

        rank, world = current_rank().rank, dist.get_world_size()
        buf = torch.ones(_LINK_BYTES // 4)
        out = {}
        dist.all_reduce(buf)  # warm-up: connections are made on first use
        t0 = time.perf_counter()
        for _ in range(3):
            dist.all_reduce(buf)
        # bus bandwidth: what each process moves in a ring all-reduce, per second
        out["allreduce"] = 3 * 2 * (world - 1) / world * _LINK_BYTES / (time.perf_counter() - t0)
        small = torch.ones(256)
        t0 = time.perf_counter()
        for _ in range(20):
            dist.all_reduce(small)
        out["latency"] = (time.perf_counter() - t0) / 20
        if world > 1:
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(3):
                if rank == 0:
                    dist.send(buf, 1)
                elif rank == 1:
                    dist.recv(buf, 0)
            dist.barrier()
            out["p2p"] = 3 * _LINK_BYTES / (time.perf_counter() - t0)
        else:
            out["p2p"] = float("inf")
        return out


def plan(model_fn, mesh, sample_batch, strategy="auto", *, optimizer=None, loss_fn=None,
         microbatches: int | None = None, schedule: str = "1f1b", memory_per_process: int | None = None,
         seed: int = 0) -> Plan:
    """Measure the model and the mesh, then lay the model out.

    ``sample_batch`` is one global batch, as ``trainer.step`` will get it.
    ``strategy="auto"`` picks the degrees; a ``Strategy`` is priced and checked instead.
    ``optimizer`` and ``loss_fn`` are the Trainer's (defaults: see ``defaults``);
    ``memory_per_process`` overrides the measured capacity.
    """
    from . import lane
    from .defaults import default_loss

    if not (strategy == "auto" or isinstance(strategy, Strategy)):
        raise TypeError(f"plan(strategy=...) takes 'auto' or a parallel.Strategy, got {strategy!r}")
    if isinstance(strategy, Strategy):
        strategy.check_size(len(mesh), f"the mesh {mesh.extent}")
    size = batches.batch_size(sample_batch)
    loss_fn = loss_fn or default_loss
    # Measured on the call thread of these processes (shared with any Trainer on them,
    # whose collectives must not interleave with ours), so plan() may be called from
    # async code too (it blocks its caller, like any measurement would).
    done = lane.submit(lane.key_of(mesh), _measure, model_fn, mesh, sample_batch, optimizer, loss_fn, seed)
    measured = done.result()
    n = len(mesh)
    cap = memory_per_process or measured["cap"]
    links = Links(**measured["links"], cpu_share=measured["cpu_share"])
    layers = measured["layers"]
    if isinstance(strategy, Strategy):
        return plan_for_strategy(strategy, layers, n, size, links, cap,
                                 measured["tp_split"].get(strategy.tp, [False] * len(layers)))
    return choose(layers, n, size, links, cap, measured["tp_split"], microbatches, schedule,
                  pipelinable=measured["pipelinable"])


def _measure(model_fn, mesh, sample_batch, optimizer, loss_fn, seed) -> dict:
    mesh.init_torch_distributed().get()
    n = len(mesh)
    hosts = len(set(mesh._hosts[r] for r in mesh._shape.ranks())) or 1
    probers = mesh.spawn(f"meshrt-plan-{id(sample_batch):x}", _Prober)
    try:
        first = probers.slice(**{d: 0 for d in mesh.extent.labels})
        links_future = probers.links.call()
        links = list(links_future.get().values())
        profile = first.profile.call_one(model_fn, sample_batch, optimizer, loss_fn, seed,
                                         max(n // hosts, 1), [d for d in range(2, n + 1) if n % d == 0]).get()
    finally:
        probers.stop().get()
    profile["links"] = {"allreduce": min(x["allreduce"] for x in links),
                        "p2p": min(x["p2p"] for x in links if "p2p" in x),
                        "latency": max(x["latency"] for x in links)}
    return profile

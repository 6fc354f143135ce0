"""Step time and memory of one Strategy, estimated from a layer profile and measured
links. Pure arithmetic, so the search can price every strategy in microseconds.

The model, per process and per optimizer step:
- compute: each layer's fitted time at the microbatch size, divided by tp for the
  layers tensor parallelism splits; a pipeline runs ``(microbatches + pp - 1)`` times
  its slowest stage (fill and drain), otherwise the microbatches run back to back;
- tensor parallelism: two all-reduces of the layer's output forward, two backward;
- DDP: one all-reduce of this process's gradients; FSDP: all-gather of parameters
  forward and backward, reduce-scatter of gradients (ring costs, at the measured
  collective bandwidth), not overlapped with compute: an upper bound;
- shared cores (a CPU host with more processes than cores): the step takes at least
  the host's total work divided by its cores, and a pipeline's idle slots cost nothing
  (the other stages use the cores meanwhile);
- each collective also pays the measured small-message latency (tensor parallelism
  and FSDP issue several per layer);
- memory: parameters, gradients and optimizer state (divided by tp for split
  layers, by fsdp for all), plus activations of the microbatches a stage keeps in
  flight (1F1B: pp - stage, GPipe: all), plus one unsharded layer under FSDP.
"""

from __future__ import annotations

import dataclasses

from .strategy import Strategy


@dataclasses.dataclass(frozen=True)
class Links:
    """Measured bandwidths, bytes per second."""

    allreduce: float  # a collective over all processes (bus bandwidth)
    p2p: float  # one process to another (pipeline activations)
    latency: float = 0.0  # seconds per small collective: what many small messages cost
    cpu_share: float = 1.0  # processes per core on a CPU host (> 1: they share cores)


@dataclasses.dataclass
class Estimate:
    strategy: Strategy
    step_s: float
    compute_s: float
    comm_s: float
    memory: list[float]  # peak bytes per process of each stage
    stages: list[tuple[int, int]]  # (first, last + 1) layer of each stage
    stage_s: list[float]
    fits: bool
    why_not: str = ""


def estimate(strategy: Strategy, layers, batch_size: int, links: Links, cap: float,
             tp_split: list[bool]) -> Estimate:
    s = strategy
    n = len(layers)
    m = s.microbatches if s.pp > 1 else 1
    per_replica = batch_size / s.replicas
    mb = per_replica / m
    tp_div = [s.tp if split else 1 for split in tp_split]
    times = [layer.time(mb) / d for layer, d in zip(layers, tp_div, strict=True)]
    tp_comm = [0.0] * n
    if s.tp > 1:
        ring = 2 * (s.tp - 1) / s.tp
        tp_comm = [4 * (ring * layer.out_bytes_per_sample * mb / links.allreduce + links.latency)
                   if split else 0.0 for layer, split in zip(layers, tp_split, strict=True)]
    times = [t + c for t, c in zip(times, tp_comm, strict=True)]
    static = [layer.static_bytes / d / s.fsdp for layer, d in zip(layers, tp_div, strict=True)]
    act = [layer.act_bytes_per_sample * mb / d for layer, d in zip(layers, tp_div, strict=True)]
    gathered = max((layer.param_bytes / d for layer, d in zip(layers, tp_div, strict=True)),
                   default=0) if s.fsdp > 1 else 0.0

    if s.pp > 1:
        # numba loads only when a pipeline is priced
        from .partition import PartitionError, partition

        if n < s.pp:
            return _no(s, f"{n} layers cannot fill {s.pp} pipeline stages")
        inflight = [m if s.schedule == "gpipe" else min(m, s.pp - k) for k in range(s.pp)]
        boundary = [2 * (layer.out_bytes_per_sample * mb / links.p2p + links.latency) for layer in layers]
        try:
            part = partition(times, static, act, s.pp, cap - gathered, inflight=inflight,
                             boundary_cost=boundary, names=[layer.name for layer in layers])
        except PartitionError as err:
            return _no(s, str(err))
        starts = list(part.starts) + [n]
        stages = [(starts[k], starts[k + 1]) for k in range(s.pp)]
        stage_s = list(part.stage_time)
        compute = (m + s.pp - 1) * part.bottleneck
        busy = m * sum(stage_s) / s.pp  # mean work of a process
        memory = [x + gathered for x in part.stage_memory]
    else:
        stages = [(0, n)]
        compute = m * sum(times)
        busy = compute
        stage_s = [compute]
        memory = [sum(static) + sum(act) + gathered]
    compute = max(compute, busy * links.cpu_share)

    comm = 0.0
    grad_bytes = max(sum(layer.grad_bytes / d for layer, d in
                         zip(layers[a:b], tp_div[a:b], strict=True)) for a, b in stages)
    param_bytes = max(sum(layer.param_bytes / d for layer, d in
                          zip(layers[a:b], tp_div[a:b], strict=True)) for a, b in stages)
    if s.fsdp > 1:
        ring = (s.fsdp - 1) / s.fsdp
        units = max(b - a for a, b in stages)
        comm += (2 * param_bytes + grad_bytes) * ring / links.allreduce + 3 * units * links.latency
    if s.dp > 1:
        comm += 2 * (s.dp - 1) / s.dp * (grad_bytes / s.fsdp) / links.allreduce + links.latency
    fits = max(memory) <= cap
    why = "" if fits else f"needs {_gib(max(memory))} per process, {_gib(cap)} available"
    return Estimate(s, compute + comm, compute, comm, memory, stages, stage_s, fits, why)


def _no(s: Strategy, why: str) -> Estimate:
    return Estimate(s, float("inf"), float("inf"), 0.0, [], [], [], False, why)


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"

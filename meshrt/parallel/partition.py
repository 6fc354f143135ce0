"""Where to cut a model into pipeline stages: a dynamic program compiled with numba.

Stages are contiguous runs of layers. A stage's time is its layers' compute plus
sending its output on; its memory is their parameters, gradients and optimizer
state plus the activations of the microbatches it keeps in flight. The search
minimises the slowest stage (a pipeline runs at its pace) under each stage's memory
cap. ``best[s][j]``, the best bottleneck for layers ``[0, j)`` on stages ``0..s``, is
``min over i of max(best[s-1][i], cost(s, i, j))``. The inner loop runs ``i``
downward and stops once the stage no longer fits or already costs more than the
best found (both only grow as the stage gains layers), so most of the n^2 pairs
are never visited. Compiled (numba), not NumPy: the loop is sequential with early
exits, which vectorises badly; compilation takes about a second, once per process.
"""

from __future__ import annotations

import dataclasses
import math
import operator

import numpy as np
from numba import njit


class PartitionError(ValueError):
    """A model that fits nowhere: names the layer and the shortfall in bytes."""


@dataclasses.dataclass(frozen=True)
class Partition:
    starts: tuple[int, ...]  # first layer of each stage
    stage_time: tuple[float, ...]  # compute + outgoing boundary cost, seconds
    stage_memory: tuple[float, ...]  # static bytes + activation bytes x inflight
    bottleneck: float


def pipeline_step_time(p: Partition, microbatches: int) -> float:
    """GPipe and 1F1B both take ``microbatches + stages - 1`` slots of the slowest stage
    (filling and draining the pipeline); they differ in memory, not in time."""
    return (microbatches + len(p.starts) - 1) * p.bottleneck


def partition(time, static_mem, act_mem, stages: int, cap, inflight=None, boundary_cost=None,
              names=None) -> Partition:
    t = _vector("time", time)
    n = len(t)
    static = _vector("static_mem", static_mem, n)
    act = _vector("act_mem", act_mem, n)
    try:
        stages = operator.index(stages) if not isinstance(stages, bool) else None
    except TypeError:
        stages = None
    if stages is None or not 1 <= stages <= n:
        raise ValueError(f"partition(stages=...): need an int between 1 and the number of layers ({n})")
    caps = _per_stage("cap", cap, stages)
    flight = _per_stage("inflight", 1.0 if inflight is None else inflight, stages)
    boundary = np.zeros(n) if boundary_cost is None else _vector("boundary_cost", boundary_cost, n)
    names = [str(i) for i in range(n)] if names is None else [repr(str(x)) for x in names]
    if len(names) != n:
        raise ValueError(f"partition(names=...): {len(names)} names for {n} layers")

    best, choice = _search(t, static, act, caps, flight, boundary, stages)
    if not math.isfinite(best[stages - 1, n]):
        raise PartitionError(_shortfall(static, act, caps, flight, names))
    starts = [0] * stages
    j = n
    for s in range(stages - 1, 0, -1):
        j = int(choice[s, j])
        starts[s] = j
    ends = starts[1:] + [n]
    times, mems = [], []
    for s, (i, j) in enumerate(zip(starts, ends, strict=True)):
        times.append(float(t[i:j].sum() + (boundary[j - 1] if s < stages - 1 else 0.0)))
        mems.append(float(static[i:j].sum() + flight[s] * act[i:j].sum()))
    return Partition(tuple(starts), tuple(times), tuple(mems), max(times))


@njit(cache=False, nogil=True)
def _search(t, static, act, caps, flight, boundary, stages):  # pragma: no cover - compiled
    n = t.shape[0]
    pt = np.zeros(n + 1)
    ps = np.zeros(n + 1)
    pa = np.zeros(n + 1)
    for i in range(n):
        pt[i + 1] = pt[i] + t[i]
        ps[i + 1] = ps[i] + static[i]
        pa[i + 1] = pa[i] + act[i]
    best = np.full((stages, n + 1), np.inf)
    choice = np.zeros((stages, n + 1), dtype=np.int64)
    for j in range(1, n + 1):
        send = boundary[j - 1] if stages > 1 else 0.0
        if ps[j] + flight[0] * pa[j] <= caps[0]:
            best[0, j] = pt[j] + send
    for s in range(1, stages):
        last = s == stages - 1
        for j in range(s + 1, n + 1):
            if last and j != n:
                continue
            send = 0.0 if last else boundary[j - 1]
            top = np.inf
            arg = -1
            for i in range(j - 1, s - 1, -1):  # stage s holds layers [i, j)
                if ps[j] - ps[i] + flight[s] * (pa[j] - pa[i]) > caps[s]:
                    break
                cost = pt[j] - pt[i] + send
                if cost >= top:
                    break
                prev = best[s - 1, i]
                value = prev if prev > cost else cost
                if value < top:
                    top = value
                    arg = i
            best[s, j] = top
            choice[s, j] = arg
    return best, choice


def _shortfall(static, act, caps, flight, names) -> str:
    # per layer and stage: how much more than the stage holds the layer alone needs
    over = static[:, None] + act[:, None] * flight[None, :] - caps[None, :]
    stage_of = np.argmin(over, axis=1)  # the stage each layer fits best
    short = over[np.arange(len(static)), stage_of]
    worst = int(np.argmax(short))
    hint = "use more pipeline stages (pp), shard it (fsdp/tp) or give each process more memory"
    if short[worst] > 0:
        s = int(stage_of[worst])
        need = static[worst] + act[worst] * flight[s]
        return (f"layer {names[worst]} alone needs {_fmt(need)} (parameters, gradients, optimizer "
                f"state and activations of {flight[s]:g} microbatches) but a stage holds at most "
                f"{_fmt(caps[s])}: short by {_fmt(short[worst])}; {hint}")
    # Pack the stages in order, each as full as it goes; the first layer left over is
    # where the model stops fitting.
    i, n = 0, len(static)
    for s in range(len(caps)):
        used = 0.0
        while i < n and used + static[i] + act[i] * flight[s] <= caps[s]:
            used += static[i] + act[i] * flight[s]
            i += 1
        if used == 0.0 and i < n:  # this stage cannot hold even the next layer alone
            need = static[i] + act[i] * flight[s]
            return (f"stage {s} cannot hold layer {names[i]}, the first layer it could take: it "
                    f"needs {_fmt(need)} there ({flight[s]:g} microbatches in flight) but the stage "
                    f"holds {_fmt(caps[s])}; {hint}")
    if i == n:  # everything fits somewhere, but not with every stage holding a layer
        return (f"no split into {len(caps)} non-empty stages fits: the stages' memory caps "
                f"({', '.join(_fmt(c) for c in caps)}) are too uneven for the layers' sizes; "
                "use fewer stages (pp) or give the small stages more memory")
    left = float((static[i:] + act[i:] * flight[-1]).sum())
    return (f"the layers from {names[i]} on do not fit: packing the {len(caps)} stages in order "
            f"leaves {_fmt(left)} unplaced (the whole model needs {_fmt(float((static + act * flight.min()).sum()))} or more, the "
            f"stages hold {_fmt(float(caps.sum()))}); {hint}")


def _vector(name: str, values, n: int | None = None) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"partition({name}=...): expected numbers, one per layer") from None
    if arr.ndim != 1 or (n is not None and arr.shape[0] != n):
        want = "a 1-D sequence" if n is None else f"{n} values (one per layer)"
        raise ValueError(f"partition({name}=...): expected {want}, got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"partition({name}=...): no layers")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"partition({name}=...): every value must be finite and >= 0")
    return np.ascontiguousarray(arr)


def _per_stage(name: str, value, stages: int) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"partition({name}=...): expected one number or one per stage") from None
    if arr.ndim == 0:
        arr = np.full(stages, float(arr))
    if arr.shape != (stages,):
        raise ValueError(f"partition({name}=...): one number or one per stage ({stages}), got shape {arr.shape}")
    if np.any(np.isnan(arr)) or np.any(arr < 0):
        raise ValueError(f"partition({name}=...): values must be >= 0")
    return np.ascontiguousarray(arr)


def _fmt(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"

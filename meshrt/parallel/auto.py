"""Choose a Strategy: price every way of factoring the mesh into (pp, dp, fsdp, tp) with
the cost model, keep those that fit in memory, take the fastest.

Ties go to the simpler strategy (fewer kinds of parallelism, then plain DDP before
sharding): its estimate is as good and its behaviour better known.
"""

from __future__ import annotations

from .cost import Estimate, Links, estimate
from .plan import Plan, _bytes
from .strategy import Strategy


class NoPlanError(ValueError):
    """No strategy fits the model on this mesh: names the layer and the shortfall."""


def factorizations(n: int) -> list[tuple[int, int, int, int]]:
    """Every (pp, dp, fsdp, tp) with product n."""
    out = []
    for pp in _divisors(n):
        for tp in _divisors(n // pp):
            rest = n // pp // tp
            for fsdp in _divisors(rest):
                out.append((pp, rest // fsdp, fsdp, tp))
    return out


def candidates(n: int, batch_size: int, tp_ok: set[int], layers: int,
               microbatches: int | None, schedule: str) -> tuple[list[Strategy], list[dict]]:
    """Strategies worth pricing, and the ones ruled out before pricing (with why)."""
    keep, ruled_out = [], []
    for pp, dp, fsdp, tp in factorizations(n):
        label = f"pp={pp} dp={dp} fsdp={fsdp} tp={tp}"
        m = (microbatches or pp) if pp > 1 else 1
        why = ""
        if tp > 1 and tp not in tp_ok:
            why = f"tp={tp}: the model has no Linear pairs that {tp} divides"
        elif batch_size % (dp * fsdp * m):
            why = f"a batch of {batch_size} does not split into {dp * fsdp} replicas x {m} microbatches"
        elif pp > layers:
            why = f"{layers} layers cannot fill {pp} stages"
        if why:
            ruled_out.append({"strategy": label, "step_s": None, "memory": None, "verdict": why})
            continue
        keep.append(Strategy(dp=dp, fsdp=fsdp, tp=tp, pp=pp, microbatches=m if pp > 1 else None,
                             schedule=schedule))
    return keep, ruled_out


def choose(layers, n: int, batch_size: int, links: Links, cap: float, tp_split: dict[int, list[bool]],
           microbatches: int | None = None, schedule: str = "1f1b", pipelinable: bool = True) -> Plan:
    """The fastest strategy that fits and that Trainer can run: pipelines need an
    ``nn.Sequential`` model or a GPT-2/Llama-style language model (``pipelinable``)."""
    tp_ok = {t for t, split in tp_split.items() if any(split)} | {1}
    strategies, table = candidates(n, batch_size, tp_ok, len(layers), microbatches, schedule)
    priced: list[Estimate] = []
    for s in strategies:
        e = estimate(s, layers, batch_size, links, cap, tp_split.get(s.tp, [False] * len(layers)))
        priced.append(e)
    def trainable(s: Strategy) -> str:
        if s.pp > 1 and not pipelinable:
            return "pipelines need an nn.Sequential model or a GPT-2/Llama-style language model"
        return ""

    runnable = [e for e in priced if e.fits and not trainable(e.strategy)]
    if not runnable:
        raise NoPlanError(_no_plan_message(priced, cap))
    best = min(runnable, key=lambda e: (round(e.step_s, 6), _complexity(e.strategy)))
    for e in sorted(priced, key=lambda e: e.step_s):
        if e is best:
            verdict = "chosen"
        elif not e.fits:
            verdict = f"does not fit: {e.why_not}"
        elif trainable(e.strategy):
            verdict = f"{e.step_s / best.step_s:.2f}x the chosen time; {trainable(e.strategy)}"
        else:
            verdict = f"{e.step_s / best.step_s:.2f}x the chosen time"
        table.insert(len([c for c in table if c["step_s"] is not None]),
                     {"strategy": str(e.strategy), "step_s": e.step_s if e.fits else None,
                      "memory": max(e.memory) if e.memory else None, "verdict": verdict})
    return _plan(best, layers, n, cap, links, batch_size, table, priced)


def plan_for_strategy(s: Strategy, layers, n: int, batch_size: int, links: Links, cap: float,
                      tp_split: list[bool]) -> Plan:
    """A user-picked strategy, priced and laid out the same way (and checked to fit)."""
    e = estimate(s, layers, batch_size, links, cap, tp_split)
    if not e.fits:
        raise NoPlanError(f"{s} does not fit: {e.why_not}")
    return _plan(e, layers, n, cap, links, batch_size, [], [e], chosen_by="you")


def _plan(e: Estimate, layers, n: int, cap: float, links: Links, batch_size: int, table, priced,
          chosen_by: str = "auto") -> Plan:
    s = e.strategy
    per_stage = n // s.pp
    stages = [{"layers": [layer.name for layer in layers[a:b]],
               "ranks": list(range(k * per_stage, (k + 1) * per_stage)),
               "memory": e.memory[k], "time_s": e.stage_s[k] / max(s.microbatches if s.pp > 1 else 1, 1)}
              for k, (a, b) in enumerate(e.stages)]
    reasons = _reasons(e, priced, cap, chosen_by)
    return Plan(s, [layer.name for layer in layers], stages, e.step_s, cap, reasons, table,
                {"links": {"allreduce": links.allreduce, "p2p": links.p2p, "latency": links.latency,
                           "cpu_share": links.cpu_share}, "batch_size": batch_size,
                 "params": sum(layer.params for layer in layers)})


def _reasons(e: Estimate, priced: list[Estimate], cap: float, chosen_by: str) -> list[str]:
    s = e.strategy
    out = []
    if chosen_by == "you":
        out.append(f"{s} was given; estimated {e.step_s * 1e3:.1f} ms per step "
                   f"({e.compute_s * 1e3:.1f} compute, {e.comm_s * 1e3:.1f} communication)")
        return out
    fitting = [p for p in priced if p.fits]
    out.append(f"fastest estimated step among {len(fitting)} strategies that fit "
               f"({e.step_s * 1e3:.1f} ms: {e.compute_s * 1e3:.1f} compute, {e.comm_s * 1e3:.1f} communication)")
    plain = next((p for p in priced if p.strategy.dp == p.strategy.size), None)
    if plain is not None and plain is not e:
        if not plain.fits:
            out.append(f"plain data parallelism does not fit: {plain.why_not}")
        else:
            out.append(f"plain data parallelism would take {plain.step_s / e.step_s:.2f}x as long")
    if s.fsdp > 1:
        out.append(f"fsdp={s.fsdp} shards parameters, gradients and optimizer state {s.fsdp} ways")
    if s.tp > 1:
        out.append(f"tp={s.tp} splits the Linear pairs' compute and weights {s.tp} ways")
    if s.pp > 1:
        out.append(f"pp={s.pp} stages balanced by the partitioner (slowest stage "
                   f"{max(e.stage_s) * 1e3:.2f} ms per microbatch)")
    out.append(f"peak memory {_bytes(max(e.memory))} per process of {_bytes(cap)}")
    return out


def _complexity(s: Strategy) -> tuple:
    kinds = sum(1 for d in (s.pp, s.fsdp, s.tp) if d > 1)
    return (kinds, s.pp, s.tp, s.fsdp)


def _no_plan_message(priced: list[Estimate], cap: float) -> str:
    fitting = [e for e in priced if e.fits]
    if fitting:
        best = min(fitting, key=lambda e: e.step_s)
        return (f"the model fits this mesh only as {best.strategy}, which this version of "
                "meshrt.parallel cannot train (pipelines need an nn.Sequential model or a "
                "GPT-2/Llama-style language model); use more processes or more memory per process")
    reasons = [e.why_not for e in priced if e.why_not]
    # The pipeline partitioner's message names the layer; prefer it.
    named = [r for r in reasons if "layer" in r]
    detail = named[0] if named else (reasons[0] if reasons else "no strategy could be priced")
    return f"the model fits no strategy on this mesh with {_bytes(cap)} per process: {detail}"


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]

#!/usr/bin/env python
"""meshrt.parallel strategies side by side with plain DDP and FSDP2 on the same processes.

    python benchmarks/parallel.py                       # 4 processes, every strategy
    python benchmarks/parallel.py --procs 4 --steps 6 --markdown benchmarks/results/parallel.md

The model is a small transformer built as an ``nn.Sequential`` (token embedding,
``nn.TransformerEncoderLayer`` blocks, output head) so that every strategy, the
pipeline ones included, can run it. Each configuration gets a fresh mesh of
``--procs`` processes (peak memory is a per-process high-water mark).

Measured per configuration:
  * tokens/s: tokens per global batch / median step time (driver wall clock), after
    two untimed warm-up steps;
  * peak memory per process: the largest peak of tensor memory in any process over
    one steady-state step (the second), every tensor counted by
    ``meshrt.parallel.memory.TensorMemory`` (parameters, gradients, optimizer state,
    activations, temporaries); the growth of
    the resident high-water mark (``ru_maxrss``, which adds communication buffers and
    the allocator's slack) is in the JSON;
  * bytes communicated per step: bytes sent over the loopback interface during the
    timed steps (``/proc/net/dev``; gloo runs over TCP, the runtime's own messages
    over Unix sockets, so this is the collectives' traffic), per step and process.
The "plain" rows run a hand-written torchrun-style loop (``DistributedDataParallel``
or ``fully_shard`` on every block, then the root) inside the same kind of mesh
processes, started the same way. "single process" trains the whole batch in one
process: the reference for memory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402

import meshrt  # noqa: E402
from meshrt import Actor, current_rank, endpoint, parallel, this_host  # noqa: E402
from meshrt.parallel import Strategy  # noqa: E402

VOCAB, EMBED, HEADS, LAYERS, SEQ = 2048, 256, 4, 8, 64


def model_fn():
    blocks = [torch.nn.TransformerEncoderLayer(EMBED, HEADS, 4 * EMBED, dropout=0.0, batch_first=True)
              for _ in range(LAYERS)]
    return torch.nn.Sequential(torch.nn.Embedding(VOCAB, EMBED), *blocks, torch.nn.Linear(EMBED, VOCAB))


def optimizer(params):
    return torch.optim.AdamW(params, lr=1e-3)


def loss_fn(out, batch):
    return torch.nn.functional.cross_entropy(out.reshape(-1, VOCAB), batch[1].reshape(-1))


def make_batch(gen, size):
    ids = torch.randint(0, VOCAB, (size, SEQ), generator=gen)
    return ids, torch.roll(ids, -1, dims=1)


class Plain(Actor):
    """What a torchrun script would do in each process, without meshrt.parallel."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    @endpoint
    def setup(self) -> None:
        import resource

        import torch.distributed as dist

        from meshrt.parallel.worker import _import_machinery, share_cpu_threads

        _import_machinery()  # as meshrt's workers do before their baseline
        self.base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        share_cpu_threads()
        torch.manual_seed(0)
        model = model_fn()
        if self.kind == "ddp":
            model = torch.nn.parallel.DistributedDataParallel(model)
        elif self.kind == "fsdp":
            from torch.distributed.fsdp import fully_shard

            for block in list(model)[1:-1]:
                fully_shard(block)
            fully_shard(model)
        self.model = model
        self.opt = optimizer(model.parameters())
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        self.rank = current_rank().rank

    @endpoint
    def step(self, batch, track_memory: bool = False) -> float:
        if track_memory:  # counted the same way as meshrt's workers count theirs
            from meshrt.parallel.memory import TensorMemory, training_tensors

            with TensorMemory(training_tensors(self.model, self.opt)) as tracker:
                value = self.step(batch)
            self.tensor_peak = tracker.peak
            return value
        x, y = batch
        n = x.shape[0] // self.world
        mine = (x[self.rank * n:(self.rank + 1) * n], y[self.rank * n:(self.rank + 1) * n])
        self.opt.zero_grad(set_to_none=True)
        loss = loss_fn(self.model(mine[0]), mine)
        loss.backward()
        self.opt.step()
        return float(loss.detach())

    @endpoint
    def stats(self) -> dict:
        import resource

        return {"peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "base_rss": self.base,
                "peak_tensor_bytes": getattr(self, "tensor_peak", None)}


def loopback_tx() -> int:
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                return int(rest.split()[8])
    return 0


def run_steps(step, batches):
    step(batches[0], False)
    step(batches[1], True)  # optimizer state exists from here on: the steady-state peak
    times = []
    tx0 = loopback_tx()
    for b in batches[2:]:
        t0 = time.perf_counter()
        step(b, False)
        times.append(time.perf_counter() - t0)
    return times, loopback_tx() - tx0


def measure(label, procs_n, batches, make, stats, extra=None):
    procs = this_host().spawn_procs(per_host={"gpus": procs_n})
    try:
        step = make(procs)
        times, sent = run_steps(step, batches)
        mem = stats()
    finally:
        procs.stop().get(timeout=60)
    tokens = batches[0][0].numel()
    timed = len(batches) - 2
    row = {"config": label, "tokens_per_s": tokens / statistics.median(times),
           "peak_mem": max(m["peak_tensor_bytes"] for m in mem),
           "peak_rss_growth": max(m["peak_rss"] - m["base_rss"] for m in mem),
           "bytes_per_step": sent / timed / procs_n, "step_s": statistics.median(times), "times": times}
    row.update(extra or {})
    print(f"  {label:38s} {row['tokens_per_s']:9,.0f} tokens/s  tensors peak {row['peak_mem'] / 2**20:7.1f} MiB"
          f"  {row['bytes_per_step'] / 2**20:7.1f} MiB sent/step/process", flush=True)
    return row


def meshrt_config(strategy_or_auto, n, batches, sample):
    holder = {}

    def make(procs):
        if strategy_or_auto == "auto":
            plan = parallel.plan(model_fn, procs, sample, "auto", optimizer=optimizer, loss_fn=loss_fn)
            holder["plan"] = plan
        else:
            plan = strategy_or_auto
        trainer = holder["trainer"] = parallel.Trainer(model_fn, procs, plan, optimizer=optimizer,
                                                       loss_fn=loss_fn)
        return lambda b, track: trainer.step(b, track_memory=track).get(timeout=600)

    def stats():
        return holder["trainer"].stats().get(timeout=60)

    label = "meshrt auto" if strategy_or_auto == "auto" else f"meshrt {strategy_or_auto}"
    row = measure(label, n, batches, make, stats)
    if "plan" in holder:
        row["chosen"] = str(holder["plan"].strategy)
        row["config"] = f"meshrt auto -> {holder['plan'].strategy}"
    return row


def plain_config(kind, n, batches):
    holder = {}

    def make(procs):
        if n > 1:
            procs.init_torch_distributed().get(timeout=120)
        actors = holder["actors"] = procs.spawn(f"plain-{kind}", Plain, kind)
        actors.setup.call().get(timeout=300)
        return lambda b, track: actors.step.call(b, track).get(timeout=600)

    def stats():
        return list(holder["actors"].stats.call().get(timeout=60).values())

    label = {"ddp": "plain DDP (torchrun-style)", "fsdp": "plain FSDP2 (torchrun-style)",
             "single": "single process"}[kind]
    return measure(label, n, batches, make, stats)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6, help="timed steps per configuration")
    ap.add_argument("--batch", type=int, default=16, help="sequences per global batch")
    ap.add_argument("--rounds", type=int, default=2,
                    help="run every configuration this many times, interleaved (a noisy machine's "
                         "slow spell then hits all of them); medians over all rounds' steps")
    ap.add_argument("--markdown", help="write the table here")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    n = args.procs
    gen = torch.Generator().manual_seed(0)
    batches = [make_batch(gen, args.batch) for _ in range(args.steps + 2)]
    meshrt.init()
    params = sum(p.numel() for p in model_fn().parameters())
    print(f"model: {LAYERS} transformer blocks, {params / 1e6:.1f} M parameters; batch {args.batch} x {SEQ} "
          f"tokens; {n} processes", flush=True)
    strategies = [Strategy(dp=n), Strategy(fsdp=n), Strategy(dp=n // 2, tp=2), Strategy(pp=2, dp=n // 2),
                  Strategy(pp=n, microbatches=n, schedule="1f1b")]
    configs = [lambda: plain_config("single", 1, batches), lambda: plain_config("ddp", n, batches),
               lambda: plain_config("fsdp", n, batches)]
    configs += [lambda s=s: meshrt_config(s, n, batches, batches[0]) for s in strategies]
    configs.append(lambda: meshrt_config("auto", n, batches, batches[0]))
    runs: list[list[dict]] = [[] for _ in configs]
    for r in range(args.rounds):
        print(f"round {r + 1} of {args.rounds}", flush=True)
        for k, run in enumerate(configs):
            runs[k].append(run())
    meshrt.shutdown()
    tokens = batches[0][0].numel()
    rows = [_merge(rs, tokens) for rs in runs]
    report = _report(rows, args, params)
    print("\n" + report)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(report + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


def _merge(rows: list[dict], tokens: int) -> dict:
    """One row from a configuration's rounds: median step over all of them, peaks as maxima."""
    times = [t for r in rows for t in r["times"]]
    out = dict(rows[0])
    out.update(times=times, round_s=[r["step_s"] for r in rows], step_s=statistics.median(times), tokens_per_s=tokens / statistics.median(times),
               peak_mem=max(r["peak_mem"] for r in rows), peak_rss_growth=max(r["peak_rss_growth"] for r in rows),
               bytes_per_step=statistics.median(r["bytes_per_step"] for r in rows))
    chosen = sorted({r["chosen"] for r in rows if "chosen" in r})
    if chosen:
        out["chosen"] = " / ".join(chosen)
        out["config"] = f"meshrt auto -> {out['chosen']}"
    return out


def _report(rows, args, params) -> str:
    by = {r["config"]: r for r in rows}
    single = by["single process"]
    ddp, fsdp = by["plain DDP (torchrun-style)"], by["plain FSDP2 (torchrun-style)"]
    n = args.procs
    lines = [f"Command: `python benchmarks/parallel.py --procs {n} --steps {args.steps} --batch {args.batch} "
             f"--rounds {args.rounds}`",
             "", f"- Date: {time.strftime('%Y-%m-%dT%H:%M:%S%z')}; {os.cpu_count()} cores; torch {torch.__version__}",
             f"- Model: {LAYERS} x nn.TransformerEncoderLayer({EMBED}, {HEADS} heads) as nn.Sequential, "
             f"{params / 1e6:.1f} M parameters; global batch {args.batch} x {SEQ} tokens; AdamW",
             f"- Median over the timed steps of {args.rounds} interleaved rounds; memory and bytes as in the "
             "docstring of benchmarks/parallel.py", "",
             "| configuration | tokens/s | peak tensor memory / process (MiB) | resident growth (MiB) | sent / step / process (MiB) |",
             "|---|--:|--:|--:|--:|"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['tokens_per_s']:,.0f} | {r['peak_mem'] / 2**20:.1f} | "
                     f"{r['peak_rss_growth'] / 2**20:.1f} | {r['bytes_per_step'] / 2**20:.1f} |")
    meshrt_rows = [r for r in rows if r["config"].startswith("meshrt Strategy")]
    best = max(meshrt_rows, key=lambda r: r["tokens_per_s"])
    auto = next(r for r in rows if r["config"].startswith("meshrt auto"))
    dp = by[f"meshrt {Strategy(dp=n)}"]
    fs = by[f"meshrt {Strategy(fsdp=n)}"]
    pp = by[f"meshrt {Strategy(pp=n, microbatches=n, schedule='1f1b')}"]

    def mark(ok):
        return "✅" if ok else "❌"

    checks = [
        ("auto tokens/s vs best hand-picked", auto["tokens_per_s"] / best["tokens_per_s"], ">= 0.9x", 0.9, True),
        ("DP via meshrt vs plain DDP, tokens/s", dp["tokens_per_s"] / ddp["tokens_per_s"], ">= 1.0x", 1.0, True),
        ("DP via meshrt vs plain DDP, peak memory", dp["peak_mem"] / ddp["peak_mem"], "same (<= 1.1x)", 1.1, False),
        ("FSDP via meshrt vs plain FSDP2, tokens/s", fs["tokens_per_s"] / fsdp["tokens_per_s"], ">= 1.0x", 1.0, True),
        ("FSDP via meshrt vs plain FSDP2, peak memory", fs["peak_mem"] / fsdp["peak_mem"], "<= 1.0x", 1.0, False),
        (f"pp={n} peak memory vs single process", pp["peak_mem"] / single["peak_mem"], "<= 0.35x", 0.35, False),
        ("DP via meshrt vs plain DDP, bytes sent", dp["bytes_per_step"] / max(ddp["bytes_per_step"], 1), "info", None, False),
        ("FSDP via meshrt vs plain FSDP2, bytes sent", fs["bytes_per_step"] / max(fsdp["bytes_per_step"], 1), "info", None, False),
    ]
    def per_round(a, b):  # tokens/s ratio a/b in each round: how much of a gap is the machine's noise
        return ", ".join(f"{y / x:.2f}" for x, y in zip(a["round_s"], b["round_s"], strict=True))

    lines += ["", f"best hand-picked: {best['config']}; auto chose {auto.get('chosen', '?')}",
              f"per round, DP vs plain DDP: {per_round(dp, ddp)}; FSDP vs plain FSDP2: {per_round(fs, fsdp)}", "",
              "| target | measured | target |", "|---|--:|---|"]
    for name, value, text, bound, higher in checks:
        ok = "" if bound is None else " " + mark(value >= bound if higher else value <= bound)
        lines.append(f"| {name} | {value:.2f}x | {text}{ok} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

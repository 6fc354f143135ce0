#!/usr/bin/env python
"""Train a small GPT-2 over a mesh with an automatic parallel plan.

    pip install -e ".[examples]"
    python examples/train_gpt2.py                    # 4 processes, 200 steps on CPU
    python examples/train_gpt2.py --procs 2 --steps 50 --plot loss.png

The planner profiles the model on one of the mesh's processes, measures the links
between them, prints the plan it chose and why; the trainer then runs it. The data
are synthetic token sequences with a rule to learn (each sequence counts up from a
random start by a random stride, modulo the vocabulary), so the loss visibly falls.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import torch

import meshrt
from meshrt import parallel, this_host

VOCAB, SEQ = 1024, 128


def model_fn():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=8, n_embd=256, n_head=4, vocab_size=VOCAB, n_positions=SEQ,
                        bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


def optimizer(params):
    return torch.optim.AdamW(params, lr=1e-3)


def loss_fn(out, batch):
    return out.loss


def make_batch(gen: torch.Generator, size: int) -> dict:
    start = torch.randint(0, VOCAB, (size, 1), generator=gen)
    stride = torch.randint(1, 8, (size, 1), generator=gen)
    ids = (start + stride * torch.arange(SEQ)) % VOCAB
    return {"input_ids": ids, "labels": ids}


async def main(args) -> None:
    meshrt.init()
    procs = this_host().spawn_procs(per_host={"gpus": args.procs})
    gen = torch.Generator().manual_seed(0)
    sample = make_batch(gen, args.batch)
    plan = parallel.plan(model_fn, procs, sample, "auto", optimizer=optimizer, loss_fn=loss_fn)
    print(plan, flush=True)
    trainer = parallel.Trainer(model_fn, procs, plan, optimizer=optimizer, loss_fn=loss_fn)
    losses = []
    t0 = time.perf_counter()
    progress = _progress(args.steps)
    for _step in range(args.steps):
        losses.append(await trainer.step(make_batch(gen, args.batch)))
        progress.set_postfix(loss=f"{losses[-1]:.3f}")
        progress.update()
    progress.close()
    elapsed = time.perf_counter() - t0
    tokens = args.steps * args.batch * SEQ
    print(f"{args.steps} steps in {elapsed:.1f} s: {tokens / elapsed:,.0f} tokens/s; "
          f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    _plot(losses, args.plot, str(plan.strategy))
    await procs.stop()
    meshrt.shutdown()


def _progress(total: int):
    from tqdm import tqdm

    return tqdm(total=total, desc="training", unit="step")


def _plot(losses: list[float], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(range(1, len(losses) + 1), losses)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(f"GPT-2 (8 layers) with {title}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"loss curve written to {path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=4, help="processes in the mesh")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=8, help="sequences per step (all replicas)")
    parser.add_argument("--plot", default="gpt2_loss.png", help="where to write the loss curve")
    asyncio.run(main(parser.parse_args()))

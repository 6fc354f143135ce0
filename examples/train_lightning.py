#!/usr/bin/env python
"""Train a PyTorch Lightning module over a mesh: its training_step and
configure_optimizers, run by parallel.Trainer under any Strategy.

    pip install -e ".[examples]"
    python examples/train_lightning.py                       # 2 processes, dp=2, 100 steps
    python examples/train_lightning.py --strategy fsdp=2 --steps 50
    python examples/train_lightning.py --procs 4 --strategy dp=2,tp=2

The module is an ordinary LightningModule (a small GPT-2 language model with AdamW
and a warm-up schedule stepped every step); nothing in it knows about meshrt.
``parallel.lightning(LitGPT)`` makes it a ``model_fn`` for the Trainer, which
calls ``training_step`` as the step's forward in every process and builds the
optimizer from ``configure_optimizers`` after the model is sharded. The data are
the synthetic counting sequences of examples/train_gpt2.py.
"""

from __future__ import annotations

import argparse
import time

import lightning as L
import torch

import meshrt
from meshrt import parallel, this_host

VOCAB, SEQ = 512, 64


class LitGPT(L.LightningModule):
    def __init__(self, layers: int = 4, width: int = 128) -> None:
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        self.model = GPT2LMHeadModel(GPT2Config(n_layer=layers, n_embd=width, n_head=4, vocab_size=VOCAB,
                                                n_positions=SEQ, bos_token_id=0, eos_token_id=0))

    def training_step(self, batch, batch_idx):
        loss = self.model(input_ids=batch["input_ids"], labels=batch["input_ids"]).loss
        self.log("train_loss", loss)  # a no-op without a Lightning Trainer
        return loss

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=2e-3)
        warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 20))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": warmup, "interval": "step"}}


def make_batch(gen: torch.Generator, size: int) -> dict:
    start = torch.randint(0, VOCAB, (size, 1), generator=gen)
    stride = torch.randint(1, 8, (size, 1), generator=gen)
    return {"input_ids": (start + stride * torch.arange(SEQ)) % VOCAB}


def parse_strategy(text: str) -> parallel.Strategy:
    try:
        degrees = {k.strip(): int(v) for k, v in (part.split("=") for part in text.split(","))}
    except ValueError:
        raise SystemExit(f"--strategy {text!r}: write degrees as dp=2,tp=2") from None
    return parallel.Strategy(**degrees)


def main(args) -> None:
    import warnings

    warnings.filterwarnings("ignore", message=".*self.log.*")  # logging needs a Lightning Trainer
    strategy = parse_strategy(args.strategy)
    meshrt.init()
    procs = this_host().spawn_procs(per_host={"gpus": args.procs})
    trainer = parallel.Trainer(parallel.lightning(LitGPT), procs, strategy)
    gen = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    losses = []
    for step in range(args.steps):
        losses.append(trainer.step(make_batch(gen, args.batch)).get())
        if step % 10 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {losses[-1]:.3f}", flush=True)
    elapsed = time.perf_counter() - t0
    state = trainer.state_dict().get()
    print(f"{strategy}: {args.steps} steps in {elapsed:.1f} s, loss {losses[0]:.3f} -> {losses[-1]:.3f}; "
          f"state dict of {len(state)} tensors in LitGPT's names (e.g. {next(iter(state))})")
    procs.stop().get()
    meshrt.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=2, help="processes in the mesh")
    parser.add_argument("--strategy", default="dp=2", help="degrees, e.g. dp=2 or fsdp=2 or dp=2,tp=2")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=8, help="sequences per step (all replicas)")
    main(parser.parse_args())

"""A mesh of trainer processes: spawn, call, slice, torch.distributed, stop.

    python examples/mesh_train.py                 # this host only
    python examples/mesh_train.py --hosts 2       # wait for 2 agents (meshrt agent ...)

With --hosts N the driver listens on 0.0.0.0:6380 (or $MESHRT_PORT) and waits for N
host agents; under SLURM, examples/slurm/train.sbatch starts them for you.
"""

from __future__ import annotations

import argparse
import asyncio
import os

import torch

import meshrt
from meshrt import Actor, current_rank, endpoint, this_host


class Trainer(Actor):
    def __init__(self, lr: float):
        torch.manual_seed(0)
        self.model = torch.nn.Linear(8, 1)
        self.lr = lr

    @endpoint
    def setup(self):
        from torch.nn.parallel import DistributedDataParallel

        self.model = DistributedDataParallel(self.model)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=self.lr)
        return current_rank().rank

    @endpoint
    def step(self, seed: int) -> float:
        g = torch.Generator().manual_seed(seed * 100 + current_rank().rank)
        x = torch.randn(32, 8, generator=g)
        loss = (self.model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        self.opt.zero_grad()
        loss.backward()  # gradients all-reduced by DDP across the mesh
        self.opt.step()
        return loss.item()

    @endpoint
    def weight_norm(self) -> float:
        return float(sum(p.detach().norm() for p in self.model.parameters()))


async def main(n_hosts: int) -> None:
    if n_hosts:
        port = os.environ.get("MESHRT_PORT", "6380")
        meshrt.init(address=f"0.0.0.0:{port}")
        hosts = meshrt.hosts(min_hosts=n_hosts, timeout=300)
    else:
        hosts = this_host()
    procs = hosts.spawn_procs(per_host={"gpus": 2})
    print("processes:", procs.sizes)
    await procs.init_torch_distributed()
    trainers = procs.spawn("trainers", Trainer, lr=0.05)
    await trainers.setup.call()
    for step in range(5):
        losses = await trainers.step.call(step)
        print(f"step {step}: mean loss {sum(losses.values()) / len(losses):.4f}")
    norms = set((await trainers.weight_norm.call()).values())
    print("weights identical on every rank:", len(norms) == 1)
    first = trainers.slice(**{d: 0 for d in procs.sizes})
    print("rank 0's weight norm:", await first.weight_norm.call_one())
    await procs.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=0, help="host agents to wait for (0: this host only)")
    asyncio.run(main(parser.parse_args().hosts))

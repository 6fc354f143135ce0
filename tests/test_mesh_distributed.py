"""torch.distributed brought up over a ProcMesh: DDP matches single-process training,
and collectives run along one named dim of a 2-D mesh."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

import meshrt  # noqa: E402
from meshrt import Actor, current_rank, endpoint, this_host  # noqa: E402


def _data():
    g = torch.Generator().manual_seed(0)
    return torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)


def _model():
    torch.manual_seed(1)
    return torch.nn.Linear(4, 2)


def _train(model, x, y, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


class DDPTrainer(Actor):
    @endpoint
    def env(self):
        keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
        return {k: os.environ[k] for k in keys}

    @endpoint
    def train(self, steps):
        from torch.nn.parallel import DistributedDataParallel

        rank = current_rank().rank
        x, y = _data()
        model = DistributedDataParallel(_model())
        _train(model, x[rank * 4:(rank + 1) * 4], y[rank * 4:(rank + 1) * 4], steps)
        return [p.detach().clone() for p in model.module.parameters()]


def test_ddp_on_two_processes_matches_one(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    assert procs.init_torch_distributed().get(timeout=90) == "gloo"
    trainers = procs.spawn("ddp", DDPTrainer)
    envs = list(trainers.env.call().get(timeout=30).values())
    assert [e["RANK"] for e in envs] == ["0", "1"] and {e["WORLD_SIZE"] for e in envs} == {"2"}
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1"] and len({e["MASTER_PORT"] for e in envs}) == 1
    results = trainers.train.call(3).get(timeout=90)
    reference = _model()
    _train(reference, *_data(), 3)
    for params in results.values():
        for got, want in zip(params, reference.parameters(), strict=True):
            torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6)
    procs.stop().get(timeout=30)


class Reducer(Actor):
    @endpoint
    def reduce_along(self, dim):
        import torch.distributed as dist

        mesh = meshrt.device_mesh()
        t = torch.tensor([float(current_rank().rank)])
        dist.all_reduce(t, group=mesh.get_group(dim))
        return (mesh.mesh_dim_names, float(t.item()))


def test_all_reduce_along_one_dim_of_a_2x2_mesh(rt):
    procs = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2})
    procs.init_torch_distributed(backend="gloo").get(timeout=90)
    reducers = procs.spawn("red", Reducer)
    along_gpus = reducers.reduce_along.call("gpus").get(timeout=60)
    assert {v[0] for v in along_gpus.values()} == {("hosts", "gpus")}
    assert [v[1] for v in along_gpus.values()] == [1.0, 1.0, 5.0, 5.0]  # {0,1} and {2,3}
    along_hosts = reducers.reduce_along.call("hosts").get(timeout=60)
    assert [v[1] for v in along_hosts.values()] == [2.0, 4.0, 2.0, 4.0]  # {0,2} and {1,3}
    procs.stop().get(timeout=30)


def test_device_mesh_before_bring_up_says_what_to_call(rt):
    with pytest.raises(RuntimeError, match="init_torch_distributed"):
        meshrt.device_mesh()

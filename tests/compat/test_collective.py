"""Collective communication between actors (``ray.util.collective``, gloo on CPU):
a group joined from inside the actors, and one declared from the driver; allreduce,
broadcast, allgather, reducescatter, reduce, send/recv and barrier on torch tensors and
numpy arrays, in place."""
import numpy as np
import pytest
import torch

import meshrt as ray
import meshrt.util.collective as col
from meshrt.util.collective.types import ReduceOp

pytestmark = pytest.mark.timeout(180)


@ray.remote
class Member:
    def join(self, world_size, rank, group):
        col.init_collective_group(world_size, rank, backend="gloo", group_name=group)
        return col.get_rank(group), col.get_collective_group_size(group)

    def all_ops(self, group):
        rank, size = col.get_rank(group), col.get_collective_group_size(group)
        out = {}
        t = torch.full((4,), float(rank + 1))
        col.allreduce(t, group)
        out["allreduce"] = t.tolist()
        a = np.array([rank, -rank], dtype=np.float64)
        col.allreduce(a, group, op=ReduceOp.MAX)
        out["max"] = a.tolist()
        b = torch.full((2,), float(rank))
        col.broadcast(b, 1, group)
        out["broadcast"] = b.tolist()
        gathered = [torch.zeros(1) for _ in range(size)]
        col.allgather(gathered, torch.tensor([float(rank * 10)]), group)
        out["allgather"] = [g.item() for g in gathered]
        share = torch.zeros(2)
        col.reducescatter(share, [torch.full((2,), float(r + rank)) for r in range(size)], group)
        out["reducescatter"] = share.tolist()
        r = torch.tensor([float(rank + 1)])
        col.reduce(r, 0, group)
        out["reduce_at_0"] = r.item() if rank == 0 else None
        col.barrier(group)
        return out

    def pass_along(self, group):
        col.barrier(group)  # (Ray sets a declared group up at its first operation; get_rank says -1 before)
        rank = col.get_rank(group)
        t = torch.zeros(3)
        if rank == 0:
            col.send(torch.tensor([1.0, 2.0, 3.0]), 1, group)
        else:
            col.recv(t, 0, group)
        return t.tolist()

    def leave(self, group):
        col.destroy_collective_group(group)
        return col.is_group_initialized(group)


def test_a_group_joined_inside_the_actors():
    ray.init(num_cpus=4)
    members = [Member.remote() for _ in range(3)]
    assert ray.get([m.join.remote(3, i, "trio") for i, m in enumerate(members)]) == [(0, 3), (1, 3), (2, 3)]
    results = ray.get([m.all_ops.remote("trio") for m in members])
    for rank, out in enumerate(results):
        assert out["allreduce"] == [6.0] * 4  # 1 + 2 + 3
        assert out["max"] == [2.0, 0.0]
        assert out["broadcast"] == [1.0, 1.0]
        assert out["allgather"] == [0.0, 10.0, 20.0]
        assert out["reducescatter"] == [float(3 * rank + 3)] * 2  # sum over ranks s of (rank + s)
    assert results[0]["reduce_at_0"] == 6.0
    assert ray.get([m.leave.remote("trio") for m in members]) == [False] * 3


def test_a_group_declared_from_the_driver():
    ray.init(num_cpus=4)
    members = [Member.remote() for _ in range(2)]
    col.create_collective_group(members, 2, [1, 0], backend="gloo", group_name="pair")
    assert ray.get([m.pass_along.remote("pair") for m in members]) == [[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]

"""meshrt.util.collective beyond what tests/compat/test_collective.py checks against Ray:
errors that name the fix, a rank that never comes, a member that dies mid-collective
(the others fail within the group's timeout, never hang), a name used again."""

from __future__ import annotations

import pytest
import torch

import meshrt
import meshrt.util.collective as col

pytestmark = pytest.mark.timeout(120)


@meshrt.remote
class Member:
    def join(self, world_size, rank, group, timeout_ms=30000):
        col.init_collective_group(world_size, rank, backend="gloo", group_name=group, gloo_timeout=timeout_ms)
        return col.get_rank(group)

    def total(self, group, value):
        t = torch.tensor([float(value)])
        col.allreduce(t, group)
        return t.item()

    def gather_wrong(self, group):
        col.allgather([torch.zeros(1)], torch.zeros(1), group)

    def unknown(self):
        col.allreduce(torch.zeros(1), "nobody")

    def leave(self, group):
        col.destroy_collective_group(group)


def test_errors_name_the_fix(rt):
    with pytest.raises(RuntimeError, match="inside the actors"):
        col.allreduce(torch.zeros(1))
    with pytest.raises(ValueError, match="gloo"):
        col.create_collective_group([], 1, [], backend="mpi")
    if not col.nccl_available():
        with pytest.raises(RuntimeError, match="backend='gloo'"):
            col.create_collective_group([Member.remote()], 1, [0], backend="nccl", group_name="gpu")
    members = [Member.remote() for _ in range(2)]
    with pytest.raises(ValueError, match="one rank per actor"):
        col.create_collective_group(members, 2, [0], backend="gloo")
    with pytest.raises(ValueError, match="each once"):
        col.create_collective_group(members, 2, [0, 0], backend="gloo")
    col.create_collective_group(members, 2, [0, 1], backend="gloo", group_name="pair")
    with pytest.raises(RuntimeError, match="exists already"):
        col.create_collective_group(members, 2, [0, 1], backend="gloo", group_name="pair")
    with pytest.raises(RuntimeError, match="not set up in this process"):
        meshrt.get(members[0].unknown.remote())
    with pytest.raises(ValueError, match="init_collective_group|rank"):
        meshrt.get(members[0].join.remote(2, 5, "bad"))
    assert meshrt.get([m.total.remote("pair", 2) for m in members]) == [4.0, 4.0]
    with pytest.raises(ValueError, match="list of 2 tensors"):
        meshrt.get(members[0].gather_wrong.remote("pair"))


def test_a_rank_that_never_joins_times_out(rt):
    lonely = Member.remote()
    with pytest.raises(TimeoutError, match="every rank must call init_collective_group"):
        meshrt.get(lonely.join.remote(2, 1, "half", 500))


def test_a_member_that_dies_fails_the_others_within_the_timeout(rt):
    members = [Member.remote() for _ in range(2)]
    assert meshrt.get([m.join.remote(2, i, "fragile", 3000) for i, m in enumerate(members)]) == [0, 1]
    meshrt.kill(members[1])
    with pytest.raises(Exception):  # noqa: B017 - gloo's own error type: a closed peer or a timeout
        meshrt.get(members[0].total.remote("fragile", 1), timeout=60)


def test_a_group_name_is_free_again_once_destroyed(rt):
    members = [Member.remote() for _ in range(2)]
    for _ in range(2):
        assert meshrt.get([m.join.remote(2, i, "again") for i, m in enumerate(members)]) == [0, 1]
        assert meshrt.get([m.total.remote("again", 1) for m in members]) == [2.0, 2.0]
        meshrt.get([m.leave.remote("again") for m in members])

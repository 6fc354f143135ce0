"""Ray's id classes: ``ray.JobID``... rebuild ids from their hex or bytes, say nil, and
are what the runtime context's properties and a ref's ``task_id()``/``job_id()`` give."""

from __future__ import annotations

import pickle

import pytest

import meshrt


def test_ids_round_trip_through_hex_and_bytes_and_pickle():
    for cls in (meshrt.JobID, meshrt.NodeID, meshrt.TaskID, meshrt.WorkerID, meshrt.PlacementGroupID,
                meshrt.UniqueID, meshrt.FunctionID, meshrt.ActorClassID, meshrt.ClusterID, meshrt.ActorID):
        made = cls.from_random()
        assert cls.from_hex(made.hex()) == made == cls.from_binary(made.binary())
        assert len(made.binary()) == cls.size() and not made.is_nil()
        assert cls.nil().is_nil() and cls.nil().hex() == "ff" * cls.size()
        assert pickle.loads(pickle.dumps(made)) == made and type(pickle.loads(pickle.dumps(made))) is cls
        assert repr(made) == f"{cls.__name__}({made.hex()})"
    assert meshrt.JobID.from_int(1).hex() == "01000000" and meshrt.JobID.from_int(1).int() == 1  # (Ray's order)
    assert meshrt.ObjectID is meshrt.ObjectRef
    with pytest.raises(ValueError, match="hex text"):
        meshrt.NodeID.from_hex("not hex")


def test_a_nil_ref_names_no_object():
    nil = meshrt.ObjectRef.nil()
    assert nil.is_nil() and nil.hex() == "ff" * meshrt.ObjectRef.size()


@meshrt.remote
class Where:
    def ids(self):
        ctx = meshrt.get_runtime_context()
        return ctx.actor_id, ctx.get_actor_id(), ctx.task_id, ctx.get_task_id()


@pytest.mark.timeout(60)
def test_the_runtime_context_gives_id_objects_whose_hex_is_what_get_says(rt):
    ctx = meshrt.get_runtime_context()
    assert isinstance(ctx.job_id, meshrt.JobID) and ctx.job_id.hex() == ctx.get_job_id()
    assert isinstance(ctx.node_id, meshrt.NodeID) and ctx.node_id.hex() == ctx.get_node_id()
    assert ctx.actor_id is None
    actor = Where.remote()
    actor_id, actor_hex, task_id, task_hex = meshrt.get(actor.ids.remote(), timeout=30)
    assert isinstance(actor_id, meshrt.ActorID) and actor_id.hex() == actor_hex and actor_id == actor._actor_id
    assert isinstance(task_id, meshrt.TaskID) and task_id.hex() == task_hex
    ref = actor.ids.remote()
    assert isinstance(ref.task_id(), meshrt.TaskID) and isinstance(ref.job_id(), meshrt.JobID)
    assert ref.job_id() == ctx.job_id
    meshrt.get(ref, timeout=30)

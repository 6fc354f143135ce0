"""The public surface is exactly what meshrt/__init__.py lists."""

from __future__ import annotations

import meshrt
import meshrt.exceptions
import meshrt.util
import meshrt.util.queue

EXPECTED = {
    "init", "shutdown", "is_initialized", "remote", "method", "get", "put", "wait", "kill",
    "cancel", "get_actor", "get_runtime_context", "get_gpu_ids", "available_resources",
    "cluster_resources", "nodes", "timeline", "LoggingConfig", "memory_summary", "ObjectRef", "ObjectRefGenerator", "DynamicObjectRefGenerator", "ActorHandle", "ActorClass",
    "ActorMethod", "RemoteFunction", "RuntimeContext", "exceptions", "actor", "runtime_env", "util", "dag",
    # Ray's id classes (ObjectID is ObjectRef, as in Ray)
    "ObjectID", "ActorClassID", "ActorID", "ClusterID", "FunctionID", "JobID", "NodeID", "PlacementGroupID",
    "TaskID", "UniqueID", "WorkerID",
    # Monarch-style meshes
    "Accumulator", "Actor", "ActorError", "ActorMesh", "Channel", "Context", "Endpoint", "Extent", "Future", "HostMesh",
    "MeshFailure", "Point", "Port", "PortReceiver", "ProcMesh", "SupervisionError", "ValueMesh", "Workspace", "as_endpoint",
    "concurrent_endpoint", "context", "current_actor_name", "current_rank", "current_size", "device_mesh", "endpoint",
    "get_or_spawn_controller", "hosts", "returns_future", "send", "shutdown_context", "this_host", "this_proc",
    "unhandled_fault_hook",
    # Monarch's way to bring up hosts (mesh/bootstrap.py)
    "attach_to_workers", "enable_transport", "run_worker_loop_forever", "ChannelTransport",
}


def test_public_names():
    assert set(meshrt.__all__) == EXPECTED
    for name in meshrt.__all__:
        assert hasattr(meshrt, name), name


def test_public_classes_say_meshrt():
    for name in ("ObjectRef", "ObjectRefGenerator", "ActorHandle", "RemoteFunction", "Actor", "ValueMesh",
                 "ProcMesh", "endpoint"):
        assert getattr(meshrt, name).__module__ == "meshrt"
    assert meshrt.exceptions.TaskError.__module__ == "meshrt.exceptions"


def test_ray_style_submodules():
    from meshrt.dag import InputNode, MultiOutputNode  # noqa: F401
    from meshrt.util import ActorPool  # noqa: F401
    from meshrt.util.queue import Empty, Full, Queue  # noqa: F401
    assert meshrt.dag.InputNode is InputNode

    assert callable(meshrt.actor.exit_actor)
    for name in ("RayError", "RayTaskError", "RayActorError", "GetTimeoutError", "TaskCancelledError",
                 "WorkerCrashedError", "ObjectLostError", "ActorDiedError", "ObjectStoreFullError"):
        assert hasattr(meshrt.exceptions, name), name


def test_refs_have_no_public_constructor_needed():
    assert "ObjectRef" in meshrt.__all__
    assert meshrt.ObjectRef.__init__.__code__.co_argcount >= 3  # internal (id, owner)


def test_log_once_says_true_once_per_key(monkeypatch):
    from meshrt.util import debug, disable_log_once_globally, log_once

    debug.reset_log_once("test-key")
    assert log_once("test-key") and not log_once("test-key") and log_once("another-test-key")
    monkeypatch.setattr(debug, "_periodic", True)
    monkeypatch.setitem(debug._seen, "test-key", debug._seen["test-key"] - debug._PERIOD_S)
    assert log_once("test-key") and not log_once("test-key")  # (again once a minute has passed)
    monkeypatch.setattr(debug, "_disabled", False)
    disable_log_once_globally()
    assert not log_once("a-fresh-test-key")

"""meshrt: a remote-object runtime for Python and PyTorch.

Ray's programming model on an asyncio core: ``@meshrt.remote`` functions and
classes, ObjectRefs you ``await`` or ``meshrt.get()``, actors with restarts and
names. Code written for Ray runs after ``import meshrt as ray``.

This module is the whole public surface; everything under ``meshrt._private`` is
implementation.
"""

from __future__ import annotations

from . import exceptions
from ._private.api import ActorClass, ActorHandle, ActorMethod, RemoteFunction, method, remote
from ._private.driver import init, is_initialized, shutdown
from ._private.id_types import (
    ActorClassID,
    ActorID,
    ClusterID,
    FunctionID,
    JobID,
    NodeID,
    PlacementGroupID,
    TaskID,
    UniqueID,
    WorkerID,
)
from ._private.logging_config import LoggingConfig
from ._private.memory import memory_summary
from ._private.refs import DynamicObjectRefGenerator, ObjectRef, ObjectRefGenerator
from ._private.refs import ObjectRef as ObjectID  # (Ray's old name, the same class)
from ._private.timeline import timeline
from ._private.toplevel import (
    RuntimeContext,
    available_resources,
    cancel,
    cluster_resources,
    get,
    get_actor,
    get_gpu_ids,
    get_runtime_context,
    kill,
    nodes,
    put,
    wait,
)
from .exceptions import SupervisionError
from .exceptions import TaskError as ActorError
from .mesh import (
    Accumulator,
    Actor,
    ActorMesh,
    Channel,
    ChannelTransport,
    Context,
    Endpoint,
    Extent,
    Future,
    HostMesh,
    MeshFailure,
    Point,
    Port,
    PortReceiver,
    ProcMesh,
    ValueMesh,
    Workspace,
    as_endpoint,
    attach_to_workers,
    concurrent_endpoint,
    context,
    current_actor_name,
    current_rank,
    current_size,
    device_mesh,
    enable_transport,
    endpoint,
    get_or_spawn_controller,
    hosts,
    returns_future,
    run_worker_loop_forever,
    send,
    shutdown_context,
    this_host,
    this_proc,
    unhandled_fault_hook,
)

__version__ = "0.1.0"

__all__ = [
    "init",
    "shutdown",
    "is_initialized",
    "remote",
    "method",
    "get",
    "put",
    "wait",
    "kill",
    "cancel",
    "get_actor",
    "get_runtime_context",
    "get_gpu_ids",
    "available_resources",
    "cluster_resources",
    "nodes",
    "timeline",
    "LoggingConfig",
    "memory_summary",
    "ObjectRef",
    "ObjectRefGenerator",
    "DynamicObjectRefGenerator",
    "ObjectID",
    "ActorClassID",
    "ActorID",
    "ClusterID",
    "FunctionID",
    "JobID",
    "NodeID",
    "ObjectID",
    "PlacementGroupID",
    "TaskID",
    "UniqueID",
    "WorkerID",
    "ActorHandle",
    "ActorClass",
    "ActorMethod",
    "RemoteFunction",
    "RuntimeContext",
    "Accumulator",
    "Actor",
    "ActorError",
    "ActorMesh",
    "Channel",
    "Context",
    "Endpoint",
    "Extent",
    "Future",
    "HostMesh",
    "MeshFailure",
    "Point",
    "Port",
    "PortReceiver",
    "ProcMesh",
    "SupervisionError",
    "ValueMesh",
    "Workspace",
    "as_endpoint",
    "attach_to_workers",
    "concurrent_endpoint",
    "context",
    "current_actor_name",
    "current_rank",
    "current_size",
    "device_mesh",
    "enable_transport",
    "ChannelTransport",
    "endpoint",
    "get_or_spawn_controller",
    "hosts",
    "returns_future",
    "run_worker_loop_forever",
    "send",
    "shutdown_context",
    "this_host",
    "this_proc",
    "unhandled_fault_hook",
    "exceptions",
    "actor",
    "runtime_env",
    "util",
    "dag",
]


def _fixup_module_metadata() -> None:
    """Public objects say ``meshrt.X`` in reprs and tracebacks, not their private home."""
    for name in __all__:
        obj = globals().get(name)
        if getattr(obj, "__module__", "").startswith(("meshrt._private", "meshrt.mesh")):
            try:
                obj.__module__ = __name__
            except (AttributeError, TypeError):
                pass


_fixup_module_metadata()

from . import actor, dag, runtime_env, util  # noqa: E402  (these import names defined above)

"""Monarch-style actor meshes on meshrt: spawn processes and actors as named-dim
arrays and call them all at once. The public names are re-exported by ``meshrt``."""

from .accumulator import Accumulator
from .actor import (
    Actor,
    ActorInstance,
    Context,
    concurrent_endpoint,
    context,
    current_actor_name,
    current_rank,
    current_size,
    endpoint,
)
from .actor_mesh import ActorMesh, Endpoint
from .bootstrap import (
    ChannelTransport,
    attach_to_workers,
    enable_transport,
    run_worker_loop_forever,
)
from .channel import Channel, Port, PortReceiver
from .client import shutdown_context
from .controllers import get_or_spawn_controller
from .distributed import device_mesh
from .future import Future, returns_future
from .meshes import HostMesh, ProcMesh, hosts, this_host, this_proc
from .send import as_endpoint, send
from .shape import Extent, Point, Shape
from .supervision import MeshFailure, unhandled_fault_hook
from .values import ValueMesh
from .workspace import Workspace

__all__ = [
    "Accumulator", "Actor", "ActorInstance", "ActorMesh", "Channel", "ChannelTransport", "Context", "Endpoint", "Extent", "Future",
    "HostMesh", "MeshFailure", "Point", "Port", "PortReceiver", "ProcMesh", "Shape", "ValueMesh",
    "as_endpoint", "attach_to_workers", "concurrent_endpoint", "context", "current_actor_name", "current_rank", "current_size",
    "device_mesh", "enable_transport", "endpoint", "get_or_spawn_controller", "hosts", "returns_future", "send", "shutdown_context",
    "run_worker_loop_forever", "this_host", "this_proc", "unhandled_fault_hook", "Workspace",
]

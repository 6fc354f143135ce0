"""Ray-style helpers built on the public API: ActorPool, a distributed Queue,
scheduling strategies, as_completed/map_unordered, and multiprocessing.Pool."""

from __future__ import annotations

from .actor_pool import ActorPool

__all__ = ["ActorPool", "accelerators", "as_completed", "deregister_serializer", "disable_log_once_globally",
           "enable_periodic_logging", "get_current_placement_group", "get_node_ip_address", "log_once",
           "get_placement_group", "inspect_serializability", "list_named_actors", "map_unordered", "placement_group",
           "placement_group_table", "pdb", "queue", "register_serializer", "remove_placement_group", "rpdb",
           "scheduling_strategies"]


def get_node_ip_address() -> str:
    """The address other hosts reach this process's host on (Ray's function of that
    name; e.g. for MASTER_ADDR): the one a worker advertises, else the interface of
    the default route."""
    import os

    for name in ("MESHRT_ADVERTISE_HOST", "MESHRT_LISTEN_HOST"):
        host = os.environ.get(name)
        if host and host not in ("0.0.0.0", "::"):
            return host
    from .._private import state
    from .._private.host_directory import host_ip

    controller = getattr(state.core_or_none(), "controller", None)
    return controller.node_ip() if controller is not None else host_ip()  # (in the head's driver: as its workers)


def list_named_actors(all_namespaces: bool = False) -> list:
    """Names of live named actors in this namespace (or, with ``all_namespaces``,
    ``{"name", "namespace"}`` dicts for every namespace), as Ray's function of that name."""
    from .._private import state

    core = state.core()
    return core.request_sync("list_named_actors", None if all_namespaces else core.namespace())

from . import accelerators, queue, scheduling_strategies  # noqa: E402
from .check_serialize import inspect_serializability  # noqa: E402
from .debug import disable_log_once_globally, enable_periodic_logging, log_once  # noqa: E402
from .helpers import as_completed, map_unordered  # noqa: E402
from .placement_group import (  # noqa: E402
    get_current_placement_group,
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from .serialization import deregister_serializer, register_serializer  # noqa: E402


def __getattr__(name: str):
    """``rpdb`` (and Ray's other name for it, ``pdb``), imported when first asked for:
    pdb's modules would add milliseconds to every process's start."""
    if name in ("rpdb", "pdb"):
        import importlib

        return importlib.import_module(f"{__name__}.rpdb")  # (`from . import` would ask this again)
    raise AttributeError(f"module 'meshrt.util' has no attribute {name!r}")

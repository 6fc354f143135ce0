"""Ray-style helpers built on the public API: ActorPool, and a distributed Queue."""

from __future__ import annotations

from .actor_pool import ActorPool

__all__ = ["ActorPool", "list_named_actors", "queue"]


def list_named_actors(all_namespaces: bool = False) -> list:
    """Names of live named actors in this namespace (or, with ``all_namespaces``,
    ``{"name", "namespace"}`` dicts for every namespace), as Ray's function of that name."""
    from .._private import state

    core = state.core()
    return core.request_sync("list_named_actors", None if all_namespaces else core.namespace())

from . import queue  # noqa: E402

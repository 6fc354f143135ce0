"""Where a ``NodeAffinitySchedulingStrategy`` sends a task or an actor, decided at the
caller's line (so a node that is not there is named there, not at the first ``get``)."""

from __future__ import annotations

import dataclasses


def head_node_id(core) -> str | None:
    """The head host's node id, as a process anywhere in the cluster knows it."""
    config = getattr(core, "config", None) or {}
    return config.get("head_node_id") or config.get("node_id")


def check_task(core, affinity: tuple, what: str) -> None:
    """Tasks run on the head host: a hard affinity to another node cannot be met."""
    node_id, soft = affinity
    head = head_node_id(core)
    if soft or node_id == head:
        return
    raise ValueError(f"{what}: NodeAffinitySchedulingStrategy(node_id={node_id!r}, soft=False): tasks run on "
                     f"the head host only (node {head!r}); pass soft=True, or call an actor placed on that "
                     "node with the same strategy")


def actor_options(core, opts):
    """``opts`` with the host its affinity names (0: the head), asked of the controller."""
    node_id, soft = opts.affinity
    if node_id == head_node_id(core):
        host = 0
    else:
        host = core.request_sync("host_of_node", node_id, soft, opts.resources)
    return dataclasses.replace(opts, host=host)

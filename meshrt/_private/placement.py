"""Which host a task or an actor runs on, decided at the caller's line (so what cannot
be met is named there, not at the first ``get``).

Tasks run on the head host. An actor runs on the head host too, unless its options
say otherwise: ``NodeAffinitySchedulingStrategy`` names a host, or it asks for
resources the head host can never give (a custom resource or GPUs only some agents
offer), and then it goes to a host that has them, one with them free now first.
"""

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


def actor_options(core, opts, what: str):
    """``opts`` with the host the actor starts on (0: the head)."""
    if opts.host_given:  # (a mesh's process, the head's included)
        return opts
    if opts.affinity is not None:
        node_id, soft = opts.affinity
        if node_id == head_node_id(core):
            return opts
        host = core.request_sync("host_of_node", node_id, soft, opts.resources, what)
    elif _head_lacks(core, opts.resources):
        host = core.request_sync("host_for", opts.resources, what)
    else:
        return opts
    return dataclasses.replace(opts, host=host, waits_for_host=bool(host))


def _head_lacks(core, units: tuple) -> bool:
    """The head host can never give ``units`` (its totals, known everywhere)."""
    controller = getattr(core, "controller", None)
    if controller is not None:
        return controller.node.infeasible(units) is not None
    total = (getattr(core, "config", None) or {}).get("head_resources")
    if total is None:  # (local mode: one node, which says so itself)
        return False
    return any(amount > total.get(name, 0) for name, amount in units)

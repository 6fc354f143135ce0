"""Which host a task or an actor runs on, decided at the caller's line (so what cannot
be met is named there, not at the first ``get``).

An actor's host is named here when its options decide it: a
``NodeAffinitySchedulingStrategy``, or resources the head host can never give (a
custom resource or GPUs only some agents offer: a host that has them, one with them
free now first). Otherwise, once the cluster has other hosts, the controller picks
one when the actor arrives, as it does for tasks (host_choice.py); on a cluster of
one host it runs there.

For a task the caller only decides whether to pack it for any host
(``task_portable``) and checks that a hard affinity names a node of the cluster.
"""

from __future__ import annotations

import dataclasses
import functools

from .. import exceptions as exc
from ..scheduler import bundles
from . import context, labels


def head_node_id(core) -> str | None:
    """The head host's node id, as a process anywhere in the cluster knows it."""
    config = getattr(core, "config", None) or {}
    return config.get("head_node_id") or config.get("node_id")


def head_labels(core) -> dict:
    """The head host's node labels, as a process anywhere in the cluster knows them."""
    controller = getattr(core, "controller", None)
    if controller is not None:
        return controller.labels
    config = getattr(core, "config", None) or {}
    if "head_labels" in config:
        return config["head_labels"]
    return labels.of_node(config.get("labels", {}), config.get("node_id"), config.get("resources", {}))  # (local)


def check_labels(core, hard: tuple, what: str, unschedulable, fallbacks: tuple = ()) -> None:
    """A label selector no node can meet (nor any of its fallbacks) fails at the call, on
    a cluster of one host (with more, the controller judges: host_choice.py)."""
    if (hard and not several_hosts(core) and core.host_id == 0
            and labels.first_met(hard, fallbacks, [head_labels(core)]) is None):
        seen = labels.given(head_labels(core))
        nor = "".join(f" (nor its fallback {labels.describe(f)})" for f in fallbacks)
        raise unschedulable.because(what, f"its label selector {labels.describe(hard)}{nor} does not match the only "
                                          f"node's labels {seen}; give the node labels (init(labels=...)), or "
                                          f"start a host that has them (meshrt agent --labels)")


def check_task(core, affinity: tuple, units: tuple, what: str) -> None:
    """A hard affinity to a node that is not in the cluster fails at the call."""
    node_id, soft = affinity
    if not soft and node_id != head_node_id(core):
        core.request_sync("host_of_node", node_id, False, units, what)


def task_portable(core, opts) -> bool:
    """Pack this task for any host (its large arguments lent, not put in this host's
    store)? From another host always; from the head when it may leave the head: an
    affinity to another node, resources the head never has, or (from the driver,
    which knows) another host in the cluster to spread work to. A hard affinity to
    the head keeps it here."""
    if core.host_id != 0:
        return True
    if opts.affinity is not None:
        node_id, soft = opts.affinity
        if node_id != head_node_id(core):
            return True
        if not soft:
            return False  # (it runs here, or fails)
    elif opts.labels and not labels.matches(head_labels(core), opts.labels):
        return True  # (it must run elsewhere)
    return _head_lacks(core, opts.resources) or several_hosts(core)


def several_hosts(core) -> bool:
    """Other hosts are in the cluster (the driver knows; the head host's workers are told)."""
    controller = getattr(core, "controller", None)
    return controller.spreads_tasks if controller is not None else core.several_hosts


def capture(opts, what: str | None = None):
    """``opts`` in the placement group of the running task or actor (any bundle) when
    that one was placed with ``placement_group_capture_child_tasks=True`` and ``opts``
    names no placement: Ray's capture. What it submits is captured in turn, unless
    its options say ``placement_group_capture_child_tasks=False``."""
    if opts.capture_children is False:
        return opts
    group = context.capturing_group()
    if group is None:
        return opts
    if not opts.capturable:  # (placed by its own options: it only inherits the flag, as in Ray)
        return opts if opts.capture_children else dataclasses.replace(opts, capture_children=True)
    _placement_group(group).check_request(opts.resources, -1, what or f"task {opts.name}")
    return dataclasses.replace(opts, resources=bundles.request_in_bundle(opts.resources, group, -1),
                               capture_children=True)


@functools.lru_cache(maxsize=64)
def _placement_group(pg_id: str):
    """A handle to the group (its bundles fetched once per process)."""
    from ..util.placement_group import PlacementGroup, PlacementGroupID

    return PlacementGroup(PlacementGroupID(pg_id))


def actor_options(core, opts, what: str):
    """``opts`` with the host the actor starts on (0: the head), or the controller's to pick."""
    if opts.host_given or bundles.bundle_of(opts.resources) is not None:
        return opts  # (a mesh's process; or in a placement group: the controller places it)
    if opts.affinity is not None:
        node_id, soft = opts.affinity
        if node_id == head_node_id(core):
            return opts
        host = core.request_sync("host_of_node", node_id, soft, opts.resources, what)
    elif opts.labels or opts.soft_labels:
        if core.host_id == 0 and not several_hosts(core):
            check_labels(core, opts.labels, what, exc.ActorUnschedulableError, opts.fallback_labels)
            return opts  # (the head, the only host)
        core.request_sync("host_for", opts.resources, what, opts.spread, opts.labels, opts.soft_labels,
                          opts.fallback_labels)  # (or fails)
        return dataclasses.replace(opts, host_policy="spread" if opts.spread else "default")
    elif _head_lacks(core, opts.resources):
        host = core.request_sync("host_for", opts.resources, what, opts.spread)
    elif core.host_id != 0 or several_hosts(core):
        return dataclasses.replace(opts, host_policy="spread" if opts.spread else "default")
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

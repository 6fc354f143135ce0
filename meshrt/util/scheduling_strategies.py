"""Where a task or actor runs, by Ray's names (``ray.util.scheduling_strategies``).

``NodeAffinitySchedulingStrategy(node_id, soft)`` puts an actor on one host of the
cluster: a node id from ``meshrt.nodes()`` or ``get_runtime_context().get_node_id()``.
``soft=False`` fails the creation when that host is not in the cluster, and waits
while it is busy; ``soft=True`` then places the actor as if it had no affinity (the
head host, or a host with resources the head never has). Tasks run on the head host:
an affinity to another host is an error there unless ``soft=True``.
"""

from __future__ import annotations


class NodeAffinitySchedulingStrategy:
    """Run on the node ``node_id`` (hex, as ``meshrt.nodes()`` gives it)."""

    def __init__(self, node_id: str, soft: bool, _spill_on_unavailable: bool = False,
                 _fail_on_unavailable: bool = False) -> None:
        if not isinstance(node_id, str) or not node_id:
            raise ValueError(f"NodeAffinitySchedulingStrategy(node_id={node_id!r}): give a node id from "
                             "meshrt.nodes() (its 'NodeID') or get_runtime_context().get_node_id()")
        if not isinstance(soft, bool):
            raise ValueError(f"NodeAffinitySchedulingStrategy(soft={soft!r}): soft must be True or False")
        self.node_id = node_id
        self.soft = soft
        # (Ray's private knobs: accepted; soft=True already runs elsewhere when it does not fit)
        self._spill_on_unavailable = _spill_on_unavailable
        self._fail_on_unavailable = _fail_on_unavailable

    def __repr__(self) -> str:
        return f"NodeAffinitySchedulingStrategy(node_id={self.node_id!r}, soft={self.soft})"


"""Where a task or actor runs, by Ray's names (``ray.util.scheduling_strategies``).

``NodeAffinitySchedulingStrategy(node_id, soft)`` puts an actor on one host of the
cluster: a node id from ``meshrt.nodes()`` or ``get_runtime_context().get_node_id()``.
``soft=False`` fails the creation when that host is not in the cluster, and waits
while it is busy; ``soft=True`` then places it as if it had no affinity. The same
goes for tasks. ``PlacementGroupSchedulingStrategy(pg, i)`` runs it in bundle ``i``
of a placement group (meshrt.util.placement_group). ``NodeLabelSchedulingStrategy(hard=
{"zone": In("a", "b")}, soft={...})`` runs it on a node whose labels match ``hard``, one
that also matches ``soft`` first (meshrt/_private/labels.py).
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



class PlacementGroupSchedulingStrategy:
    """Run in bundle ``placement_group_bundle_index`` (-1: any) of ``placement_group``,
    taking its resources from that bundle (meshrt.util.placement_group). With
    ``placement_group_capture_child_tasks=True`` the tasks and actors it submits that
    name no placement run in the group too (any bundle), and so on down; ``placement_group=None``
    keeps a task out of the group it would be captured into."""

    def __init__(self, placement_group, placement_group_bundle_index: int = -1,
                 placement_group_capture_child_tasks: bool | None = None) -> None:
        from .placement_group import PlacementGroup

        if placement_group is not None and not isinstance(placement_group, PlacementGroup):
            raise ValueError(f"PlacementGroupSchedulingStrategy(placement_group={placement_group!r}): give a "
                             "group from meshrt.util.placement_group([...]), or None for none (and not the one "
                             "of the task submitting it)")
        self.placement_group = placement_group
        self.placement_group_bundle_index = placement_group_bundle_index
        self.placement_group_capture_child_tasks = placement_group_capture_child_tasks

    def __repr__(self) -> str:
        return (f"PlacementGroupSchedulingStrategy({self.placement_group!r}, "
                f"placement_group_bundle_index={self.placement_group_bundle_index})")


class In:
    """A label's value is one of ``values``."""

    def __init__(self, *values: str) -> None:
        self.values = list(_label_values(values, "In"))


class NotIn:
    """A label's value is none of ``values`` (or the node lacks the label)."""

    def __init__(self, *values: str) -> None:
        self.values = list(_label_values(values, "NotIn"))


class Exists:
    """The node has the label, whatever its value."""


class DoesNotExist:
    """The node lacks the label."""


class NodeLabelSchedulingStrategy:
    """Run on a node whose labels match every expression of ``hard`` (``{"zone":
    In("a")}``); among those, one matching ``soft`` too when there is one."""

    def __init__(self, hard: dict, *, soft: dict | None = None) -> None:
        from .._private import labels

        if not hard and not soft:
            raise ValueError("NodeLabelSchedulingStrategy(hard=..., soft=...): give at least one expression, "
                             "e.g. hard={'zone': In('us-east1')}")
        self.hard = hard or {}
        self.soft = soft or {}
        self._hard = labels.expressions(self.hard, "NodeLabelSchedulingStrategy(hard=...)")
        self._soft = labels.expressions(self.soft, "NodeLabelSchedulingStrategy(soft=...)")

    def __repr__(self) -> str:
        return f"NodeLabelSchedulingStrategy(hard={self.hard!r}, soft={self.soft!r})"


def _label_values(values: tuple, what: str) -> tuple:
    if not values or not all(isinstance(v, str) and v for v in values):
        raise ValueError(f"{what}(...): give one or more label values (non-empty str); got {values!r}")
    return values

"""Ray's state API (``ray.util.state``): what runs in the cluster now, as rows."""

from .api import (
    get_actor,
    get_node,
    get_placement_group,
    list_actors,
    list_nodes,
    list_objects,
    list_placement_groups,
    list_tasks,
    list_workers,
    summarize_actors,
    summarize_tasks,
)
from .common import ActorState, NodeState, ObjectState, PlacementGroupState, TaskState, WorkerState
from .logs import get_log, list_logs

__all__ = ["ActorState", "NodeState", "ObjectState", "PlacementGroupState", "TaskState", "WorkerState",
           "get_actor", "get_log", "get_node", "get_placement_group", "list_actors", "list_logs", "list_nodes", "list_objects",
           "list_placement_groups", "list_tasks", "list_workers", "summarize_actors", "summarize_tasks"]

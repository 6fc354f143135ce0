"""Ray's state API (``ray.util.state``): what runs in the cluster now, as rows."""

from . import exception
from .api import (
    get_actor,
    get_job,
    get_node,
    get_objects,
    get_placement_group,
    get_task,
    get_worker,
    list_actors,
    list_jobs,
    list_nodes,
    list_objects,
    list_placement_groups,
    list_runtime_envs,
    list_tasks,
    list_workers,
    summarize_actors,
    summarize_objects,
    summarize_tasks,
)
from .common import (
    ActorState,
    JobState,
    NodeState,
    ObjectState,
    PlacementGroupState,
    RuntimeEnvState,
    TaskState,
    WorkerState,
)
from .logs import get_log, list_logs

__all__ = ["exception", "ActorState", "JobState", "NodeState", "ObjectState", "PlacementGroupState",
           "RuntimeEnvState", "TaskState", "WorkerState", "list_runtime_envs",
           "get_actor", "get_job", "get_log", "get_node", "get_objects", "get_placement_group", "get_task",
           "get_worker", "list_actors", "list_jobs", "list_logs", "list_nodes", "list_objects",
           "list_placement_groups", "list_tasks", "list_workers", "summarize_actors", "summarize_objects",
           "summarize_tasks"]

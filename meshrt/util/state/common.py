"""The rows ``meshrt.util.state`` returns, with the field names of Ray's state API
(``ray.util.state.common``), filled with what meshrt knows."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


class _Row:
    def asdict(self) -> dict:
        return dataclasses.asdict(self)

    def __getitem__(self, key: str):  # (a row read like a dict, as some callers of Ray's do)
        return getattr(self, key)


@dataclass
class ActorState(_Row):
    actor_id: str
    class_name: str
    state: str  # PENDING_CREATION | ALIVE | RESTARTING | DEAD
    name: str = ""
    ray_namespace: str = ""
    node_id: str | None = None
    pid: int | None = None
    is_detached: bool = False
    required_resources: dict = field(default_factory=dict)
    num_restarts: int = 0
    death_cause: str | None = None
    repr_name: str = ""
    job_id: str | None = None
    placement_group_id: str | None = None


@dataclass
class NodeState(_Row):
    node_id: str
    node_ip: str
    is_head_node: bool
    state: str  # ALIVE | DEAD
    node_name: str = ""
    resources_total: dict = field(default_factory=dict)
    state_message: str | None = None  # (DEAD: why, as nodes()' DeathReasonMessage)
    labels: dict = field(default_factory=dict)


@dataclass
class WorkerState(_Row):
    worker_id: str
    is_alive: bool
    worker_type: str
    pid: int | None = None
    node_id: str | None = None
    state: str = ""  # STARTING | IDLE | BUSY | DEAD
    actor_id: str | None = None
    running: str = ""  # what it was started for, or runs now


@dataclass
class TaskState(_Row):
    task_id: str
    name: str
    state: str  # PENDING_NODE_ASSIGNMENT | SUBMITTED_TO_WORKER | RUNNING | FINISHED | FAILED
    type: str = "NORMAL_TASK"  # | ACTOR_TASK | ACTOR_CREATION_TASK
    func_or_class_name: str = ""
    node_id: str | None = None
    worker_pid: int | None = None
    attempt_number: int = 0
    required_resources: dict = field(default_factory=dict)
    start_time_ms: int | None = None  # (when it last started running)
    end_time_ms: int | None = None  # (an ended task's)
    job_id: str | None = None
    placement_group_id: str | None = None
    worker_id: str | None = None
    actor_id: str | None = None  # (an ACTOR_TASK's or ACTOR_CREATION_TASK's actor)
    error_type: str | None = None  # a failed task's: Ray's ErrorType name (TASK_EXECUTION_EXCEPTION...)
    error_message: str | None = None  # ... and its error's text
    parent_task_id: str | None = None  # (a task's: the task or actor call that submitted it; None: the driver)
    creation_time_ms: int | None = None  # (a task's: when it was submitted)
    events: list = field(default_factory=list)  # [{"state": ..., "created_ms": ...}], as far as known
    language: str = "PYTHON"
    label_selector: dict = field(default_factory=dict)
    fallback_strategy: dict = field(default_factory=lambda: {"options": []})
    call_site: str | None = None  # (None, as Ray's without RAY_record_task_actor_creation_sites)
    is_debugger_paused: bool | None = None


@dataclass
class ObjectState(_Row):
    object_id: str
    object_size: int
    where: str  # shared memory | spilled
    owner_worker: int = 0
    pinned_by: dict = field(default_factory=dict)  # worker -> pins
    node_id: str | None = None


@dataclass
class PlacementGroupState(_Row):
    placement_group_id: str
    name: str
    state: str  # PENDING | CREATED | REMOVED
    strategy: str = ""
    bundles: list = field(default_factory=list)


@dataclass
class JobState(_Row):
    """The driver's job (meshrt runs one job per driver: the cluster is its own)."""

    job_id: str
    type: str  # DRIVER
    status: str  # RUNNING
    entrypoint: str = ""
    submission_id: str | None = None
    start_time: int | None = None  # ms since the epoch
    end_time: int | None = None
    driver_info: dict = field(default_factory=dict)  # id, node_ip_address, pid
    driver_node_id: str | None = None
    runtime_env: dict = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)


@dataclass
class RuntimeEnvState(_Row):
    runtime_env: dict
    success: bool
    creation_time_ms: float | None = None  # (from the first task or actor placed with it until it ran)
    node_id: str | None = None
    ref_cnt: int | None = None  # (detail=True: the tasks and live actors with it on its node now)
    error: str | None = None  # (detail=True: why it could not be set up)

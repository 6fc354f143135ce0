"""``list_*``, ``get_*`` and ``summarize_*`` of Ray's state API (``ray.util.state``).

Each asks the controller for a snapshot of what it knows now: every actor (dead ones
too, with how they died), each worker process, each placement group, each host, the
tasks waiting or running and the last 1,000 that ended, the actor calls running or
ended (as their processes keep them), the runtime environments set up on each node,
and the objects in the head host's shared-memory store. ``filters`` are ``(field, "=" or "!=", value)`` triples,
compared as text (state words in any case).
"""

from __future__ import annotations

from typing import Any

from ..._private import state as rt_state
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
from .exception import StateFilterError

_DEFAULT_LIMIT = 100


def list_actors(address: str | None = None, filters: list | None = None, limit: int = _DEFAULT_LIMIT,
                timeout: int = 30, detail: bool = False, raise_on_missing_output: bool = True,
                _explain: bool = False) -> list[ActorState]:
    return _listed("actors", ActorState, filters, limit, timeout)


def list_workers(address: str | None = None, filters: list | None = None, limit: int = _DEFAULT_LIMIT,
                 timeout: int = 30, detail: bool = False, raise_on_missing_output: bool = True,
                 _explain: bool = False) -> list[WorkerState]:
    return _listed("workers", WorkerState, filters, limit, timeout)


def list_tasks(address: str | None = None, filters: list | None = None, limit: int = _DEFAULT_LIMIT,
               timeout: int = 30, detail: bool = False, raise_on_missing_output: bool = True,
               _explain: bool = False) -> list[TaskState]:
    """Tasks waiting for a worker or running now, and the last 1,000 that ended
    (FINISHED or FAILED, with ``start_time_ms`` and ``end_time_ms``); actor method calls
    (``ACTOR_TASK``) and constructors (``ACTOR_CREATION_TASK``) waiting in their process
    (SUBMITTED_TO_WORKER), running now or ended, as each process keeps them (its last
    10,000; task_spans.py)."""
    return _listed("tasks", TaskState, filters, limit, timeout)


def list_objects(address: str | None = None, filters: list | None = None, limit: int = _DEFAULT_LIMIT,
                 timeout: int = 30, detail: bool = False, raise_on_missing_output: bool = True,
                 _explain: bool = False) -> list[ObjectState]:
    """Objects in the head host's shared-memory store (small values live with their
    owners and are not listed)."""
    return _listed("objects", ObjectState, filters, limit, timeout)


def list_nodes(address: str | None = None, filters: list | None = None, limit: int = _DEFAULT_LIMIT,
               timeout: int = 30, detail: bool = False, raise_on_missing_output: bool = True,
               _explain: bool = False) -> list[NodeState]:
    rows = [{"node_id": n["NodeID"], "node_ip": n["NodeManagerAddress"], "is_head_node": i == 0,
             "state": "ALIVE" if n["Alive"] else "DEAD", "node_name": n["NodeName"],
             "resources_total": dict(n["Resources"]), "state_message": n.get("DeathReasonMessage") or None,
             "labels": dict(n.get("Labels") or {})}
            for i, n in enumerate(_ask("nodes", timeout))]
    return filtered(rows, NodeState, filters, limit)


def list_placement_groups(address: str | None = None, filters: list | None = None, limit: int = _DEFAULT_LIMIT,
                          timeout: int = 30, detail: bool = False, raise_on_missing_output: bool = True,
                          _explain: bool = False) -> list[PlacementGroupState]:
    table = _ask("placement_group_table", timeout, None)
    rows = [{"placement_group_id": pg_id, "name": g["name"], "state": g["state"], "strategy": g["strategy"],
             "bundles": [g["bundles"][i] for i in sorted(g["bundles"])]} for pg_id, g in table.items()]
    return filtered(rows, PlacementGroupState, filters, limit)


def list_runtime_envs(address: str | None = None, filters: list | None = None, limit: int = _DEFAULT_LIMIT,
                      timeout: int = 30, detail: bool = False, raise_on_missing_output: bool = True,
                      _explain: bool = False) -> list[RuntimeEnvState]:
    """Each runtime_env that a task or actor ran with (or could not set up) on each node,
    as Ray lists them: ``success``, ``creation_time_ms``, and with ``detail=True``
    ``ref_cnt`` and ``error`` (runtime_env_states.py)."""
    return filtered(_ask("state_runtime_envs", timeout, bool(detail)), RuntimeEnvState, filters, limit)


def get_actor(id: str, address: str | None = None, timeout: int = 30) -> ActorState | None:  # noqa: A002 - Ray's name
    found = list_actors(filters=[("actor_id", "=", id)], limit=1, timeout=timeout)
    return found[0] if found else None


def get_node(id: str, address: str | None = None, timeout: int = 30) -> NodeState | None:  # noqa: A002
    found = list_nodes(filters=[("node_id", "=", id)], limit=1, timeout=timeout)
    return found[0] if found else None


def list_jobs(address: str | None = None, filters: list | None = None, limit: int = _DEFAULT_LIMIT,
              timeout: int = 30, detail: bool = False, raise_on_missing_output: bool = True,
              _explain: bool = False) -> list[JobState]:
    """The driver's job, RUNNING (a meshrt cluster is its driver's: one job)."""
    return _listed("jobs", JobState, filters, limit, timeout)


def get_job(id: str, address: str | None = None, timeout: int = 30) -> JobState | None:  # noqa: A002
    found = list_jobs(filters=[("job_id", "=", id)], limit=1, timeout=timeout)
    return found[0] if found else None


def get_task(id: str, address: str | None = None, timeout: int = 30,  # noqa: A002
             _explain: bool = False) -> TaskState | list[TaskState] | None:
    """As Ray's: the task's row, or a list of a row per attempt where it was retried
    (waiting, running, ended), or None."""
    rows = list_tasks(filters=[("task_id", "=", id)], limit=1_000_000, timeout=timeout)
    return None if not rows else rows[0] if len(rows) == 1 else rows


def get_worker(id: str, address: str | None = None, timeout: int = 30) -> WorkerState | None:  # noqa: A002
    found = list_workers(filters=[("worker_id", "=", id)], limit=1, timeout=timeout)
    return found[0] if found else None


def get_objects(id: str, address: str | None = None, timeout: int = 30) -> list[ObjectState]:  # noqa: A002
    return list_objects(filters=[("object_id", "=", id)], limit=1_000_000, timeout=timeout)


def get_placement_group(id: str, address: str | None = None,  # noqa: A002
                        timeout: int = 30) -> PlacementGroupState | None:
    found = list_placement_groups(filters=[("placement_group_id", "=", id)], limit=1, timeout=timeout)
    return found[0] if found else None


def summarize_actors(address: str | None = None, timeout: int = 30, raise_on_missing_output: bool = True,
                     _explain: bool = False) -> dict:
    """Actors counted by class and state, in the shape of Ray's summary."""
    summary: dict[str, dict] = {}
    rows = _ask("state_actors", timeout)
    for row in rows:
        entry = summary.setdefault(row["class_name"], {"class_name": row["class_name"], "state_counts": {}})
        entry["state_counts"][row["state"]] = entry["state_counts"].get(row["state"], 0) + 1
    return {"cluster": {"summary": summary, "total_actors": len(rows), "summary_by": "class"}}


def summarize_tasks(address: str | None = None, timeout: int = 30, raise_on_missing_output: bool = True,
                    _explain: bool = False) -> dict:
    """Tasks and actor calls counted by function (or ``Class.method``) and state."""
    summary: dict[str, dict] = {}
    rows = _ask("state_tasks", timeout)
    for row in rows:
        entry = summary.setdefault(row["name"], {"func_or_class_name": row["name"], "type": row["type"],
                                                 "state_counts": {}})
        entry["state_counts"][row["state"]] = entry["state_counts"].get(row["state"], 0) + 1
    return {"cluster": {"summary": summary, "total_tasks": len(rows), "summary_by": "func_name"}}


def summarize_objects(address: str | None = None, timeout: int = 30, raise_on_missing_output: bool = True,
                      _explain: bool = False) -> dict:
    """Objects in the head host's store, counted and sized by where they are (shared
    memory or spilled), in the shape of Ray's summary."""
    summary: dict[str, dict] = {}
    rows = _ask("state_objects", timeout)
    for row in rows:
        entry = summary.setdefault(row["where"], {"total_objects": 0, "total_size_mb": 0.0})
        entry["total_objects"] += 1
        entry["total_size_mb"] += row["object_size"] / (1 << 20)
    return {"cluster": {"summary": summary, "total_objects": len(rows),
                        "total_size_mb": sum(r["object_size"] for r in rows) / (1 << 20), "summary_by": "where"}}


# -- the snapshot and its filters -----------------------------------------------------------------


def _listed(kind: str, row_class: type, filters: list | None, limit: int, timeout: int) -> list:
    return filtered(_ask("state_" + kind, timeout), row_class, filters, limit)


def _ask(method: str, timeout: Any, *args) -> Any:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"timeout={timeout!r}: give the seconds to wait for the answer, above 0")
    core = rt_state.core()
    return core.request_sync(method, *args, timeout=timeout)


def filtered(rows: list, row_class: type, filters: list | None, limit: Any) -> list:
    """The rows (dicts) that pass ``filters``, at most ``limit``, as ``row_class``."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit={limit!r}: give the most rows to return, a number >= 1")
    checks = [_filter(f, row_class) for f in filters or ()]
    picked = [row for row in rows if all(check(row) for check in checks)]
    return [row_class(**row) for row in picked[:limit]]


def _filter(spec: Any, row_class: type):
    fields = list(row_class.__dataclass_fields__)
    if not isinstance(spec, (tuple, list)) or len(spec) != 3:
        raise StateFilterError(f"filters: each filter is a (field, '=' or '!=', value) triple; got {spec!r}")
    key, op, value = spec
    if key not in fields:
        raise StateFilterError(f"filters: {row_class.__name__} has no field {key!r}; filter on one of {fields}")
    if op not in ("=", "!="):
        raise StateFilterError(f"filters: predicate {op!r} is not supported; use '=' or '!='")
    fold = key in ("state", "worker_type", "type", "success")  # (state words and booleans in any case)
    want = str(value).upper() if fold else str(value)

    def check(row: dict) -> bool:
        have = str(row.get(key))
        equal = (have.upper() if fold else have) == want
        return equal if op == "=" else not equal

    return check

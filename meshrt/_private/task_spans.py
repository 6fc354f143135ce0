"""``list_tasks()`` rows for the calls the controller never schedules: actor method
calls go from caller to actor directly, and constructors run where the actor was
placed. Every process keeps the calls that ran in it (call_record.py, what
``meshrt.timeline()`` reads), so the controller asks for those and lists each actor
call and constructor that ended, as Ray lists ACTOR_TASK and ACTOR_CREATION_TASK
rows, and adds ``start_time_ms`` to the tasks it scheduled itself.

A call is RUNNING from its start, then FINISHED, or FAILED where its caller gets an
error.
"""

from __future__ import annotations

from . import call_record, ids

_MS = 1_000_000  # (ns per ms)


def _with_start(row: dict, start_ms: int) -> dict:
    """A scheduled task's row with when it started running, among its events too."""
    events = [e for e in row.get("events", ()) if e["state"] != "RUNNING"]
    at = next((i for i, e in enumerate(events) if e["created_ms"] > start_ms or e["state"] in _ENDED), len(events))
    return dict(row, start_time_ms=start_ms, events=[*events[:at], {"state": "RUNNING", "created_ms": start_ms},
                                                     *events[at:]])


_ENDED = ("FINISHED", "FAILED")


def with_calls(rows: list, processes: list, job_id: str) -> list:
    """``rows`` (the scheduled tasks), each with its last start where a process ran it,
    then a row per actor call and constructor that ran, runs or waits to run in
    ``processes`` (TimelineTable.calls_of_processes)."""
    started: dict[str, int] = {}
    calls: dict[tuple, dict] = {}  # (task id, kind) -> its row: an ended call's replaces its running one
    for proc in processes:
        for start_ns, end_ns, name, task_id, kind, thread, error, func in proc["rows"]:
            if task_id <= 0:  # (meshrt's own: an actor's release)
                continue
            if kind == call_record.TASK:
                started[ids.to_hex(task_id)] = start_ns // _MS
                continue
            if name.startswith("ProcHost."):  # (a mesh process spawning or stopping actors: meshrt's own)
                continue
            if not end_ns and (task_id, kind) in calls:
                continue
            creation = kind == call_record.ACTOR_CREATION
            if thread == call_record.QUEUED:  # (arrived, waiting for its turn: start_ns is its arrival)
                calls[(task_id, kind)] = _queued_row(proc, name, func, task_id, start_ns, job_id)
                continue
            state = "RUNNING" if not end_ns else "FAILED" if error else "FINISHED"
            events = [{"state": "RUNNING", "created_ms": start_ns // _MS}]
            if end_ns:
                events.append({"state": state, "created_ms": end_ns // _MS})
            calls[(task_id, kind)] = {
                "task_id": ids.to_hex(task_id),
                "job_id": job_id,
                "name": name,
                "func_or_class_name": func or name,
                "state": state,
                "type": "ACTOR_CREATION_TASK" if creation else "ACTOR_TASK",
                "actor_id": ids.to_hex(task_id) if creation else proc.get("actor_id"),
                "node_id": proc["node_id"],
                "worker_id": proc["worker_id"],
                "worker_pid": proc["pid"],
                "start_time_ms": start_ns // _MS,
                "end_time_ms": end_ns // _MS if end_ns else None,
                "error_type": error[0] if error else None,
                "error_message": error[1] if error else None,
                "events": events,
            }
    scheduled = [_with_start(row, started[row["task_id"]]) if row["task_id"] in started else row for row in rows]
    return scheduled + list(calls.values())


def _queued_row(proc: dict, name: str, func: str | None, task_id: int, arrived_ns: int, job_id: str) -> dict:
    """An actor call its process has and has not started (behind others, or waiting for
    a slot of its concurrency group)."""
    return {
        "task_id": ids.to_hex(task_id), "job_id": job_id, "name": name, "func_or_class_name": func or name,
        "state": "SUBMITTED_TO_WORKER", "type": "ACTOR_TASK", "actor_id": proc.get("actor_id"),
        "node_id": proc["node_id"], "worker_id": proc["worker_id"], "worker_pid": proc["pid"],
        "events": [{"state": "SUBMITTED_TO_WORKER", "created_ms": arrived_ns // _MS}],
    }

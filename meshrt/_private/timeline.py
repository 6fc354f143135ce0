"""``meshrt.timeline()``: Ray's ``ray.timeline()``, the tasks and actor calls that ran in
the cluster as Chrome trace events (open the file in ``chrome://tracing`` or
https://ui.perfetto.dev).

Each process is a trace process named after what it runs (an actor's class, or a
pool worker) and where (the node, its host); each thread that ran calls is a trace
thread; each call is one complete event ("ph": "X") from start to end in
microseconds, with its task id. The driver's own calls (actors on ``this_proc()``)
are there too.
"""

from __future__ import annotations

import json
import os

from . import call_record, ids, state


def timeline(filename: str | None = None) -> list[dict] | None:
    """The calls that ran, as Chrome trace events; written to ``filename`` as JSON when
    given (then None is returned), as Ray does."""
    if filename is not None and not isinstance(filename, (str, os.PathLike)):
        raise TypeError(f"timeline(filename={filename!r}): give a path (str), or nothing for the events")
    core = state.core_or_none()
    if core is None:
        raise RuntimeError("meshrt.timeline(): meshrt is not running; call meshrt.init() first")
    events = chrome_events(core.request_sync("timeline", timeout=60.0))
    if filename is None:
        return events
    with open(filename, "w") as f:
        json.dump(events, f)
    return None


def chrome_events(processes: list[dict]) -> list[dict]:
    """Trace metadata naming each process and thread, then one event per call, by start."""
    events: list[dict] = []
    calls: list[dict] = []
    for proc in processes:
        pid = proc["pid"] or 0
        what = "driver" if proc.get("driver") else (proc["actor"] or "pool worker")
        events.append({"ph": "M", "name": "process_name", "pid": pid,
                       "args": {"name": f"{what} (pid {pid}, node {proc['node_id'][:8]}, {proc['host']})"}})
        for ident, name in proc["threads"].items():
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": ident, "args": {"name": name}})
        for start_ns, end_ns, name, task_id, kind, ident, _error, _func in proc["rows"]:
            if not end_ns:  # (running now: a span once it ends)
                continue
            calls.append({
                "cat": kind, "name": name, "ph": "X", "pid": pid, "tid": ident,
                "ts": start_ns / 1000, "dur": (end_ns - start_ns) / 1000,
                "args": {"actor_id" if kind == call_record.ACTOR_CREATION else "task_id": _hex(task_id),
                         "worker_id": proc["worker_id"], "node_id": proc["node_id"]},
            })
    calls.sort(key=lambda e: e["ts"])
    return events + calls


def _hex(task_id: int) -> str:
    return ids.to_hex(task_id) if task_id > 0 else str(task_id)  # (negative: meshrt's own calls)

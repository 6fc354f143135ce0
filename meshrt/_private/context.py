"""Who is running: the runtime context behind ``get_runtime_context()``.

The current call lives in a ContextVar, so each coroutine of an async actor and each
thread of a threaded actor sees its own call.
"""

from __future__ import annotations

import contextvars
import os
from typing import Any

from ..scheduler.bundles import bundle_of
from . import cpu_threads, ids

_call: contextvars.ContextVar = contextvars.ContextVar("meshrt_call", default=None)
process: dict[str, Any] = {
    "job_id": None, "node_id": None, "namespace": "default", "worker_id": 0,
    "actor_id": None, "actor_name": None, "actor_class": None, "incarnation": 0,
    "resources": {},
}


def enter(call, core, task: bool = False) -> contextvars.Token:
    if task:  # (a Ray-style task in a worker: its threads, as Ray sets them)
        cpu_threads.for_call(call.spec.resources)
    return _call.set(call)


def leave(token: contextvars.Token) -> None:
    try:
        _call.reset(token)
    except ValueError:  # reset from another context (thread hand-off): just clear
        _call.set(None)


def set_actor(spec, core, incarnation: int = 0) -> None:
    process["actor_id"] = spec.actor_id
    process["actor_name"] = spec.name
    process["actor_class"] = spec.class_name
    process["actor_meta"] = spec.meta
    process["incarnation"] = incarnation
    process["resources"] = resources_of(spec)
    process["units"] = spec.resources
    cpu_threads.for_call(spec.resources)  # (before its class is loaded; a mesh process undoes it)
    process["capture_children"] = spec.capture_children


def capturing_group() -> str | None:
    """The placement group (id) the running task or actor was placed in when it was
    placed with ``placement_group_capture_child_tasks=True``; else None."""
    call = _call.get()
    if getattr(call, "is_task", False):
        spec = call.spec
        found = bundle_of(spec.resources) if spec.capture_children else None
    else:
        found = bundle_of(process.get("units", ())) if process.get("capture_children") else None
    return found[0] if found is not None else None


def resources_of(spec) -> dict:
    """By the node's names: a request in a placement group bundle shows as ``{"CPU": 1}``."""
    from ..scheduler.bundles import base_request

    return dict(_units_to_floats(base_request(spec.resources)))


def current_call():
    return _call.get()


def nesting_depth() -> int:
    """The depth of a task submitted from here (scheduler/depth_queue.py): one below
    the running task; from an actor's method, 1; from the driver's own code, 0."""
    call = _call.get()
    if call is None:
        return 0
    spec = getattr(call, "spec", None)
    return getattr(spec, "depth", 0) + 1


def _units_to_floats(units):
    from ..scheduler.resources import from_units

    return [(k, from_units(v)) for k, v in units]


def gpu_ids() -> list[int]:
    """The GPUs this worker was given (gpus.worker_env); CUDA_VISIBLE_DEVICES elsewhere."""
    visible = os.environ.get("MESHRT_GPU_IDS", os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    out = []
    for part in visible.split(","):
        part = part.strip()
        if part and part.lstrip("-").isdigit() and int(part) >= 0:
            out.append(int(part))
        elif part and not part.lstrip("-").isdigit():
            out.append(part)  # a UUID-style device name
    return out


def hex_or_none(value: int | None) -> str | None:
    return None if value is None else ids.to_hex(value)

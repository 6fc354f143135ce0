"""``meshrt list KIND``: the state API's rows as a plain text table (as ``ray list``)."""

from __future__ import annotations

from .api import filtered
from .common import ActorState, ObjectState, RuntimeEnvState, TaskState, WorkerState

_KINDS = {
    "actors": (ActorState, ["actor_id", "class_name", "state", "name", "pid", "node_id", "death_cause"]),
    "workers": (WorkerState, ["worker_id", "state", "pid", "actor_id", "running", "node_id"]),
    "tasks": (TaskState, ["task_id", "name", "state", "worker_pid", "attempt_number", "node_id"]),
    "objects": (ObjectState, ["object_id", "object_size", "where", "owner_worker", "pinned_by"]),
    "runtime-envs": (RuntimeEnvState, ["runtime_env", "success", "creation_time_ms", "node_id"]),
}
_WIDEST = 60  # (a long death cause is cut there)


def row_filters(specs: list, kind: str) -> list:
    """``["state=ALIVE", "name!=x"]`` -> ``[("state", "=", "ALIVE"), ("name", "!=", "x")]``."""
    out = []
    for spec in specs:
        field, op, value = spec.partition("!=") if "!=" in spec else spec.partition("=")
        if not op or not field:
            raise ValueError(f"--filter {spec!r}: write FIELD=VALUE or FIELD!=VALUE, e.g. --filter state=ALIVE")
        out.append((field.strip(), op, value.strip()))
    return out


def render_rows(kind: str, rows: list, filters: list, limit: int) -> str:
    row_class, columns = _KINDS[kind]
    picked = filtered(rows, row_class, filters, limit)
    cells = [columns] + [[_cell(getattr(row, c)) for c in columns] for row in picked]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = ["  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip()
             for line in cells]
    lines.append(f"({len(picked)} of {len(rows)} {kind})")
    return "\n".join(lines)


def _cell(value) -> str:
    text = "-" if value is None or value == "" else str(value).replace("\n", " ")
    return text if len(text) <= _WIDEST else text[:_WIDEST - 3] + "..."

"""A driver's job inside the cluster's shared processes (long-running heads:
client_driver.py). A task of an attached driver's job carries the job in its
runtime_env (``"_job"``: its id, namespace, sys.path and directory); a pool worker takes
that context around the task, as it takes the task's runtime_env, and an actor of the
job takes it for good.

Its output must reach that driver: at each switch the worker writes a marker line to its
stdout and stderr, in order with what the task prints, and the controller reads the
markers out of the worker's output and sends the lines between them to the job's
driver (jobs.py), as Ray's workers mark their logs with the job they run.
"""

from __future__ import annotations

import os
import sys

from . import context

MARK = "__meshrt_job_output__ "


def enter(job: dict) -> None:
    """Take ``job``'s context (the caller saves and restores sys.path and the directory)."""
    context.process.update(job_id=job["job_id"], namespace=job["namespace"])
    for path in reversed(job.get("sys_path", ())):
        if path not in sys.path and os.path.isdir(path):
            sys.path.insert(0, path)
    cwd = job.get("cwd")
    if cwd and os.path.isdir(cwd):
        os.chdir(cwd)
    _mark(job["job_id"])


def saved() -> tuple:
    return context.process.get("job_id"), context.process.get("namespace")


def leave(before: tuple) -> None:
    """Back to the context ``saved()`` gave, after a task of another job."""
    if context.process.get("job_id") != before[0]:
        context.process.update(job_id=before[0], namespace=before[1])
        _mark(before[0])


def _mark(job_id: str) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.write(f"{MARK}{job_id}\n")
            stream.flush()
        except (AttributeError, ValueError, OSError):  # (closed or replaced by the user's code)
            pass


def split(record, stream: str, lines: list[str]) -> list[tuple[str | None, list[str]]]:
    """The controller's side: a worker's lines as (job id, lines) runs in order, without
    the markers (None: the job the worker started in). The current job of each of its
    streams is kept on its record."""
    jobs = getattr(record, "output_jobs", None)
    current = jobs.get(stream) if jobs else None
    if current is None and not any(line.startswith(MARK) for line in lines):
        return [(None, lines)]
    if jobs is None:
        jobs = record.output_jobs = {}
    runs: list[tuple[str | None, list[str]]] = []
    for line in lines:
        if line.startswith(MARK):
            current = jobs[stream] = line[len(MARK):].strip() or None
            continue
        if not runs or runs[-1][0] != current:
            runs.append((current, []))
        runs[-1][1].append(line)
    return runs

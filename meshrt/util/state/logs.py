"""``list_logs`` and ``get_log`` of Ray's state API: the workers' output, kept in files
on the head (meshrt/_private/log_files.py), listed by node and read by file name,
actor, task or pid."""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import Any

from .api import _ask

_FOLLOW_INTERVAL_S = 0.5


def list_logs(address: str | None = None, node_id: str | None = None, node_ip: str | None = None,
              glob_filter: str | None = None, timeout: int = 30) -> dict[str, list[str]]:
    """The log files of one node's workers, by group: ``{"worker_out": [...],
    "worker_err": [...]}`` (file names for ``get_log(filename=...)``)."""
    import fnmatch

    node = _node(node_id, node_ip, "list_logs", timeout)
    groups: dict[str, list[str]] = {"worker_out": [], "worker_err": []}
    for name, on_node, _worker, _pid in _ask("log_files", timeout):
        if on_node == node and fnmatch.fnmatch(name, glob_filter or "*"):
            groups["worker_out" if name.endswith(".out") else "worker_err"].append(name)
    return {group: sorted(names) for group, names in groups.items() if names}


def get_log(address: str | None = None, node_id: str | None = None, node_ip: str | None = None,
            filename: str | None = None, actor_id: str | None = None, task_id: str | None = None,
            pid: int | None = None, follow: bool = False, tail: int = -1, timeout: int = 30,
            suffix: str = "out", encoding: str | None = "utf-8", errors: str | None = "strict",
            submission_id: str | None = None, attempt_number: int = 0, _interval: float | None = None,
            filter_ansi_code: bool = False) -> Generator[str, None, None]:
    """The lines of one worker's log, picked by exactly one of ``filename`` (from
    list_logs), ``actor_id``, ``task_id`` or ``pid``; ``suffix`` "out" (stdout) or "err"
    (stderr); the last ``tail`` lines (-1: all). With ``follow=True`` it goes on
    yielding lines as the process prints them, until the process has ended."""
    picked = [(how, key) for how, key in (("filename", filename), ("actor_id", actor_id), ("task_id", task_id),
                                          ("pid", pid)) if key is not None]
    if len(picked) != 1:
        raise ValueError("get_log(): give exactly one of filename=, actor_id=, task_id= or pid= "
                         f"(got {[how for how, _ in picked] or 'none'})")
    if isinstance(tail, bool) or not isinstance(tail, int) or tail < -1:
        raise ValueError(f"get_log(tail={tail!r}): give a number of lines, or -1 for all")
    if submission_id is not None:
        raise ValueError("get_log(submission_id=...): meshrt has no job submission; a job's output is its driver's")
    how, key = picked[0]
    if how == "pid" and (isinstance(key, bool) or not isinstance(key, int)):
        raise TypeError(f"get_log(pid={key!r}): give the process id as an int")
    if how != "pid" and not isinstance(key, str):
        raise TypeError(f"get_log({how}={key!r}): give it as a str")
    interval = _FOLLOW_INTERVAL_S if _interval is None else _interval
    first = _ask("log_lines", timeout, how, key, suffix, tail, None)  # (here: a wrong id fails at the call)
    return _lines(first, how, key, suffix, follow, interval, timeout, filter_ansi_code)


def _lines(first: tuple, how: str, key: Any, suffix: str, follow: bool, interval: float, timeout: int,
           filter_ansi: bool) -> Generator[str, None, None]:
    name, lines, offset, alive = first
    yield from _clean(lines, filter_ansi)
    pause = threading.Event()  # (never set: waits between reads without busy-polling)
    while follow and alive:  # (that file: a restarted actor's new process writes another)
        pause.wait(interval)
        name, lines, offset, alive = _ask("log_lines", timeout, "filename", name, suffix, -1, offset)
        yield from _clean(lines, filter_ansi)


def _clean(lines: list[str], filter_ansi: bool) -> list[str]:
    if not filter_ansi:
        return lines
    import re

    escape = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
    return [escape.sub("", line) for line in lines]


def _node(node_id: str | None, node_ip: str | None, what: str, timeout: int) -> str:
    if node_id is None and node_ip is None:
        raise ValueError(f"{what}(): give node_id= (from meshrt.nodes() or list_nodes()) or node_ip=")
    nodes = _ask("nodes", timeout)
    for n in nodes:
        if (node_id is not None and n["NodeID"] == node_id) or (node_id is None and n["NodeManagerAddress"] == node_ip):
            return n["NodeID"]
    raise ValueError(f"{what}(node_id={node_id!r}, node_ip={node_ip!r}): no such node; "
                     f"the nodes are {[n['NodeID'] for n in nodes]}")

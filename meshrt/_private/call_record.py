"""What ran in this process, kept for ``meshrt.timeline()``: one span per task, actor
call or actor constructor (start, end, name, thread), the last ``KEPT`` of them.

Always on, as cheap as two clock reads and an append, so a timeline covers what
already ran (Ray records its events only with ``RAY_PROFILING=1``). The controller
asks every process for its spans when a timeline is wanted (timeline_table.py); a
process that exits on its own sends them first. Wall-clock times, so that spans of
several hosts line up as far as their clocks do.
"""

from __future__ import annotations

import collections
import os
import threading
import time

KEPT = 20_000

# (start_ns, end_ns, name, task_id, kind, thread ident); deque appends and copies are
# atomic under the GIL, so the threads that run calls need no lock
_ran: collections.deque = collections.deque(maxlen=KEPT)

TASK = "task"
ACTOR_CALL = "actor_task"
ACTOR_CREATION = "actor_creation_task"


def note(name: str, task_id: int, kind: str, start_ns: int) -> None:
    """A call that started at ``start_ns`` (``time.time_ns()``) ended now."""
    _ran.append((start_ns, time.time_ns(), name, task_id, kind, threading.get_ident()))


def taken() -> tuple[list, dict]:
    """The spans so far (oldest first) and the names of the threads they ran on."""
    rows = list(_ran.copy())
    names = {t.ident: t.name for t in threading.enumerate()}
    return rows, {ident: names.get(ident, f"thread {ident}") for ident in {row[5] for row in rows}}


def clear() -> None:
    """Forget what ran (a new session starts in this process)."""
    _ran.clear()


# A process forked from this one (a zygote, a worker) has run none of these calls.
os.register_at_fork(after_in_child=clear)

"""What ran in this process, kept for ``meshrt.timeline()`` and ``list_tasks()``: one
span per task, actor call or actor constructor (start, end, name, thread, how it
failed, if it did), the last ``KEPT`` of them.

Always on, as cheap as two clock reads and a few stores, so a timeline covers what
already ran (Ray records its events only with ``RAY_PROFILING=1``). The controller
asks every process for its spans when a timeline is wanted (timeline_table.py); a
process that exits on its own sends them first. Wall-clock times, so that spans of
several hosts line up as far as their clocks do.

The spans sit in fixed arrays, allocated at the first call (about 50 bytes a span,
0.5 MB a process that ran anything), not as a tuple per span (five times that).
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from array import array

KEPT = 10_000
_TEXT_KEPT = 1000  # characters of a failed call's error text kept

TASK = "task"
ACTOR_CALL = "actor_task"
ACTOR_CREATION = "actor_creation_task"
_KINDS = (TASK, ACTOR_CALL, ACTOR_CREATION)
_KIND_CODE = {kind: code for code, kind in enumerate(_KINDS)}


class _Ring:
    """Slot i % KEPT of each array holds span i. ``next()`` of a count is atomic under the
    GIL, so threads that run calls at once write different slots without a lock."""

    def __init__(self) -> None:
        self.start = array("q", bytes(8 * KEPT))
        self.end = array("q", bytes(8 * KEPT))
        self.task_hi = array("Q", bytes(8 * KEPT))  # (a task id is wider than 64 bits)
        self.task_lo = array("Q", bytes(8 * KEPT))
        self.thread = array("Q", bytes(8 * KEPT))
        self.kind = array("b", bytes(KEPT))
        self.error: list = [None] * KEPT  # (Ray's error type, text) of a call that failed
        self.name: list = [None] * KEPT
        self.func: list = [None] * KEPT  # Class.method of a call that .options(name=) renamed
        self.count = itertools.count()
        self.written = 0  # spans written so far (a reader's bound)


_ring: _Ring | None = None
_alloc = threading.Lock()
_running: dict = {}  # id(call) -> (call, thread ident): the executor's calls running now
_queued: dict = {}  # id(call) -> (call, time.time_ns() it arrived): actor calls waiting for their turn
QUEUED = 0  # the thread of a row that waits for its turn (no thread runs it yet)


def arrive(call) -> None:
    """An actor call came to this process and waits for its turn (list_tasks shows it as
    Ray does: SUBMITTED_TO_WORKER)."""
    _queued[id(call)] = (call, time.time_ns())


def begin(call) -> None:
    """An executor's call (executor.Call) starts running on this thread now."""
    _queued.pop(id(call), None)
    call.started = time.time_ns()
    _running[id(call)] = (call, threading.get_ident())


def note(name: str, task_id: int, kind: str, start_ns: int, error: tuple | None = None,
         func: str | None = None) -> None:
    """A call that started at ``start_ns`` (``time.time_ns()``) ended now; ``error``:
    how it failed (Ray's error type, the error's text), if it did; ``func``: what it
    ran, where ``name`` is one the caller gave it."""
    end_ns = time.time_ns()
    ring = _ring or _allocate()
    i = next(ring.count)
    slot = i % KEPT
    ring.name[slot] = None  # (a reader skips it until it is whole)
    ring.start[slot] = start_ns
    ring.end[slot] = end_ns
    task_id &= (1 << 128) - 1  # (meshrt's own calls have negative ids: kept as their two's complement)
    ring.task_hi[slot] = task_id >> 64
    ring.task_lo[slot] = task_id & 0xFFFF_FFFF_FFFF_FFFF
    ring.thread[slot] = threading.get_ident()
    ring.kind[slot] = _KIND_CODE[kind]
    ring.error[slot] = error
    ring.func[slot] = func
    ring.name[slot] = sys.intern(name)
    if i >= ring.written:
        ring.written = i + 1


def note_call(call, error=None, results: tuple = ()) -> None:
    """An executor's call (executor.Call) ended, or is about to answer with ``results``
    (or ``error``, what it raised or its payload): noted once."""
    if call.started:
        failed = error is not None or bool(results) and getattr(results[0], "is_error", False)
        failure = _failure(error, results) if failed else None
        note(call.span or call.name, call.task_id, TASK if call.is_task else ACTOR_CALL, call.started, failure,
             call.func)
        call.started = 0
    _running.pop(id(call), None)
    _queued.pop(id(call), None)  # (one that ended before it began: cancelled, say)


def note_creation(name: str, actor_id: int, start_ns: int, error) -> None:
    """An actor's constructor ran (``error``: its error payload, if it raised)."""
    failure = None if error is None else ("ACTOR_CREATION_FAILED", _failure(error, ())[1])
    note(name, actor_id, ACTOR_CREATION, start_ns, failure)


def _failure(error, results: tuple) -> tuple:
    """(Ray's error type, text) of a failed call: what the user's code raised is a
    TASK_EXECUTION_EXCEPTION (as Ray wraps it), meshrt's own errors (a cancel, a dead
    mesh actor) say what they are."""
    from .. import exceptions as exc

    from_payload = not isinstance(error, BaseException)  # (or None: the results' first)
    if from_payload:
        from ..objstore.serialization import error_from_payload

        try:
            error = error_from_payload(error if error is not None else results[0])
        except Exception as failure:  # noqa: BLE001 - (only describes it)
            return "TASK_EXECUTION_EXCEPTION", f"(its error could not be read: {failure!r})"
    own = from_payload or getattr(error, "__meshrt_plain__", False)
    kind = exc.ray_error_type(error) if own else "TASK_EXECUTION_EXCEPTION"
    return kind, f"{type(error).__name__}: {error}"[:_TEXT_KEPT]


def _allocate() -> _Ring:
    global _ring
    with _alloc:
        if _ring is None:
            _ring = _Ring()
        return _ring


def taken() -> tuple[list, dict]:
    """The spans so far, oldest first, as (start_ns, end_ns, name, task_id, kind, thread
    ident, error, func), then the calls running now (``end_ns`` 0), then the actor calls
    waiting for their turn (``end_ns`` 0, ``start_ns`` when they arrived, thread QUEUED),
    and the names of the threads they ran on (``error``: None, or how the call failed:
    see ``note``)."""
    ring = _ring
    rows = []
    written = ring.written if ring is not None else 0
    first = max(0, written - KEPT)
    for i in range(first, written):
        slot = i % KEPT
        name = ring.name[slot]
        if name is None:
            continue
        task_id = (ring.task_hi[slot] << 64) | ring.task_lo[slot]
        if task_id >> 127:
            task_id -= 1 << 128
        rows.append((ring.start[slot], ring.end[slot], name, task_id, _KINDS[ring.kind[slot]], ring.thread[slot],
                     ring.error[slot], ring.func[slot]))
    for call, ident in list(_running.values()):  # (list(): one step, other threads may add and remove)
        started = call.started
        if started:
            rows.append((started, 0, call.span or call.name, call.task_id, TASK if call.is_task else ACTOR_CALL,
                         ident, None, call.func))
    for call, arrived in list(_queued.values()):
        rows.append((arrived, 0, call.span or call.name, call.task_id, ACTOR_CALL, QUEUED, None, call.func))
    if not rows:
        return [], {}
    names = {t.ident: t.name for t in threading.enumerate()}
    return rows, {ident: names.get(ident, f"thread {ident}") for ident in {row[5] for row in rows} if ident != QUEUED}


def clear() -> None:
    """Forget what ran (a new session starts in this process, or a forked one)."""
    global _ring
    _ring = None
    _running.clear()
    _queued.clear()


# A process forked from this one (a zygote, a worker) has run none of these calls.
os.register_at_fork(after_in_child=clear)

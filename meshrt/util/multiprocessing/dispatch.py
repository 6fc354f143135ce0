"""The pool's dispatcher: one thread that hands chunks of work to the worker actors.

Everything the pool decides happens on this thread, in the order events arrive (a job
submitted, a chunk finished, close, terminate), so no lock guards its state.

How many chunks a worker holds at once adapts to how long its chunks take: enough to
keep about ``_QUEUED_S`` of work queued in its process (tiny chunks: up to
``_MOST_IN_FLIGHT``, so it never waits for the next one to arrive), down to one for
long ones (so at the end no worker sits idle while another still holds several: the
standard library's workers take one task at a time from a shared queue, for the same
reason). Chunks go out one per worker in turn. Jobs are served first come first served; a lazy job (imap) reads its input only as
workers free up. A worker that died fails the chunks it held (their results raise
ActorDiedError) and is replaced; one that ran ``maxtasksperchild`` chunks is replaced
once it has finished them.
"""

from __future__ import annotations

import collections
import itertools
import logging
import queue
import threading
import time
from functools import partial
from typing import Any

from ... import exceptions
from ..._private import state, toplevel

log = logging.getLogger("meshrt")

_QUEUED_S = 0.01
_MOST_IN_FLIGHT = 32
_FIRST_IN_FLIGHT = 2  # (before a worker has finished anything)


class PoolTerminated(RuntimeError):
    """The pool was terminated before this work finished."""


class Job:
    """One call's work: chunks of (func, items, mode), and the sink their results go to."""

    def __init__(self, func, mode: str, chunks, sink) -> None:
        self.func = func
        self.mode = mode  # "one": func(x); "star": func(*x); "apply": func(*args, **kwargs)
        self._chunks = enumerate(chunks)
        self.sink = sink
        self.sent = 0

    def next_chunk(self) -> tuple[int, list] | None:
        """The next (index, items), or None once the input is used up (the sink is told
        how many there were). Raises what iterating the caller's input raised."""
        for index, items in self._chunks:
            self.sent += 1
            return index, items
        self.sink.set_total(self.sent)
        return None


class _Worker:
    __slots__ = ("actor", "in_flight", "sent", "retiring", "depth", "seconds", "last_done")

    def __init__(self, actor) -> None:
        self.actor = actor
        self.in_flight = 0
        self.sent = 0
        self.retiring = False
        self.depth = _FIRST_IN_FLIGHT  # chunks it may hold at once
        self.seconds: float | None = None  # how long one of its chunks takes (a moving average)
        self.last_done = 0.0

    def finished_one(self, sent_at: float) -> None:
        """A chunk came back: update how long chunks take here, and the depth that keeps
        about _QUEUED_S of work queued. Busy since before (in_flight left), the time
        since its last chunk came back is one chunk's run; otherwise the round trip."""
        now = time.monotonic()
        took = now - (max(sent_at, self.last_done) if self.in_flight else sent_at)
        self.last_done = now
        self.seconds = took if self.seconds is None else 0.7 * self.seconds + 0.3 * took
        self.depth = max(1, min(_MOST_IN_FLIGHT, int(_QUEUED_S / max(self.seconds, 1e-6)) + 1))


class Dispatcher:
    def __init__(self, start_worker, processes: int, maxtasksperchild: int | None) -> None:
        self._start_worker = start_worker
        self._maxtasks = maxtasksperchild
        self.workers = [_Worker(start_worker()) for _ in range(processes)]
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._jobs: collections.deque = collections.deque()  # jobs with input left
        self._running: dict[int, tuple] = {}  # chunk id -> (job, index, worker, actor)
        self._ids = itertools.count()
        self._closing = False
        self.finished = threading.Event()
        self._thread = threading.Thread(target=self._run, name="meshrt-pool", daemon=True)
        self._thread.start()

    # -- from the pool's callers (any thread) ---------------------------------------------------

    def submit(self, job: Job) -> None:
        self._events.put(("job", job))

    def close(self) -> None:
        self._events.put(("close",))

    def terminate(self) -> None:
        self._events.put(("terminate",))

    def join(self, timeout: float | None = None) -> bool:
        return self.finished.wait(timeout)

    # -- the dispatcher thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                event = self._events.get()
                kind = event[0]
                if kind == "job":
                    self._jobs.append(event[1])
                elif kind == "done":
                    self._done(*event[1:])
                elif kind == "close":
                    self._closing = True
                elif kind == "terminate":
                    self._terminate()
                    return
                self._dispatch()
                if self._closing and not self._jobs and not self._running:
                    self._stop_workers()
                    return
        except BaseException:  # noqa: BLE001 - never leave callers waiting on a dead dispatcher
            log.exception("meshrt: the Pool's dispatcher failed; its outstanding work fails")
            self._terminate()
        finally:
            self.finished.set()

    def _dispatch(self) -> None:
        sent = True
        while sent:  # (one chunk per worker in turn)
            sent = False
            for worker in self.workers:
                if worker.in_flight < worker.depth and not worker.retiring:
                    chunk = self._next_chunk()
                    if chunk is None:
                        return
                    self._send(worker, *chunk)
                    sent = True

    def _next_chunk(self) -> tuple[Job, int, list] | None:
        while self._jobs:
            job = self._jobs[0]
            try:
                chunk = job.next_chunk()
            except Exception as err:  # noqa: BLE001 - the caller's input raised: that job fails
                self._jobs.popleft()
                job.sink.chunk_failed(job.sent, err)
                job.sink.set_total(job.sent + 1)
                continue
            if chunk is None:
                self._jobs.popleft()
                continue
            return (job, *chunk)
        return None

    def _send(self, worker: _Worker, job: Job, index: int, items: list) -> None:
        chunk_id = next(self._ids)
        actor = worker.actor
        try:
            ref = actor.run.remote(job.func, items, job.mode)
        except Exception as err:  # noqa: BLE001 - arguments that cannot be sent: this chunk fails
            job.sink.chunk_failed(index, err)
            return
        worker.in_flight += 1
        worker.sent += 1
        if self._maxtasks is not None and worker.sent >= self._maxtasks:
            worker.retiring = True
        self._running[chunk_id] = (job, index, worker, actor, time.monotonic())
        ref.future().add_done_callback(partial(self._arrived, chunk_id))

    def _arrived(self, chunk_id: int, future) -> None:  # (meshrt's loop thread: hand over)
        self._events.put(("done", chunk_id, future))

    def _done(self, chunk_id: int, future) -> None:
        entry = self._running.pop(chunk_id, None)
        if entry is None:
            return  # (terminated meanwhile: its job was failed already)
        job, index, worker, actor, sent_at = entry
        if worker.actor is actor:
            worker.in_flight -= 1
            worker.finished_one(sent_at)
        try:
            job.sink.chunk_done(index, future.result())
        except exceptions.ActorDiedError as err:
            job.sink.chunk_failed(index, err)
            if worker.actor is actor:  # (its other chunks fail too, and find it replaced)
                self._replace(worker, kill=False)
            return
        except Exception as err:  # noqa: BLE001 - the function raised: that chunk's result raises it
            job.sink.chunk_failed(index, err)
        if worker.retiring and worker.in_flight == 0 and worker.actor is actor:
            self._replace(worker, kill=True)

    def _replace(self, worker: _Worker, kill: bool) -> None:
        old = worker.actor
        if kill:
            _kill(old)
        worker.in_flight = worker.sent = 0
        worker.retiring = False
        if state.core_or_none() is None:
            raise RuntimeError("meshrt was shut down under the pool")  # (not started again by a new actor)
        worker.actor = self._start_worker()  # (closing too: the work left still needs it)

    def _stop_workers(self) -> None:
        for worker in self.workers:
            if worker.actor is not None:
                _kill(worker.actor)
                worker.actor = None

    def _terminate(self) -> None:
        self._closing = True
        error = PoolTerminated("the pool was terminated (terminate(), or its with-block ended) before this "
                               "work finished")
        for job, index, *_rest in self._running.values():
            job.sink.chunk_failed(index, error)
        self._running.clear()
        for job in self._jobs:
            job.sink.chunk_failed(job.sent, error)
            job.sink.set_total(job.sent + 1)
        self._jobs.clear()
        while True:  # (jobs submitted after terminate: failed, never left waiting)
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                break
            if event[0] == "job":
                event[1].sink.chunk_failed(0, error)
                event[1].sink.set_total(1)
        self._stop_workers()


def _kill(actor: Any) -> None:
    if state.core_or_none() is None:
        return  # (shut down: the actor went with the runtime; killing it would start a new one)
    try:
        toplevel.kill(actor)
    except Exception:  # noqa: BLE001 - gone already (or the runtime is shutting down)
        pass

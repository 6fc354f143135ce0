"""The pool's dispatcher: one thread that hands chunks of work to the worker actors.

Everything the pool decides happens on this thread, in the order events arrive (a job
submitted, a chunk finished, close, terminate), so no lock guards its state.

How much goes out at once follows how long each function's chunks take (pace.py):
several tiny chunks to a call, and as many calls in flight per worker as keep it busy
without piling work on one worker at the end. Chunks go out one call per worker in
turn. Jobs are served first come first served; a lazy job (imap) reads its input only as
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
from multiprocessing.pool import RemoteTraceback
from typing import Any

from ... import exceptions
from ..._private import state, toplevel
from ...objstore.serialization import Payload, error_from_payload
from .pace import Pace

log = logging.getLogger("meshrt")

_DEATH_WAIT_S = 10.0


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
    __slots__ = ("actor", "in_flight", "sent", "retiring", "last_done")

    def __init__(self, actor) -> None:
        self.actor = actor
        self.in_flight = 0  # calls sent and not back
        self.sent = 0  # chunks sent (for maxtasksperchild)
        self.retiring = False
        self.last_done = 0.0

    def finished_one(self, sent_at: float, chunks: int) -> float:
        """A call of ``chunks`` chunks came back: how long one of them ran. Busy since
        before (a call still in flight), the time since its last call came back is this
        one's run; otherwise its round trip."""
        now = time.monotonic()
        took = now - (max(sent_at, self.last_done) if self.in_flight else sent_at)
        self.last_done = now
        return took / chunks


class Dispatcher:
    def __init__(self, start_worker, processes: int, maxtasksperchild: int | None) -> None:
        self._start_worker = start_worker
        self._maxtasks = maxtasksperchild
        self.workers = [_Worker(start_worker()) for _ in range(processes)]
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._jobs: collections.deque = collections.deque()  # jobs with input left
        self._running: dict[int, tuple] = {}  # call id -> ([(job, index)], worker, actor, sent at)
        self._ahead: tuple | None = None  # the next chunk, taken from its job already: (job, index, items)
        self._pace = Pace()
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
                if state.core_or_none() is None:  # (a call now would start a new runtime)
                    self._terminate("meshrt was shut down (meshrt.shutdown()) before this work finished")
                    return
                self._dispatch()
                if self._closing and not self._jobs and not self._running and self._ahead is None:
                    self._stop_workers()
                    return
        except BaseException as err:  # noqa: BLE001 - never leave callers waiting on a dead dispatcher
            log.exception("meshrt: the Pool's dispatcher failed; its outstanding work fails")
            self._terminate(f"the pool's dispatcher failed ({err!r}) before this work finished")
        finally:
            self.finished.set()

    def _dispatch(self) -> None:
        sent = True
        while sent:  # (one call per worker in turn)
            sent = False
            for worker in self.workers:
                if worker.retiring:
                    continue
                ahead = self._peek()
                if ahead is None:
                    return
                func = ahead[0].func
                if worker.in_flight >= self._pace.calls_in_flight(func):
                    continue
                self._send(worker, self._take(func, self._chunks_per_call(worker, func)))
                sent = True

    def _chunks_per_call(self, worker: _Worker, func) -> int:
        n = self._pace.chunks_per_call(func)
        if self._maxtasks is not None:  # (a call never takes a worker past maxtasksperchild)
            n = min(n, self._maxtasks - worker.sent)
        return max(1, n)

    def _take(self, func, n: int) -> list:
        """Up to ``n`` chunks in a row of the same function (the first one at least)."""
        parts = []
        while len(parts) < n:
            ahead = self._peek()
            if ahead is None or ahead[0].func is not func:
                break
            parts.append(ahead)
            self._ahead = None
        return parts

    def _peek(self) -> tuple | None:
        """The next chunk to send, (job, index, items), taken from the first job with
        input left; None when there is none."""
        while self._ahead is None and self._jobs:
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
            self._ahead = (job, *chunk)
        return self._ahead

    def _send(self, worker: _Worker, parts: list) -> None:
        """One call to the worker carrying ``parts``: (job, index, items) chunks."""
        call_id = next(self._ids)
        actor = worker.actor
        try:
            ref = actor.run.remote([(job.func, job.mode, items) for job, _index, items in parts])
        except Exception as err:  # noqa: BLE001 - arguments that cannot be sent: these chunks fail
            if len(parts) > 1:  # (one of them, maybe: each alone says which)
                for part in parts:
                    self._send(worker, [part])
                return
            job, index, _items = parts[0]
            job.sink.chunk_failed(index, err)
            return
        worker.in_flight += 1
        worker.sent += len(parts)
        if self._maxtasks is not None and worker.sent >= self._maxtasks:
            worker.retiring = True
        self._running[call_id] = ([(job, index) for job, index, _items in parts], worker, actor, time.monotonic())
        ref.future().add_done_callback(partial(self._arrived, call_id))

    def _arrived(self, call_id: int, future) -> None:  # (meshrt's loop thread: hand over)
        self._events.put(("done", call_id, future))

    def _done(self, call_id: int, future) -> None:
        entry = self._running.pop(call_id, None)
        if entry is None:
            return  # (terminated meanwhile: its jobs were failed already)
        parts, worker, actor, sent_at = entry
        if worker.actor is actor:
            worker.in_flight -= 1
            self._pace.observed(parts[0][0].func, worker.finished_one(sent_at, len(parts)))
        try:
            outcomes = future.result()
        except exceptions.RayActorError as err:
            for job, index in parts:
                job.sink.chunk_failed(index, err)
            if worker.actor is actor:  # (its other calls fail too, and find it replaced)
                self._replace(worker, kill=False)
            return
        except Exception as err:  # noqa: BLE001 - the call itself failed: each of its chunks says so
            outcomes = [(False, err)] * len(parts)
        for (job, index), (ok, value) in zip(parts, outcomes, strict=True):
            if ok:
                job.sink.chunk_done(index, value)
            else:
                job.sink.chunk_failed(index, value if isinstance(value, BaseException) else _error(value))
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
        """Kill the workers and wait (a while) until their deaths are seen, so that the
        processes are gone once close()+join() or terminate() return, as in multiprocessing."""
        actors = [worker.actor for worker in self.workers if worker.actor is not None]
        for worker in self.workers:
            worker.actor = None
        if state.core_or_none() is None:
            return  # (shut down: they went with the runtime; a call now would start a new one)
        probes = []
        for actor in actors:
            _kill(actor)
            try:
                probes.append(actor.ready.remote())  # (fails once its death is known here)
            except Exception:  # noqa: BLE001 - the runtime is gone: so is the actor
                pass
        if probes:
            try:
                toplevel.wait(probes, num_returns=len(probes), timeout=_DEATH_WAIT_S)
            except Exception:  # noqa: BLE001 - shutting down meanwhile
                pass

    def _terminate(self, why: str = "the pool was terminated (terminate(), or its with-block ended) before "
                                      "this work finished") -> None:
        self._closing = True
        error = PoolTerminated(why)
        for parts, *_rest in self._running.values():
            for job, index in parts:
                job.sink.chunk_failed(index, error)
        self._running.clear()
        if self._ahead is not None:
            job, index, _items = self._ahead
            job.sink.chunk_failed(index, error)
            self._ahead = None
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


def _error(record: bytes) -> BaseException:
    """The exception a chunk raised in its worker, itself, as the standard library's
    Pool raises it (and Ray's): its remote traceback is its ``__cause__``, a
    ``multiprocessing.pool.RemoteTraceback``. One that could not travel whole stays
    meshrt's TaskError, an instance of its class all the same."""
    err = error_from_payload(Payload(record, is_error=True))
    cause = getattr(err, "cause", None)
    if not isinstance(cause, BaseException):
        return err
    cause.__cause__ = RemoteTraceback(f'\n"""\n{err.traceback_str}"""')
    return cause


def _kill(actor: Any) -> None:
    if state.core_or_none() is None:
        return  # (shut down: the actor went with the runtime; killing it would start a new one)
    try:
        toplevel.kill(actor)
    except Exception:  # noqa: BLE001 - gone already (or the runtime is shutting down)
        pass

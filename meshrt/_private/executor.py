"""Running user code inside a worker.

The core loop (a daemon thread) does the I/O; user code never runs on it. Where user
code runs:

- pool tasks and plain actors: the main thread, one call at a time, in arrival order.
  Being the main thread, a running call can be interrupted by a signal, which is how
  ``cancel()`` stops a task blocked in ``time.sleep`` or C code (a method running on
  another thread runs on, but its caller hears it was cancelled). A plain actor's main
  thread also reads a direct lane of its own (direct_lanes.py), so a call from the
  driver on its host wakes it without a turn of the core loop;
- actors with ``max_concurrency > 1``: a thread pool of that size;
- async actors (any ``async def`` method): an asyncio loop on the main thread, with
  ``max_concurrency`` coroutines at once. Their plain ``def`` methods run on the loop
  too, as in Ray, so they may touch the loop's objects (set an ``asyncio.Event``, put
  to an ``asyncio.Queue``) and never race an async method between its ``await``s. A
  mesh's process (Monarch's endpoints) and the driver's own actors run plain
  endpoints on a helper thread per actor instead, so one may block (lanes.py).

Results are serialized on the executing thread. A plain reply (no refs, no store blocks)
is written to the caller's connection from that thread (``reply_now``); anything else is
handed to the core loop, which settles refs and pins first.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import exceptions as exc
from ..objstore.serialization import deserialize, error_payload, loads_code, system_error_payload
from . import (
    actor_hooks,
    call_payloads,
    call_record,
    call_streams,
    context,
    ids,
    lanes,
    runtime_env,
)
from . import args as argpack
from . import debug_sessions as debugging
from . import messages as m
from .call import Call
from .concurrency_groups import Groups
from .deferred import Deferred
from .helper_thread import HelperThread
from .helper_turns import HelperTurns
from .inbox import Inbox
from .portal import new_loop
from .running_calls import RunningCalls

_CANCEL_SIGNAL = signal.SIGUSR1
_REPLIES_AT_ONCE = 64  # (a long queue of calls: the caller gets replies on the way)
_QUICK_NS = 1_000_000  # a method whose last run took less may run while replies wait
_SLOW = 1 << 62
_GRACEFUL_ENDS = ("__ray_terminate__", "__meshrt_release__")  # (once the calls running have ended)


class TaskInterrupted(KeyboardInterrupt):
    """Raised inside a running call that ``cancel()`` stopped (a BaseException, so a broad
    ``except Exception`` in user code does not swallow it, as with Ray's KeyboardInterrupt)."""


class ActorExit(SystemExit):
    """Raised by ``exit_actor()``: the actor finishes the current call and exits."""


class Executor:
    def __init__(self, core) -> None:
        self.core = core
        self.queue = Inbox()  # the main thread's work
        self.main_lane: lanes.Lane | None = None  # a plain actor's direct lane to its main thread
        self.main_ident = threading.main_thread().ident
        self.loop_ident = self.main_ident  # the thread an async actor's loop runs on
        self.running: int | None = None  # task id running on the main thread
        self.cancel_requested: set[int] = set()
        self.interrupted: set[int] = set()  # running calls a cancel interrupted (until they end)
        self.code: dict[int, Any] = {}
        self.instance: Any = None
        self.actor_spec: m.ActorSpec | None = None
        self.pool: ThreadPoolExecutor | HelperThread | None = None
        self.user_loop: asyncio.AbstractEventLoop | None = None
        self.async_tasks: dict[int, asyncio.Task] = {}
        self.semaphore: asyncio.Semaphore | None = None
        self._async_inbox: list = []
        self._async_wake = False
        self._replies: list | None = None  # replies held to go together (_send_replies)
        self._quick: dict[str, int] = {}  # a plain actor's method -> ns its last run took
        self._kinds: dict[str, str] = {}  # method name -> "async", "sync" or "other" (kind_of)
        self.lanes: lanes.Lanes | None = None  # a mesh's (or the driver's) actors' helper threads (lanes.py)
        self.groups: Groups | None = None  # Ray's concurrency groups, when the actor has some
        self.turns = HelperTurns()  # a mesh actor's async calls waiting for their lane's turn
        self.exiting = False
        self.deserialize_args = deserialize  # (the driver's mesh actors own theirs: mesh/proc_host.py)
        self.running_calls = RunningCalls()  # (a concurrent actor's: its graceful end waits for them)

    # -- main thread -----------------------------------------------------------------------

    def run_forever(self) -> None:
        signal.signal(_CANCEL_SIGNAL, self._on_cancel_signal)
        while True:
            item = self.queue.next()
            if item is None:
                return
            if type(item) is Call:
                self._run_queued(item)
                if item.last:  # max_calls: what was queued behind it is the controller's again
                    self.take_unstarted()
                    self.core.io.post(self.core._leave, 0)
                    threading.Event().wait()  # (the core loop ends the process once the reply is out)
            else:
                if self._replies is not None:
                    self._send_replies()  # (not held across work of another kind)
                item()
            if self.user_loop is not None:  # became an async actor: the loop takes over
                self.user_loop.run_forever()
                return

    def _run_queued(self, call: Call) -> None:
        """Main thread: a call from the queue. A plain actor with more calls queued holds
        their replies to send together (``_send_replies``), but never across a call that
        may take long (its method's last run did, or it has none yet) or that blocks in
        get() (note_blocking): a caller may wait for one of them before it lets that
        call go on."""
        if self._replies is not None and self._quick.get(call.method, _SLOW) >= _QUICK_NS:
            self._send_replies()
        if self._replies is None and not call.is_task and self.queue.waiting():
            self._replies = []
        started = time.perf_counter_ns()
        self.run_call(call)
        if not call.is_task:
            self._quick[call.method] = time.perf_counter_ns() - started
        if self._replies is not None and (len(self._replies) >= _REPLIES_AT_ONCE or not self.queue.waiting()):
            self._send_replies()

    def _on_cancel_signal(self, signum, frame) -> None:
        running = self.running
        if running is not None and running in self.cancel_requested:
            self.cancel_requested.discard(running)
            self.interrupted.add(running)  # (is_canceled() says so until the call ends)
            raise TaskInterrupted()

    def load(self, code_id: int) -> Any:
        obj = self.code.get(code_id)
        if obj is None:
            obj = self.code[code_id] = loads_code(self.core.code_blobs[code_id])
        return obj

    # -- submitting work (core loop) ----------------------------------------------------------

    def use_helper(self, helper: HelperThread, name: str) -> None:
        """The helper thread of a mesh's process (or the driver's actors): a lane per actor (lanes.py)."""
        self.pool = helper
        self.lanes = lanes.Lanes(helper, name)
        self.lanes.on_new_lane = getattr(self.core, "offer_direct_lane", None)

    def submit(self, call: Call) -> None:
        if self.user_loop is not None:
            target, lane = lanes.split(call.method)
            if self._runs_on_helper(target):
                # A mesh actor's plain endpoint: straight to its lane's helper thread
                # (one hop, not two through the loop), in arrival order like every call.
                self.lanes.post(lane, self._run_on_helper, call)
                return
            there = self.groups.loop_of(call) if self.groups else None
            if there is not None:  # (a named group's own loop, as Ray's: not held up by the actor's)
                there.loop.call_soon_threadsafe(self._start_async, call)
                return
            self._async_inbox.append(call)
            if not self._async_wake:
                self._async_wake = True
                self.user_loop.call_soon_threadsafe(self._drain_async)
        elif self.pool is not None:
            pool = self.groups.pool(call, self.pool) if self.groups is not None else self.pool
            pool.submit(self._run_counted, call)
        else:
            self.queue.put(call)

    def run_direct(self, call: Call, lane: lanes.Lane) -> bool:
        """On ``lane``'s thread: run a call from its own socket (direct_lanes.py; the
        sender chose one with nothing to settle first). False: not this lane's to run."""
        target, key = lanes.split(call.method)
        if lane is self.main_lane:  # (a plain actor's call: on the main thread, as from the queue)
            if key or self.pool is not None or self.user_loop is not None:
                return False
            self.run_call(call)
            return True
        if key != lane.key or self.user_loop is None or not self._runs_on_helper(target):
            return False
        self.lanes.count_in(lane)
        self._run_on_helper(call, lane)
        return True

    def _run_on_helper(self, call: Call, lane: lanes.Lane) -> None:
        try:
            self.run_call(call)
        finally:
            lane.done += 1  # only this thread writes it

    def _run_counted(self, call: Call) -> None:
        """A threaded actor's call, on a thread of its pool (running_calls.py)."""
        self.running_calls.run(lanes.split(call.method)[0] in _GRACEFUL_ENDS, self.run_call, call)

    def helper_busy(self, lane: str = "") -> bool:
        """Plain-method calls for ``lane`` that arrived before now have not all finished."""
        return self.lanes is not None and self.lanes.route(lane).busy()

    def note_blocking(self, entries: list) -> None:
        """Any thread, about to block in get() on these calls. From a lane's thread:
        those of them waiting for that lane's turn (``helper_turn``) start now, since
        the lane cannot finish first (a plain endpoint waiting on an async endpoint of
        its own actor)."""
        if self._replies and threading.get_ident() == self.loop_ident:  # (a plain actor's main thread,
            self._send_replies()  # an async one's loop: what it waits for may wait for one of those first)
        lane = self.lanes.current() if self.lanes is not None else None
        if lane is None:
            return
        self.turns.lane_blocks(lane, frozenset(ids.task_of(e.id) for e in entries), self.user_loop)

    async def helper_turn(self, task_id: int, lane_key: str = "") -> None:
        """Loop: wait until call ``task_id`` may run after its lane's plain calls (helper_turns.py)."""
        await self.turns.wait(self.lanes, lane_key, task_id, self.user_loop)

    def kind_of(self, method: str) -> str:
        """What the actor's class defines under ``method``, remembered: "async" (an
        ``async def`` or async generator), "sync" (a plain function) or "other" (none,
        or a descriptor such as a classmethod: the resolved callable decides)."""
        kind = self._kinds.get(method)
        if kind is None:
            fn = getattr(type(self.instance), method, None)
            if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
                kind = "async"
            else:
                kind = "sync" if fn is not None and inspect.isfunction(fn) else "other"
            self._kinds[method] = kind
        return kind

    def _runs_on_helper(self, method: str) -> bool:
        return self.lanes is not None and self.kind_of(method) == "sync"

    def runs_after_me(self, actor_id: int, method: str, group: str | None = None) -> bool:
        """Whether a call to ``method`` of ``actor_id`` (in concurrency ``group``, where
        the call chose one) can only start once the calling thread of this actor is free
        again (so blocking on it here never ends)."""
        if self.actor_spec is None or actor_id != self.actor_spec.actor_id:
            return False
        me = threading.get_ident()
        if self.user_loop is not None:  # an async actor: a mesh's plain endpoints on the helper threads
            target, lane_key = lanes.split(method)
            on_helper = self._runs_on_helper(target)
            lane = self.lanes.current() if self.lanes is not None else None
            if lane is not None:
                if target in getattr(type(self.instance), "__meshrt_waits_for_lanes__", ()):
                    return True  # (it waits for every lane, this one too)
                return on_helper and self.lanes.route(lane_key) is lane
            loop = self.groups.thread_of(target, self.loop_ident, group) if self.groups else self.loop_ident
            return me == loop and not on_helper  # (blocking the loop it runs on)
        return self.pool is None and me == self.main_ident  # one call at a time

    def take_unstarted(self) -> list[Call]:
        """Remove the pool tasks still queued here (to hand them back; any thread)."""
        return self.queue.take(lambda item: type(item) is Call and item.is_task)

    def cancel(self, task_id: int) -> None:
        """Core loop: stop a queued or running call (a no-op once it has finished)."""
        self.cancel_requested.add(task_id)
        task = self.async_tasks.get(task_id)
        if task is not None and self.user_loop is not None:
            task.get_loop().call_soon_threadsafe(task.cancel)  # (the actor's loop, or its group's)
        elif self.running == task_id:
            signal.pthread_kill(self.main_ident, _CANCEL_SIGNAL)

    # -- running one call (any executor thread) -------------------------------------------------

    def _resolve_target(self, call: Call):
        if call.is_task:
            return self.load(call.spec.code_id)
        method = lanes.split(call.method)[0]
        if method == "__ray_ready__":
            return lambda: True
        if method == "__ray_call__":
            return lambda fn, *a, **kw: fn(self.instance, *a, **kw)
        if method in _GRACEFUL_ENDS:
            return actor_hooks.terminate_fn(method, self.actor_spec)
        return getattr(self.instance, method)

    def run_call(self, call: Call) -> None:
        env = call.spec.runtime_env if call.is_task else None
        if not env and runtime_env.setup_error is None:
            self._run_call(call)
            return
        try:
            if runtime_env.setup_error is not None:
                raise runtime_env.setup_error
            with runtime_env.around_task(self.core, env):
                self._run_call(call)
        except exc.RuntimeEnvSetupError as err:  # (meshrt's, as Ray raises it: not the user's code's error;
            self._failed(call, err.with_traceback(None), plain=True)  # the same one each time: no traceback kept)

    def _run_call(self, call: Call) -> None:
        if call.task_id in self.cancel_requested:
            self.cancel_requested.discard(call.task_id)
            self._finish(call, self._cancelled(call))
            return
        on_main = threading.get_ident() == self.main_ident
        call_record.begin(call)
        ctx = context.enter(call, self.core, call.is_task)
        try:
            fn = self._resolve_target(call)
            args, kwargs = argpack.unpack(call_payloads.arguments(call), call.deps, self.deserialize_args)
            if on_main:
                self.running = call.task_id
            try:
                if on_main and call.task_id in self.cancel_requested:  # (cancelled since the check above:
                    self.cancel_requested.discard(call.task_id)  # no signal came, running was not set yet)
                    raise TaskInterrupted()
                result = fn(*args, **kwargs)
                if call.num_returns == -1:
                    call_streams.stream_sync(self.core, call, result, TaskInterrupted)
                    return
            finally:
                self.running = None
            del args, kwargs
            if isinstance(result, Deferred):
                result.then(lambda ok, value: self._settled(call, ok, value))
                return
            self._finish(call, call_payloads.pack_results(self.core, call, result))
        except TaskInterrupted:
            self._finish(call, self._cancelled(call))
        except ActorExit as stop:
            fn = stop.__traceback__ = None  # (only the executor holds the instance now: its __del__ runs)
            self._exit_actor(str(stop.code) if stop.code else "exit_actor() was called")
        except SystemExit as stop:
            fn = None
            self._system_exit(call, stop)
        except BaseException as err:  # noqa: BLE001 - user errors travel to the caller
            self._failed(call, err)
        finally:
            context.leave(ctx)
            self.interrupted.discard(call.task_id)
            call_record.note_call(call)

    def _settled(self, call: Call, ok: bool, value: Any) -> None:
        """A Deferred a method returned has settled (on the thread that settled it)."""
        try:
            if not ok:
                raise value
            self._finish(call, call_payloads.pack_results(self.core, call, value))
        except BaseException as err:  # noqa: BLE001 - travels to the caller
            self._failed(call, err)

    def _cancelled(self, call: Call):
        payload = system_error_payload(exc.TaskCancelledError(f"{call.task_id:x}"))
        return (payload,) * max(call.num_returns, 0), None

    def _failed(self, call: Call, err: BaseException, plain: bool = False) -> None:
        """``plain``: meshrt's own error (a runtime_env that could not be set up), not the
        user's code's: the caller gets it as it is."""
        if isinstance(err, TypeError) and "cannot serialize" in str(err):
            name = self._call_name(call)
            err = TypeError(f"{name} returned a value that cannot be serialized: {err}")
            if name != call.name:
                err.__meshrt_where__ = name
        plain = plain or getattr(err, "__meshrt_plain__", False)
        payload = system_error_payload(err) if plain else None
        call_record.note_call(call, payload if plain else err)  # (an attempt that failed, retried or not)
        if call.spec is not None and call.spec.retry_exceptions and call_payloads.may_retry(call.spec, err):
            self.core.io.post(self.core.task_retry, call)
            return
        if payload is None:  # a mesh endpoint runs inside ProcHost.call, which names the endpoint for us
            debugging.failed(err)  # (MESHRT_DEBUG_POST_MORTEM: the call waits for `meshrt debug` first)
            where = getattr(err, "__meshrt_where__", None)
            payload = error_payload(err, where or call.name, os.getpid(), skip_frames=2 if where else 1)
        if call.num_returns == -1:
            self.core.io.post(self.core.stream_end, call, -1, payload)
            return
        self._finish(call, ((payload,) * max(call.num_returns, 1) if call.num_returns else (), None), error=payload)

    def _call_name(self, call: Call) -> str:
        """The call as its caller named it: a mesh endpoint by mesh, endpoint and point
        (ProcHost runs it), anything else by its own name."""
        if not _hosts_a_mesh(type(self.instance)) or lanes.split(call.method)[0] not in ("call", "call_sync"):
            return call.name
        try:
            args, kwargs = argpack.unpack(call.args, call.deps, deserialize)
            return self.instance.describe_call(*args, **kwargs)
        except Exception:  # noqa: BLE001 - (only names an error)
            return call.name

    def _finish(self, call: Call, packed, error=None) -> None:
        if debugging.active:  # (a debugger session this thread's call left open ends with it)
            debugging.call_ended(call.task_id)
        if not call.is_task and call.task_id in self.cancel_requested:  # (cancelled while it ran: see above)
            self.cancel_requested.discard(call.task_id)
            packed, error = self._cancelled(call), None
        results, held = packed
        call_record.note_call(call, error, results)  # (before the reply: the timeline finds it once answered)
        if call.num_returns == 1:
            batch = self._replies
            if batch is not None and threading.get_ident() == self.loop_ident:
                batch.append((call, results, held, error))  # (sent with the others: _send_replies)
                return
            try:  # reply_now raises only before writing anything: the loop then sends it
                if self.core.reply_now(call, results, held):
                    return
            except Exception:  # noqa: BLE001
                pass
        self.core.io.post(self.core.call_finished, call, results, held, error)

    def _send_replies(self) -> None:
        """The replies of calls that arrived together leave in one write per caller: on
        an async actor's loop, once all took their first step; on a plain actor's main
        thread, once it has run those queued (or many of them)."""
        if threading.get_ident() != self.loop_ident:
            return  # (a concurrency group's loop: its replies were not held)
        batch, self._replies = self._replies, None
        if not batch:  # (sent already: the actor is exiting)
            return
        try:
            rest = self.core.reply_all(batch)
        except Exception:  # noqa: BLE001 - (raises only before writing: the loop sends them all)
            rest = batch
        for call, results, held, error in rest:
            self.core.io.post(self.core.call_finished, call, results, held, error)

    # -- actors ------------------------------------------------------------------------------

    def start_actor(self, spec: m.ActorSpec, incarnation: int) -> None:
        """Main thread: build the instance; then serve calls in the actor's mode."""
        self.actor_spec = spec
        context.set_actor(spec, self.core, incarnation)  # (get_runtime_context() in __init__, too)
        error = cls = None
        started = time.time_ns()
        try:
            if runtime_env.setup_error is not None:
                raise runtime_env.setup_error
            runtime_env.start_actor(self.core, spec.runtime_env)  # (before its class is loaded)
            cls = self.load(spec.code_id)
            args, kwargs = argpack.unpack(spec.args, spec.deps, deserialize)
            if spec.is_async:
                self.user_loop = new_loop()
                asyncio.set_event_loop(self.user_loop)
                self.semaphore = asyncio.Semaphore(spec.max_concurrency)
                if _hosts_a_mesh(cls):  # (Ray's async actors run plain methods on the loop)
                    self.use_helper(HelperThread("meshrt-sync-method"), "meshrt-sync")

                async def construct():
                    if inspect.iscoroutinefunction(getattr(cls, "__init__", None)):  # (Ray runs it)
                        instance = cls.__new__(cls)
                        await instance.__init__(*args, **kwargs)
                        return instance
                    return cls(*args, **kwargs)

                self.instance = self.user_loop.run_until_complete(construct())
            else:
                if spec.max_concurrency > 1 or spec.concurrency_groups:  # (groups: a threaded actor)
                    self.pool = ThreadPoolExecutor(spec.max_concurrency, thread_name_prefix="meshrt-actor")
                self.instance = cls(*args, **kwargs)
                if self.pool is None:
                    self._offer_main_lane()
            if spec.concurrency_groups:
                self.groups = Groups(spec.concurrency_groups, cls, spec.is_async)
        except BaseException as err:  # noqa: BLE001
            if cls is None and isinstance(err, exc.RuntimeEnvSetupError):  # (meshrt's, before the class loads)
                error = system_error_payload(err.with_traceback(None))
            else:
                error = error_payload(err, f"{spec.class_name}.__init__", os.getpid(), skip_frames=1)
            self.user_loop = None
        call_record.note_creation(f"{spec.class_name}.__init__", spec.actor_id, started, error)
        label = actor_hooks.own_repr(self.instance) if error is None else None
        self.core.io.post(self.core.send_controller, m.ActorStarted(spec.actor_id, incarnation, error, label))

    def _offer_main_lane(self) -> None:
        """A plain actor runs every call on this thread: let the driver (or the host's
        agent) write calls straight to it (direct_lanes.py), as to a mesh actor's lane."""
        offer = getattr(self.core, "offer_direct_lane", None)
        if offer is not None and self.main_lane is None:
            self.main_lane = lanes.Lane(lanes.MAIN, self.queue)
            self.core.io.post(offer, self.main_lane)

    def _drain_async(self) -> None:
        self._async_wake = False
        inbox, self._async_inbox = self._async_inbox, []
        for call in inbox:
            self._start_async(call)
        if len(inbox) > 1 and self._replies is None:
            # A burst: the replies of calls done in their first step are held back until
            # all have taken it (this runs after them), then written together.
            self._replies = []
            self.user_loop.call_soon(self._send_replies)

    def _start_async(self, call: Call) -> None:
        """On the loop that runs the call (the actor's, or its concurrency group's)."""
        self.async_tasks[call.task_id] = asyncio.get_running_loop().create_task(self._run_async(call))

    async def _run_async(self, call: Call) -> None:
        try:
            if call.task_id in self.cancel_requested:
                self.cancel_requested.discard(call.task_id)
                self._finish(call, self._cancelled(call))
                return
            semaphore = self.groups.semaphore(call, self.semaphore) if self.groups else self.semaphore
            try:
                await semaphore.acquire()
            except asyncio.CancelledError:  # (cancelled while it waited for its turn: answered so)
                self.cancel_requested.discard(call.task_id)
                self._finish(call, self._cancelled(call))
                return
            target = lanes.split(call.method)[0]
            end = target in _GRACEFUL_ENDS
            if not self.running_calls.admit(end):  # (after the actor's end began: its caller hears it died)
                semaphore.release()
                return
            try:
                fn = self._resolve_target(call)
                loop = asyncio.get_running_loop()
                if end and not _hosts_a_mesh(type(self.instance)):
                    await loop.run_in_executor(None, self.running_calls.wait_idle)
                    self._send_replies()  # (the replies of those that just ended leave first)
                kind = self.kind_of(target)
                coro = self._run_coroutine(call, fn) if kind == "async" or (kind == "other" and (
                    inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn))) else None
                fn = None  # (only the call holds the method: the instance's __del__ can run as it ends)
                if coro is not None:
                    await coro
                elif self.pool is None:
                    self.run_call(call)  # a plain method of Ray's async actor: on its loop, as in Ray
                else:  # (a mesh's or the driver's: its helper thread)
                    await loop.run_in_executor(self.pool, self.run_call, call)
            finally:
                semaphore.release()
                if not end:
                    self.running_calls.done()
        finally:
            self.async_tasks.pop(call.task_id, None)

    async def _run_coroutine(self, call: Call, fn) -> None:
        call_record.begin(call)
        ctx = context.enter(call, self.core)
        try:
            args, kwargs = argpack.unpack(call_payloads.arguments(call), call.deps, self.deserialize_args, fetch=False)
            if call.deps:
                args, kwargs = await argpack.fetched_async(args, kwargs)
            if call.num_returns == -1:
                await call_streams.stream_async(self.core, call, fn(*args, **kwargs))
                return
            result = await fn(*args, **kwargs)
            del args, kwargs
            if isinstance(result, Deferred):
                result.then(lambda ok, value: self._settled(call, ok, value))
                return
            self._finish(call, call_payloads.pack_results(self.core, call, result))
        except asyncio.CancelledError:
            self._finish(call, self._cancelled(call))
        except ActorExit as stop:
            fn = stop.__traceback__ = None  # (as in _run_call)
            self._exit_actor(str(stop.code) if stop.code else "exit_actor() was called")
        except SystemExit as stop:
            fn = None
            self._system_exit(call, stop)
        except BaseException as err:  # noqa: BLE001
            self._failed(call, err)
        finally:
            context.leave(ctx)
            call_record.note_call(call)

    def _system_exit(self, call: Call, stop: SystemExit) -> None:
        """``sys.exit()`` in an actor method ends the actor, as in Ray (its callers get
        ActorDiedError saying so); in a task it fails the task with the SystemExit."""
        if call.is_task:
            self._failed(call, stop)
            return
        stop.__traceback__ = None  # (its frames hold the instance: see _run_call)
        self._exit_actor(f"{self._call_name(call)} called sys.exit({stop.code!r})")

    def _exit_actor(self, reason: str) -> None:
        if self.exiting:
            return
        if self._replies and threading.get_ident() == self.loop_ident:
            self._send_replies()  # (calls that finished before this one are answered)
        self.exiting = True  # (__ray_shutdown__ and atexit first)
        self.running_calls.admit(True)  # (no call starts after this: its caller hears that the actor died)
        actor_hooks.end_gracefully(self, lambda: self.core.io.post(self.core.exit_actor, reason))


def _hosts_a_mesh(cls: type) -> bool:
    """A mesh's process: its actors are Monarch's, and stop with the mesh."""
    from ..mesh.proc_host import ProcHost

    return isinstance(cls, type) and issubclass(cls, ProcHost)

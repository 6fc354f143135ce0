"""Actors that live in the driver's own process: ``this_proc()`` in the driver.

Monarch runs what is spawned on the controller's ``this_proc()`` inside the controller
itself, so such an actor shares the driver's memory (its model, its data, its
classes) and costs no process. Here it is an ordinary meshrt actor whose worker is
the driver (worker 0): the controller lists it as alive there, so calls from the
driver and from any worker reach it by the usual ActorCall, and its replies leave as
the usual TaskReturn. It runs the way an async actor runs in a worker (executor.py),
on threads of its own: an asyncio loop for ``async def`` methods and a helper thread
for plain ones, so user code never runs on the core loop or the user's main thread.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from .. import exceptions as exc
from ..objstore.serialization import system_error_payload
from . import ids, lanes
from . import messages as m
from .call import Call
from .executor import Executor
from .helper_thread import HelperThread
from .portal import new_loop

MAX_CONCURRENCY = 1000  # async endpoints in flight at once, as for a worker's ProcHost
STOP_GRACE_S = 2.0  # how long cancelled async endpoints get to unwind when their actor ends


class _Hosted:
    """One actor in the driver: its executor, and what the executor asks of its core
    (a worker's core answers for a worker's one actor; this answers for this one)."""

    lends_bytes = False  # (large bytes results go through the store instead)

    def __init__(self, actors: DriverActors, spec: m.ActorSpec) -> None:
        self.actors = actors
        self.core = actors.core
        self.io = self.core.io
        self.spec = spec
        self.gone_peers: set = set()
        self.executor = Executor(self)
        self.executor.actor_spec = spec
        self.thread: threading.Thread | None = None
        self.ended = False

    # -- the thread the actor runs on -------------------------------------------------------

    def serve(self, make, started: threading.Event, failed: list) -> None:
        ex = self.executor
        loop = ex.user_loop = new_loop()
        asyncio.set_event_loop(loop)
        ex.loop_ident = threading.get_ident()
        ex.semaphore = asyncio.Semaphore(MAX_CONCURRENCY)
        ex.use_helper(HelperThread(f"meshrt-driver-sync-{self.spec.actor_id:x}"), "meshrt-driver-sync")

        async def construct():
            return make(ex)

        try:
            ex.instance = loop.run_until_complete(construct())
        except BaseException as err:  # noqa: BLE001 - handed to the thread that asked
            failed.append(err)
            started.set()
            self._close_loop()
            return
        started.set()
        try:
            loop.run_forever()
        finally:
            self._close_loop()

    def _close_loop(self) -> None:
        ex = self.executor
        if ex.lanes is not None:
            ex.lanes.shutdown()
        loop = ex.user_loop
        if loop is not None and not loop.is_closed():
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:  # (let them unwind: their `finally` blocks run)
                loop.run_until_complete(asyncio.wait(tasks, timeout=STOP_GRACE_S))
            loop.close()

    def stop(self) -> None:
        """Any thread: stop serving. Calls not started yet never start (their callers
        hear from the controller that the actor ended); a running plain call cannot be
        interrupted and finishes on its own."""
        if self.ended:
            return
        self.ended = True
        self.executor.exiting = True
        if self.executor.lanes is not None:
            self.executor.lanes.discard_queued()
        loop = self.executor.user_loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(loop.stop)
            except RuntimeError:  # closed meanwhile
                pass

    # -- what the executor calls on its core ----------------------------------------------------

    def placer(self, key: int, owner: int):
        return self.core.placer(key, owner)

    def same_host(self, peer: int) -> bool:
        return not self.core.remote_peer(peer)

    def reply_now(self, call: Call, results: tuple, result_held) -> bool:
        return False  # (every reply through the core loop: it settles refs and pins first)

    def reply_all(self, replies: list) -> list:
        return list(replies)  # (the same: reply_now)

    def call_finished(self, call: Call, results: tuple, result_held, error) -> None:  # (core loop)
        core = self.core
        core.children.pop(call.task_id, None)
        self.actors.calls.pop(call.task_id, None)
        call.held = None
        core.drain()
        # (sent also after the actor ended, when the caller has failed the call: it then
        # frees what the reply holds, such as a result's store block)
        borrowed = core._still_borrowed(call.arg_refs)
        for payload in results:
            core.account_outgoing(payload, call.dest)
        core.send_to(call.dest, m.TaskReturn(call.task_id, results, borrowed))

    def stream_item(self, call: Call, index: int, payload, held) -> None:
        self.core.account_outgoing(payload, call.dest)
        self.core.send_to(call.dest, m.StreamItem(call.task_id, index, payload))

    def stream_end(self, call: Call, count: int, error) -> None:
        self.core.send_to(call.dest, m.StreamEnd(call.task_id, count, error))
        self.call_finished(call, (), None, None)

    def task_retry(self, call: Call) -> None:  # (only pool tasks retry; never run here)
        raise AssertionError("a task reached an actor hosted in the driver")

    def exit_actor(self, reason: str) -> None:  # (core loop: the actor called exit_actor())
        self.actors.end(self.spec.actor_id, reason)


class DriverActors:
    """The actors hosted in the driver's process, and ``this_proc()``'s among them."""

    def __init__(self, core) -> None:
        self.core = core
        self.hosted: dict[int, _Hosted] = {}
        self._proc = None  # the handle this_proc() gives, once started
        self.calls: dict[int, _Hosted] = {}  # task id -> where that call runs (to cancel it)
        self._lock = threading.Lock()
        core.handlers[m.ActorCall] = self.on_actor_call

    def this_proc(self):
        """The ProcHost actor standing for the driver's own process (started once)."""
        with self._lock:
            proc = self._proc
            if proc is None or proc._actor_id not in self.hosted:
                from ..mesh.proc_host import ProcHost

                proc = self._proc = self.start(
                    ProcHost, lambda executor: ProcHost("driver", (), (), 0, {}, executor=executor))
            return proc

    def start(self, cls: type, make) -> Any:
        """Build ``make(executor)`` on a new actor thread of this process; returns the
        actor's handle once it is constructed (the constructor's error is raised here)."""
        from .api import ActorClass, ActorHandle

        actor_cls = ActorClass(cls, {"num_cpus": 0, "max_concurrency": MAX_CONCURRENCY})
        core = self.core
        actor_id = ids.new_task_id()
        spec = m.ActorSpec(actor_id, actor_cls.code_id, actor_cls._name, None, (), core.worker_id, 0, (),
                           0, MAX_CONCURRENCY, True, None, core.namespace(), True, actor_cls._meta_blob)
        hosted = _Hosted(self, spec)
        started = threading.Event()
        failed: list = []
        hosted.thread = threading.Thread(target=hosted.serve, args=(make, started, failed),
                                         name=f"meshrt-driver-actor-{actor_id:x}", daemon=True)
        hosted.thread.start()
        started.wait()
        if failed:
            raise failed[0]
        self.hosted[actor_id] = hosted
        core.io.post(core.controller.host_in_driver, spec)  # (before any call to it: FIFO)
        return ActorHandle(actor_id, actor_cls._meta, None, actor_cls._meta_blob)

    def instance(self, actor_id: int) -> Any:
        hosted = self.hosted.get(actor_id)
        return hosted.executor.instance if hosted is not None else None

    def loop_of(self, mesh_actor: Any):
        """The loop of the driver actor hosting ``mesh_actor`` (its async supervisor runs there)."""
        for hosted in list(self.hosted.values()):
            proc = hosted.executor.instance
            if any(h.instance is mesh_actor for h in list(getattr(proc, "actors", {}).values())):
                return hosted.executor.user_loop
        return None

    def on_actor_call(self, conn, msg: m.ActorCall) -> None:  # (core loop)
        core = self.core
        hosted = self.hosted.get(msg.actor_id)
        if hosted is None or hosted.ended:
            error = system_error_payload(exc.ActorDiedError(
                ids.to_hex(msg.actor_id), "ProcHost", "it lived in the driver's process and has ended"))
            if msg.num_returns == -1:
                core.send_to(conn.peer_id, m.StreamEnd(msg.task_id, 0, error))
            else:
                core.send_to(conn.peer_id, m.TaskReturn(msg.task_id, (error,) * max(msg.num_returns, 1), ()))
            return
        held, arg_refs = core._arrived(msg.args, msg.deps)
        call = Call(msg.task_id, f"{hosted.spec.class_name}.{lanes.split(msg.method)[0]}", msg.method, msg.args, msg.deps,
                    msg.num_returns, conn.peer_id, held, arg_refs)
        self.calls[msg.task_id] = hosted
        hosted.executor.submit(call)

    def cancel(self, task_id: int, recursive: bool) -> None:
        """Core loop: a CancelTask for a call to an actor here (the controller got it, as
        worker 0, and found no task by that id)."""
        hosted = self.calls.get(task_id)
        if hosted is not None:
            hosted.executor.cancel(task_id)
        if recursive:
            self.core.cancel_children(task_id)

    def refuse_waiting_on_itself(self, entries: list) -> None:
        if not self.hosted:
            return  # (the usual case: a get() of the driver's own code)
        from .worker_core import refuse_if_waiting_on_itself

        for hosted in list(self.hosted.values()):
            refuse_if_waiting_on_itself(self.core, hosted.executor, entries)
            hosted.executor.note_blocking(entries)

    def end(self, actor_id: int, reason: str) -> None:
        """Core loop: an actor here ended (exit_actor(), a kill): it stops serving and
        the controller fails what was sent to it."""
        hosted = self.hosted.pop(actor_id, None)
        if hosted is not None:
            hosted.stop()
            self.core.controller.driver_actor_ended(actor_id, reason)

    def close(self) -> None:
        """meshrt.shutdown(): stop every actor thread here."""
        for hosted in list(self.hosted.values()):
            hosted.stop()
        for hosted in list(self.hosted.values()):  # (a helper thread busy in a plain call ends after it)
            if hosted.thread is not None and hosted.thread is not threading.current_thread():
                hosted.thread.join(STOP_GRACE_S + 3)
        self.hosted.clear()
        self.calls.clear()
        self._proc = None

"""The per-process runtime core, shared by the driver and every worker.

It owns this process's object table and the tasks it submitted, and speaks the
owner side of the protocol: results come back here, borrowers fetch from here,
reference counts are settled here. User threads call the public methods (submit,
put, get, wait ...); everything that touches sockets or counts runs on the core
loop (``self.io``), reached through the batched ``post``.

Subclasses say how to reach the controller and other processes: the driver hosts
the controller in-process (driver.py), a worker talks to it over a socket
(worker_core.py).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import os
import pickle
import time
from typing import Any

from .. import exceptions as exc
from ..objstore import InProcessStore
from ..objstore.serialization import (
    Payload,
    deserialize,
    error_from_payload,
    serialize,
    system_error_payload,
)
from ..objstore.table import KIND_ACTOR_HANDLE, ObjectEntry, ObjectTable
from . import args as argpack
from . import ids
from . import messages as m
from .portal import AsyncWaiter, LoopThread, Wakeup, bridge_for
from .context import current_call
from .refs import ObjectRef, ObjectRefGenerator
from .streams import Stream

log = logging.getLogger("meshrt")

DRAIN_INTERVAL_S = 0.05
_NONE_PAYLOAD, _ = serialize(None)


class PendingTask:
    """A task, actor call or actor creation this process submitted and still awaits."""

    __slots__ = (
        "task_id", "name", "entries", "stream", "pins", "deps", "waiting", "cancelled",
        "client", "method", "num_returns", "retries_left", "args", "then", "sent", "ready", "kind",
    )

    def __init__(self, task_id: int, name: str, args: Payload, deps: list, pins: list, num_returns: int):
        self.task_id = task_id
        self.name = name
        self.args = args
        self.deps = deps  # [(position, ObjectRef)]
        self.pins = pins
        self.num_returns = num_returns
        self.entries: list[ObjectEntry] = []
        self.stream: Stream | None = None
        self.waiting = 0
        self.cancelled = False
        self.client = None
        self.method = ""
        self.retries_left = 0
        self.then = None
        self.sent = False
        self.ready = False
        self.kind = "task"  # "task" | "call" | "create"


class Core:
    is_driver = False

    def __init__(self, worker_id: int, io: LoopThread, token: bytes) -> None:
        self.worker_id = worker_id
        self.io = io
        self.token = token
        self.table = ObjectTable(worker_id)
        self.store = InProcessStore()
        self.pending: dict[int, PendingTask] = {}
        self.streams: dict[int, Stream] = {}
        self.actor_clients: dict[int, Any] = {}
        self.code_defined: set[int] = set()
        self.children: dict[int, list[int]] = {}  # running call -> tasks it submitted
        self._release_batch: dict[int, list] = {}
        self._check: list[ObjectEntry] = []
        self._drain_timer: asyncio.TimerHandle | None = None
        self.handlers: dict[type, Any] = {
            m.TaskReturn: self.on_task_return,
            m.StreamItem: self.on_stream_item,
            m.StreamEnd: self.on_stream_end,
            m.FetchObject: self.on_fetch_object,
            m.ObjectValue: self.on_object_value,
            m.AddBorrower: self.on_add_borrower,
            m.ReleaseBorrows: self.on_release_borrows,
            m.PeerGone: self.on_peer_gone,
            m.ActorState: self.on_actor_state,
        }
        self.closed = False

    # ===================================================================================
    # routing (subclasses)

    def send_controller(self, msg) -> None:
        raise NotImplementedError

    def send_to(self, peer: int, msg) -> None:
        """Send to another process by worker id (0 = the driver); loop thread only."""
        raise NotImplementedError

    async def request(self, method: str, *args) -> Any:
        """A control-plane call answered by the controller."""
        raise NotImplementedError

    def request_sync(self, method: str, *args, timeout: float | None = 60.0) -> Any:
        return self.io.run_sync(self.request(method, *args), timeout)

    def define_code(self, code_id: int, blob_fn) -> None:
        """Make sure the controller has this function/class before first use."""
        raise NotImplementedError

    def on_block(self, blocked: bool) -> None:
        """A user thread starts/stops waiting in get(); pool workers lend their CPU."""

    def start_timers(self) -> None:
        self._drain_timer = self.io.loop.call_later(DRAIN_INTERVAL_S, self._periodic_drain)

    def _periodic_drain(self) -> None:
        if self.closed:
            return
        if self.table.deltas or self._check:
            self.drain()
        self._drain_timer = self.io.loop.call_later(DRAIN_INTERVAL_S, self._periodic_drain)

    # ===================================================================================
    # user-thread API

    def put(self, value: Any) -> ObjectRef:
        if isinstance(value, ObjectRef):
            raise TypeError(
                "put() got an ObjectRef; pass the ref itself where it is needed "
                "(put of a ref is not supported, as in Ray)"
            )
        try:
            payload, held = serialize(value)
        except TypeError as err:
            raise TypeError(f"put(): {err}") from None
        oid = ids.new_put_id()
        entry = ObjectEntry(oid, self.worker_id)
        entry.payload = self.store.seal(oid, payload)
        entry.held = held or None
        self.table.entries[oid] = entry
        return ObjectRef(oid, self.worker_id, self.table.deltas)

    def submit_task(self, fn, args: tuple, kwargs: dict, opts) -> Any:
        self.define_code(fn.code_id, fn.code_blob)
        payload, deps, pins = argpack.pack(args, kwargs, f"{opts.name}.remote()")
        task_id = ids.new_task_id()
        pt = PendingTask(task_id, opts.name, payload, deps, pins, opts.num_returns)
        result = self._make_returns(pt, opts.num_returns)
        pt.retries_left = opts.max_retries

        def submit(pt=pt, opts=opts, fn=fn):
            spec = m.TaskSpec(
                task_id, fn.code_id, opts.name, pt.args, self._dep_payloads(pt), pt.num_returns,
                self.worker_id, self.address(), opts.resources, opts.max_retries,
                opts.retry_exceptions,
            )
            pt.sent = True
            self.send_controller(m.SubmitTask(spec))

        pt.then = submit
        self.pending[task_id] = pt
        self._note_child(task_id)
        self.io.post(self._start_pending, pt)
        return result

    def _note_child(self, task_id: int) -> None:
        parent = current_call()
        if parent is not None:
            self.children.setdefault(parent.task_id, []).append(task_id)

    def _make_returns(self, pt: PendingTask, num_returns: int) -> Any:
        me = self.worker_id
        deltas = self.table.deltas
        if num_returns == -1:
            pt.stream = self.open_stream(pt.task_id)
            return ObjectRefGenerator(pt.task_id, self)
        if num_returns == 0:
            return None
        refs = []
        for i in range(num_returns):
            oid = ids.object_id(pt.task_id, i + 1)
            pt.entries.append(self.table.owned(oid, pending=True))
            refs.append(ObjectRef(oid, me, deltas))
        return refs[0] if num_returns == 1 else refs

    def call_actor(self, handle, method: str, args: tuple, kwargs: dict, num_returns: int) -> Any:
        payload, deps, pins = argpack.pack(args, kwargs, f"{handle._class_name}.{method}.remote()")
        task_id = ids.new_task_id()
        pt = PendingTask(task_id, f"{handle._class_name}.{method}", payload, deps, pins, num_returns)
        pt.method = method
        pt.kind = "call"
        pt.retries_left = handle._max_task_retries
        result = self._make_returns(pt, num_returns)
        self.pending[task_id] = pt
        self._note_child(task_id)
        self.io.post(self._submit_actor_call, handle._actor_id, handle._class_name, pt)
        return result

    def get(self, refs: list, timeout: float | None) -> list:
        if self.io.in_loop():
            raise RuntimeError(
                "meshrt.get() was called from inside meshrt's event loop, where it would "
                "deadlock; use `await ref` there instead"
            )
        entries = self.table.entries
        found = []
        for ref in refs:
            entry = entries.get(ref._id)
            if entry is None:
                entry = self._entry_for_unknown(ref)
            found.append(entry)
        not_ready = [e for e in found if e.payload is None]
        if not_ready:
            self._wait_entries(not_ready, refs, timeout)
        return [self.value_of(e) for e in found]

    def _wait_entries(self, waiting: list, refs: list, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        self.on_block(True)
        try:
            for entry in waiting:
                while entry.payload is None:
                    if entry.owner != self.worker_id and not entry.fetching:
                        self.io.post(self._fetch, entry)
                    waker = Wakeup()
                    entry.add_waiter(waker)
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if (remaining is not None and remaining <= 0) or not waker.wait(remaining):
                        if entry.payload is not None:
                            break
                        missing = sum(1 for e in waiting if e.payload is None)
                        raise exc.GetTimeoutError(
                            f"get() timed out after {timeout} s: {missing} of {len(refs)} "
                            f"refs not ready (the first is ObjectRef({ids.to_hex(entry.id, 36)})); "
                            "raise timeout= or wait with meshrt.wait() first"
                        )
        finally:
            self.on_block(False)

    def value_of(self, entry: ObjectEntry) -> Any:
        payload = entry.payload
        if payload.is_error:
            raise error_from_payload(payload)
        return deserialize(payload)

    def _entry_for_unknown(self, ref: ObjectRef) -> ObjectEntry:
        if ref._owner == self.worker_id:
            entry = ObjectEntry(ref._id, ref._owner)
            entry.payload = system_error_payload(exc.ObjectLostError(
                ref.hex(), "this ref belongs to a runtime that was shut down, or its value was freed"))
            return entry
        return self.table.borrowed(ref._id, ref._owner)

    def await_ref(self, ref: ObjectRef):
        """The generator behind ``await ref``: no suspension when already resolved."""
        entry = self.table.entries.get(ref._id)
        if entry is None:
            entry = self._entry_for_unknown(ref)
        if entry.payload is None:
            loop = asyncio.get_running_loop()
            fut = loop.create_future()
            in_core = self.io.in_loop()
            if entry.owner != self.worker_id and not entry.fetching:
                if in_core:
                    self._fetch(entry)
                else:
                    self.io.post(self._fetch, entry)
            entry.add_waiter(AsyncWaiter(fut, None if in_core else bridge_for(loop)))
            yield from fut.__await__()
        return self.value_of(entry)

    def concurrent_future(self, ref: ObjectRef) -> concurrent.futures.Future:
        cf: concurrent.futures.Future = concurrent.futures.Future()
        entry = self.table.entries.get(ref._id) or self._entry_for_unknown(ref)

        class _Done:
            def fire(_self, e):
                if cf.done():
                    return
                try:
                    cf.set_result(self.value_of(e))
                except BaseException as err:  # noqa: BLE001 - handed to the future
                    cf.set_exception(err)

        if entry.owner != self.worker_id and not entry.fetching:
            self.io.post(self._fetch, entry)
        entry.add_waiter(_Done())
        return cf

    def wait(self, refs: list, num_returns: int, timeout: float | None) -> tuple[list, list]:
        entries = self.table.entries
        found = [entries.get(r._id) or self._entry_for_unknown(r) for r in refs]
        deadline = None if timeout is None else time.monotonic() + timeout

        def ready_count():
            return sum(1 for e in found if e.payload is not None)

        if ready_count() < num_returns and timeout != 0:
            if self.io.in_loop():
                raise RuntimeError("meshrt.wait() was called from inside meshrt's event loop")
            waker = Wakeup()
            for e in found:
                if e.payload is None:
                    if e.owner != self.worker_id and not e.fetching:
                        self.io.post(self._fetch, e)
                    e.add_waiter(waker)
            self.on_block(True)
            try:
                while ready_count() < num_returns:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        break
                    waker.wait(remaining)
            finally:
                self.on_block(False)
        ready, not_ready = [], []
        for ref, e in zip(refs, found):
            if e.payload is not None and len(ready) < num_returns:
                ready.append(ref)
            else:
                not_ready.append(ref)
        return ready, not_ready

    def cancel(self, task_id: int, force: bool, recursive: bool = True) -> None:
        pt = self.pending.get(task_id)
        if pt is None:
            return  # finished (or not ours): cancelling is a no-op, as in Ray
        if pt.kind == "call" and force:
            raise ValueError(
                "cancel(force=True) cannot be used on actor method calls; use "
                "meshrt.kill(actor) to stop the actor, or cancel without force"
            )
        self.io.post(self._cancel, pt, force, recursive)

    def create_actor(self, actor_cls, args: tuple, kwargs: dict, opts) -> Any:
        from .api import ActorHandle

        self.define_code(actor_cls.code_id, actor_cls.code_blob)
        payload, deps, pins = argpack.pack(args, kwargs, f"{actor_cls._name}.remote()")
        actor_id = ids.new_task_id()
        namespace = opts.namespace or self.namespace()
        if opts.name is not None:
            status, existing, meta_blob, _owner = self.request_sync(
                "register_actor_name", opts.name, namespace, actor_id, opts.get_if_exists,
                actor_cls._meta_blob)
            if status == "exists":
                return ActorHandle(existing, pickle.loads(meta_blob), None, meta_blob)
        handle_oid = ids.object_id(actor_id, 0)
        handle_ref = None
        if opts.name is None and not opts.detached:
            # Unnamed actors live while some handle to them does (Ray's rule).
            entry = ObjectEntry(handle_oid, self.worker_id, kind=KIND_ACTOR_HANDLE)
            entry.actor_id = actor_id
            self.table.entries[handle_oid] = entry
            handle_ref = ObjectRef(handle_oid, self.worker_id, self.table.deltas)
        pt = PendingTask(actor_id, actor_cls._name, payload, deps, pins, 0)
        pt.kind = "create"

        def create(pt=pt):
            spec = m.ActorSpec(
                actor_id, actor_cls.code_id, actor_cls._name, pt.args, self._dep_payloads(pt),
                self.worker_id, handle_oid, opts.resources, opts.max_restarts, opts.max_concurrency,
                actor_cls._is_async, opts.name, namespace, opts.detached, actor_cls._meta_blob,
            )
            self.send_controller(m.CreateActor(spec))

        pt.then = create
        self.io.post(self._create_actor, pt, actor_cls._name)
        return ActorHandle(actor_id, actor_cls._meta, handle_ref, actor_cls._meta_blob)

    def _create_actor(self, pt: PendingTask, class_name: str) -> None:
        client = self.actor_client(pt.task_id, class_name)
        client.creation_pins = pt.pins  # constructor arguments stay alive for restarts
        self._start_pending(pt)

    def get_actor(self, name: str, namespace: str | None) -> Any:
        from .api import ActorHandle, _META_CACHE

        actor_id, meta_blob, _owner = self.request_sync("get_actor", name, namespace or self.namespace())
        meta = _META_CACHE.get(actor_id) or pickle.loads(meta_blob)
        return ActorHandle(actor_id, meta, None, meta_blob)

    def kill_actor(self, actor_id: int, no_restart: bool) -> None:
        self.io.post(self.send_controller, m.KillActor(actor_id, not no_restart, "it was killed by meshrt.kill()"))

    def namespace(self) -> str:
        from . import context

        return context.process.get("namespace") or "default"

    # ===================================================================================
    # loop side: submission

    def _start_pending(self, pt: PendingTask) -> None:
        """Wait for the top-level ref arguments, then run ``pt.then``."""
        if pt.cancelled:
            return
        entries = self.table.entries
        missing = []
        for _, ref in pt.deps:
            entry = entries.get(ref._id) or self._entry_for_unknown(ref)
            if entry.payload is None:
                missing.append(entry)
        if not missing:
            self._deps_ready(pt)
            return
        pt.waiting = len(missing)
        waiter = _DepWaiter(self, pt)
        for entry in missing:
            if entry.owner != self.worker_id and not entry.fetching:
                self._fetch(entry)
            entry.add_waiter(waiter)

    def _deps_ready(self, pt: PendingTask) -> None:
        if pt.cancelled:
            return
        if pt.kind != "create":  # a failed constructor argument kills the actor instead
            for _, ref in pt.deps:
                entry = self.table.entries.get(ref._id)
                if entry is not None and entry.payload is not None and entry.payload.is_error:
                    self.fail_pending(pt, entry.payload)
                    return
        pt.ready = True
        pt.then()

    def _dep_payloads(self, pt: PendingTask) -> tuple:
        if not pt.deps:
            return ()
        entries = self.table.entries
        return tuple((pos, entries[ref._id].payload) for pos, ref in pt.deps)

    def _submit_actor_call(self, actor_id: int, class_name: str, pt: PendingTask) -> None:
        client = self.actor_client(actor_id, class_name)
        pt.client = client
        client.submit(pt)

    def actor_client(self, actor_id: int, class_name: str = ""):
        client = self.actor_clients.get(actor_id)
        if client is None:
            from .actor_client import ActorClient

            client = self.actor_clients[actor_id] = ActorClient(self, actor_id, class_name)
            client.subscribe()
        return client

    def fail_pending(self, pt: PendingTask, error: Payload) -> None:
        """Resolve every return of ``pt`` with ``error`` and forget it."""
        if self.pending.pop(pt.task_id, None) is None:
            return
        if pt.client is not None:
            pt.client.replied(pt)
        for entry in pt.entries:
            self.table.resolve(entry, error)
            self._check.append(entry)
        if pt.stream is not None:
            pt.stream.end(self, error)
        pt.pins = None
        pt.deps = []
        self.drain()

    def cancel_children(self, task_id: int) -> None:
        """Loop: a cancelled call takes the tasks it submitted with it (recursive=True)."""
        for child in self.children.pop(task_id, ()):
            pt = self.pending.get(child)
            if pt is not None:
                self._cancel(pt, False, True)

    def _cancel(self, pt: PendingTask, force: bool, recursive: bool = True) -> None:
        if self.pending.get(pt.task_id) is not pt:
            return
        pt.cancelled = True
        error = system_error_payload(exc.TaskCancelledError(ids.to_hex(pt.task_id)))
        if pt.client is not None:
            if not pt.client.cancel(pt, recursive):
                return  # already sent: the actor will answer with the cancellation
            self.fail_pending(pt, error)
            return
        if not pt.sent:
            self.fail_pending(pt, error)
            return
        self.send_controller(m.CancelTask(pt.task_id, force, recursive))

    def _fetch(self, entry: ObjectEntry) -> None:
        if entry.payload is not None or entry.fetching:
            return
        entry.fetching = True
        self.send_to(entry.owner, m.FetchObject(entry.id))

    # ===================================================================================
    # loop side: incoming

    def on_messages(self, conn, msgs: list) -> None:
        handlers = self.handlers
        for msg in msgs:
            handler = handlers.get(type(msg))
            if handler is None:
                log.warning("meshrt: %s sent an unexpected %s", _who(conn), type(msg).__name__)
                continue
            try:
                handler(conn, msg)
            except Exception:
                log.exception("meshrt: error handling %s from %s", type(msg).__name__, _who(conn))
        if self.table.deltas or self._check:
            self.drain()

    def on_task_return(self, conn, msg: m.TaskReturn) -> None:
        sender = conn.peer_id
        pt = self.pending.pop(msg.task_id, None)
        if pt is None:
            for payload in msg.results:
                self.adopt(payload)
            return
        if pt.client is not None:
            pt.client.replied(pt)
        for entry, payload in zip(pt.entries, msg.results):
            self.table.resolve(entry, payload, self.adopt(payload))
            self._check.append(entry)
        if pt.stream is not None and not pt.stream.finished:
            pt.stream.end(self, None)
        for oid, owner in msg.borrowed:
            self.add_borrower(oid, owner, sender)
        pt.pins = None
        pt.deps = []

    def on_stream_item(self, conn, msg: m.StreamItem) -> None:
        stream = self.streams.get(msg.task_id)
        held = self.adopt(msg.payload)
        if stream is None or stream.closed or msg.index < stream.next_index:
            return  # nobody listens any more, or a retry replays what we have
        oid = ids.object_id(msg.task_id, msg.index + 1)
        entry = self.table.owned(oid)
        self.table.resolve(entry, msg.payload, held)
        stream.push(ObjectRef(oid, self.worker_id, self.table.deltas), msg.index)

    def on_stream_end(self, conn, msg: m.StreamEnd) -> None:
        stream = self.streams.get(msg.task_id)
        if stream is not None:
            stream.end(self, msg.error)

    def on_fetch_object(self, conn, msg: m.FetchObject) -> None:
        entry = self.table.entries.get(msg.object_id)
        borrower = conn.peer_id
        if entry is None:
            payload = system_error_payload(exc.ObjectFreedError(
                ids.to_hex(msg.object_id, 36), "the owner has already freed this value"))
            self.send_to(borrower, m.ObjectValue(msg.object_id, payload))
        elif entry.payload is not None:
            self.send_value(entry, borrower)
        else:
            entry.add_waiter(_FetchWaiter(self, borrower))

    def send_value(self, entry: ObjectEntry, borrower: int) -> None:
        self.account_outgoing(entry.payload, borrower)
        self.send_to(borrower, m.ObjectValue(entry.id, entry.payload))

    def on_object_value(self, conn, msg: m.ObjectValue) -> None:
        held = self.adopt(msg.payload)
        entry = self.table.entries.get(msg.object_id)
        if entry is not None and entry.payload is None:
            self.table.resolve(entry, msg.payload, held)
            self._check.append(entry)

    def on_add_borrower(self, conn, msg: m.AddBorrower) -> None:
        for oid in msg.object_ids:
            entry = self.table.entries.get(oid)
            if entry is not None:
                self.table.add_borrower(entry, msg.borrower, 1)
                self._check.append(entry)

    def on_release_borrows(self, conn, msg: m.ReleaseBorrows) -> None:
        sender = conn.peer_id
        for oid, count in msg.items:
            entry = self.table.entries.get(oid)
            if entry is not None:
                self.table.add_borrower(entry, sender, -count)
                self._check.append(entry)

    def on_peer_gone(self, conn, msg: m.PeerGone) -> None:
        gone = msg.worker_id
        self._check.extend(self.table.drop_borrower(gone))
        lost = None
        for entry in list(self.table.entries.values()):
            if entry.owner == gone and entry.payload is None:
                lost = lost or system_error_payload(exc.OwnerDiedError(
                    "", f"its owner (worker {gone}) died before handing the value over"))
                self.table.resolve(entry, lost)
        self.forget_peer(gone)

    def forget_peer(self, peer: int) -> None:
        """Drop cached routes to a dead process (subclasses)."""

    def on_actor_state(self, conn, msg: m.ActorState) -> None:
        client = self.actor_clients.get(msg.actor_id)
        if client is not None:
            client.on_state(msg)

    # ===================================================================================
    # reference counting

    def adopt(self, payload: Payload, count: bool = True) -> list | None:
        """A payload arrived: hold the refs inside it while it lives.

        ``count``: the sender counted us as a borrower of each (results, fetched
        values), so record the receipt. Call arguments are not counted on arrival:
        the caller pins them and learns afterwards what we kept (``borrowed``).
        """
        refs = payload.refs
        if not refs:
            return None
        me = self.worker_id
        table = self.table
        deltas = table.deltas
        held = []
        for oid, owner in refs:
            if owner == me:
                entry = table.entries.get(oid)
                if entry is not None and count:  # consume the count the sender added for us
                    table.add_borrower(entry, me, -1)
            else:
                entry = table.borrowed(oid, owner)
                if count:
                    entry.receipts += 1
            held.append(ObjectRef(oid, owner, deltas))
        return held

    def account_outgoing(self, payload: Payload, dest: int) -> None:
        """Before a payload leaves for ``dest``: count ``dest`` as a borrower of its refs."""
        for oid, owner in payload.refs:
            self.add_borrower(oid, owner, dest)

    def add_borrower(self, oid: int, owner: int, borrower: int) -> None:
        if owner == self.worker_id:
            entry = self.table.entries.get(oid)
            if entry is not None:
                self.table.add_borrower(entry, borrower, 1)
                self._check.append(entry)
        else:
            self.send_to(owner, m.AddBorrower((oid,), borrower))

    def drain(self) -> None:
        check, self._check = self._check, []
        self.table.drain(self._release_owned, self._release_borrowed, check)
        if self._release_batch:
            batch, self._release_batch = self._release_batch, {}
            for owner, items in batch.items():
                self.send_to(owner, m.ReleaseBorrows(tuple(items)))

    def _release_owned(self, entry: ObjectEntry) -> None:
        self.store.free(entry.id)
        if entry.kind == KIND_ACTOR_HANDLE:
            self.actor_handle_released(entry.actor_id)

    def _release_borrowed(self, entry: ObjectEntry) -> None:
        if entry.receipts:
            self._release_batch.setdefault(entry.owner, []).append((entry.id, entry.receipts))

    def actor_handle_released(self, actor_id: int) -> None:
        """The last handle to an actor we created is gone: let it finish and exit."""
        client = self.actor_clients.get(actor_id)
        if client is not None:
            client.release()
        else:
            self.send_controller(m.KillActor(actor_id, False, "all handles to it went out of scope"))

    # ===================================================================================
    # streams

    def open_stream(self, task_id: int) -> Stream:
        stream = self.streams.get(task_id)
        if stream is None:
            stream = Stream(task_id)
            done = ids.object_id(task_id, 0)
            self.table.owned(done, pending=True)
            stream.done_ref = ObjectRef(done, self.worker_id, self.table.deltas)
            self.streams[task_id] = stream
        return stream

    def close_stream(self, stream: Stream) -> None:
        stream.closed = True
        self.streams.pop(stream.task_id, None)
        stream.items.clear()
        stream.done_ref = None

    def next_stream_ref(self, stream: Stream, timeout: float | None) -> ObjectRef | None:
        return stream.next_blocking(self, timeout)

    async def next_stream_ref_async(self, stream: Stream) -> ObjectRef | None:
        return await stream.next_async(self)

    def stream_completed_ref(self, stream: Stream) -> ObjectRef:
        return stream.completed_ref(self)

    # ===================================================================================

    def address(self) -> str | None:
        return None

    def close(self) -> None:
        self.closed = True
        if self._drain_timer is not None:
            self._drain_timer.cancel()


class _DepWaiter:
    __slots__ = ("core", "pt")

    def __init__(self, core: Core, pt: PendingTask) -> None:
        self.core = core
        self.pt = pt

    def fire(self, _entry) -> None:
        pt = self.pt
        pt.waiting -= 1
        if pt.waiting == 0:
            self.core._deps_ready(pt)


class _FetchWaiter:
    __slots__ = ("core", "borrower")

    def __init__(self, core: Core, borrower: int) -> None:
        self.core = core
        self.borrower = borrower

    def fire(self, entry: ObjectEntry) -> None:
        self.core.send_value(entry, self.borrower)


def _who(conn) -> str:
    peer = getattr(conn, "peer_id", None)
    return f"worker {peer}" if peer is not None else "a peer"


def current_pid() -> int:
    return os.getpid()

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
import concurrent.futures
import logging
import time
from typing import Any

from .. import exceptions as exc
from ..objstore.serialization import (
    Payload,
    deserialize,
    deserialize_owned,
    error_from_payload,
    serialize,
    system_error_payload,
)
from ..objstore.table import ObjectEntry, ObjectTable
from . import args as argpack
from . import ids, loans, placement, runtime_env
from . import messages as m
from .actor_calls import ActorCalls
from .context import current_call, nesting_depth
from .inline_reads import InlineReads
from .lent_payloads import lendable
from .mesh_support import MeshSupport
from .ownership import Ownership
from .pending import PendingTask
from .portal import AsyncWaiter, CountdownWaiter, LoopThread, bridge_for, failed
from .pulls import LENT_TYPES, Pulls, carries_lent
from .refs import ObjectRef, ObjectRefGenerator
from .store_side import StoreSide
from .streams import Stream

log = logging.getLogger("meshrt")

DRAIN_INTERVAL_S = 0.05
DRAIN_IDLE_S = 0.5  # idle, the wait doubles up to this: 2 wake-ups a second, not 20
_NONE_PAYLOAD, _ = serialize(None)


class Core(Ownership, ActorCalls, MeshSupport, StoreSide, Pulls, InlineReads):
    is_driver = False

    def __init__(self, worker_id: int, io: LoopThread, token: bytes) -> None:
        self.worker_id = worker_id
        self.io = io
        self.token = token
        self.table = ObjectTable(worker_id)
        self.store = None  # StoreClient once the process can reach the host's shared memory
        self.pending: dict[int, PendingTask] = {}
        self.streams: dict[int, Stream] = {}
        self.actor_clients: dict[int, Any] = {}
        self.code_defined: set[int] = set()
        self.children: dict[int, list[int]] = {}  # running call -> tasks it submitted
        # Large bytes to processes of this host are lent (loans.py): decided once here.
        self.lends_bytes = loans.available()
        self.args_lender = loans.lender() if self.lends_bytes else None
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
            m.PortValue: self.on_port_value,
            m.Relay: self.on_relay,
            m.LoanDone: self.on_loan_done,
            m.InlineRead: self.on_inline_read,
            m.InlineBytes: self.on_inline_bytes,
        }
        MeshSupport.__init__(self)
        Pulls.__init__(self)
        InlineReads.__init__(self)
        self.closed = False
        self.closing = False  # shutdown has begun: deaths from here on are expected

    # == routing (subclasses) =============================================================

    def send_controller(self, msg) -> None:
        raise NotImplementedError

    def send_to(self, peer: int, msg) -> None:
        """Send to another process by worker id (0 = the driver); loop thread only."""
        raise NotImplementedError

    def send_call(self, peer: int, msg, alone: bool) -> None:
        """``send_to`` for an actor call; ``alone``: nothing else of its caller's is in
        flight to ``peer`` (the driver's agents may then use the actor's lane)."""
        self.send_to(peer, msg)

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
        self._drain_wait = DRAIN_INTERVAL_S
        self._drain_timer = self.io.loop.call_later(DRAIN_INTERVAL_S, self._periodic_drain)

    def _periodic_drain(self, busy: bool = False) -> None:
        """Refs dropped by user threads (and, in subclasses, views unmapped): applied
        here. ``busy``: a subclass had something of its own to send."""
        if self.closed:
            return
        if self.table.deltas or self._check:
            self.drain()
            busy = True
        self._drain_wait = DRAIN_INTERVAL_S if busy else min(self._drain_wait * 2, DRAIN_IDLE_S)
        self._drain_timer = self.io.loop.call_later(self._drain_wait, self._periodic_drain)

    # == user-thread API ==================================================================

    def put(self, value: Any) -> ObjectRef:
        if isinstance(value, ObjectRef):
            raise TypeError(
                "put() got an ObjectRef; pass the ref itself where it is needed "
                "(put of a ref is not supported, as in Ray)"
            )
        oid = ids.new_put_id()
        try:
            payload, held = serialize(value, self.placer(oid, self.worker_id))
        except TypeError as err:
            raise TypeError(f"put(): {err}") from None
        entry = ObjectEntry(oid, self.worker_id)
        entry.payload = payload
        entry.held = held or None
        self.table.entries[oid] = entry
        return ObjectRef(oid, self.worker_id, self.table.deltas)

    def submit_task(self, fn, args: tuple, kwargs: dict, opts) -> Any:
        self.define_code(fn.code_id, fn.code_blob)
        opts = placement.capture(opts)
        remote = placement.task_portable(self, opts)  # (may run on another host: task_hosts.py)
        env = runtime_env.for_submit(self, opts.runtime_env)
        payload, deps, pins = self.pack_args(args, kwargs, f"{opts.name}.remote()", remote)
        task_id = ids.new_task_id()
        pt = PendingTask(task_id, opts.name, payload, deps, pins, opts.num_returns)
        pt.remote = remote
        result = self._make_returns(pt, opts.num_returns)
        pt.retries_left = opts.max_retries
        depth, caller, created_ms = nesting_depth(), current_call(), int(time.time() * 1000)

        def submit(pt=pt, opts=opts, fn=fn):
            spec = m.TaskSpec(
                task_id, fn.code_id, opts.name, pt.args, self._dep_payloads(pt), pt.num_returns,
                self.worker_id, self.address(), opts.resources, opts.max_retries,
                opts.retry_exceptions, owner_host=self.host_id, depth=depth, max_calls=opts.max_calls,
                affinity=opts.affinity, portable=remote, spread=opts.spread, runtime_env=env,
                capture_children=bool(opts.capture_children), labels=opts.labels, soft_labels=opts.soft_labels,
                fallback_labels=opts.fallback_labels, parent=caller.task_id if caller is not None else 0,
                created_ms=created_ms, func_name=opts.func_name)
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
        if num_returns < 0:  # -1: "streaming"; -2: "dynamic", streamed as well (Stream.as_dynamic)
            pt.stream = self.open_stream(pt.task_id)
            return ObjectRefGenerator(pt.task_id, self) if num_returns == -1 else pt.stream.as_dynamic(pt)
        if num_returns == 0:
            return None
        refs = []
        for i in range(num_returns):
            oid = ids.object_id(pt.task_id, i + 1)
            pt.entries.append(self.table.owned(oid, pending=True))
            refs.append(ObjectRef(oid, me, deltas))
        return refs[0] if num_returns == 1 else refs

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
            entry.seen = True
            found.append(entry)
        # (each entry once: a list may name a ref twice, and an entry wakes a waiter once)
        not_ready = list({id(e): e for e in found if e.payload is None}.values())
        if not_ready:
            # As Ray does, a failure is raised as soon as it is known, not after the
            # slowest of the other refs: no waiting when one has failed already.
            if not any(e.payload is not None and failed(e) for e in found):
                self.refuse_waiting_on_itself(not_ready)
                self._wait_entries(not_ready, refs, timeout, fail_fast=True)
            if any(e.payload is None for e in not_ready):  # (a failure ended the wait)
                raise error_from_payload(next(e for e in found if e.payload is not None and failed(e)).payload)
        return [self.value_of(e) for e in found]

    def refuse_waiting_on_itself(self, entries: list) -> None:
        """Raise where a get() could never return (an actor waiting on itself)."""

    def _wait_entries(self, waiting: list, refs: list, timeout: float | None, fail_fast: bool = False) -> None:
        """Block until every entry resolved (``fail_fast``: or one resolved with an error)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.on_block(True)
        try:
            while waiting:
                waiter = CountdownWaiter(len(waiting), fail_fast)
                for entry in waiting:
                    if entry.owner != self.worker_id and not entry.fetching:
                        self.io.post(self._fetch, entry)
                    entry.add_waiter(waiter)
                remaining = None if deadline is None else deadline - time.monotonic()
                woke = (remaining is None or remaining > 0) and waiter.wait(remaining)
                still = [e for e in waiting if e.payload is None]
                for entry in still:
                    entry.remove_waiter(waiter)
                if still and not woke:
                    raise exc.GetTimeoutError(
                        f"get() timed out after {timeout} s: {len(still)} of {len(refs)} "
                        f"refs not ready (the first is ObjectRef({ids.to_hex(still[0].id, ids.OBJECT_HEX)})); "
                        "raise timeout= or wait with meshrt.wait() first"
                    )
                if fail_fast and any(failed(e) for e in waiting):
                    return
                waiting = still
        finally:
            self.on_block(False)

    def value_of(self, entry: ObjectEntry, owned: bool = False) -> Any:
        entry.seen = True
        payload = entry.payload
        if payload.is_error:
            raise error_from_payload(payload)
        return deserialize_owned(payload) if owned else deserialize(payload)  # (owned: a Monarch value)

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

    def concurrent_future(self, ref: ObjectRef, owned: bool = False) -> concurrent.futures.Future:
        cf: concurrent.futures.Future = concurrent.futures.Future()
        entry = self.table.entries.get(ref._id) or self._entry_for_unknown(ref)

        def finish(e, ref=ref):  # holds the ref: the value must outlive a temporary ref
            if cf.done():
                return
            try:
                cf.set_result(self.value_of(e, owned))
            except BaseException as err:  # noqa: BLE001 - handed to the future
                cf.set_exception(err)

        class _Done:
            def fire(_self, e):
                if e.payload.shm is not None and self.io.in_loop():
                    # Mapping a shared-memory value may ask the store: not on this loop.
                    self.io.loop.run_in_executor(None, finish, e)
                else:
                    finish(e)

        if entry.owner != self.worker_id and not entry.fetching:
            self.io.post(self._fetch, entry)
        entry.add_waiter(_Done())
        return cf

    def wait(self, refs: list, num_returns: int, timeout: float | None) -> tuple[list, list]:
        from .waiting import wait

        return wait(self, refs, num_returns, timeout)

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

    host_id = 0  # the host this process runs on (0 = the head)
    ucx_unreached: frozenset | set = frozenset()  # where UCX does not reach: frozensets of hosts (ucx_routes.py)
    several_hosts = False  # a head host's worker: other hosts are in the cluster (m.ClusterSpans)

    def remote_peer(self, peer: int) -> bool:
        """True when ``peer`` runs on another host (no shared store between us)."""
        return False

    def note_peer_host(self, peer: int, host: int) -> None:
        """``peer`` runs on ``host`` (learnt from a handle that says so)."""

    def host_of(self, peer: int) -> int | None:
        """The host ``peer`` runs on, when known here."""
        return None

    def namespace(self) -> str:
        from . import context

        return context.process.get("namespace") or "default"

    # == loop side: submission ============================================================

    def _start_pending(self, pt: PendingTask) -> None:
        """Wait for the top-level ref arguments, then run ``pt.then``."""
        if pt.cancelled:
            return
        entries = self.table.entries
        missing = []
        for _, ref in pt.deps:
            entry = entries.get(ref._id) or self._entry_for_unknown(ref)
            entry.seen = True  # (its value, or its error, is the call's now)
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
        out = tuple((pos, entries[ref._id].payload) for pos, ref in pt.deps)
        if pt.remote:  # a large value (maybe in this host's store): the callee fetches and pulls it
            out = tuple((pos, argpack.fetched_there(ref) if payload.shm is not None or lendable(payload) else payload)
                        for (pos, payload), (_, ref) in zip(out, pt.deps, strict=True))
        return out

    def fail_pending(self, pt: PendingTask, error: Payload) -> None:
        """Resolve every return of ``pt`` with ``error`` and forget it."""
        if self.pending.pop(pt.task_id, None) is None:
            return
        self.release_payload(pt.args)
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

    # == loop side: incoming ==============================================================

    def on_messages(self, conn, msgs: list) -> None:
        self.take_messages(conn, msgs)
        if self.table.deltas or self._check:
            self.drain()

    def take_messages(self, conn, msgs: list) -> None:
        """``on_messages`` without the drain after: for messages inside a batch (relayed
        ones), whose batch drains once at its end."""
        if self.held and self.hold_if_waiting(conn, msgs):
            return  # behind a message of the same sender whose bytes are being pulled
        for i, msg in enumerate(msgs):
            kind = type(msg)
            if kind in LENT_TYPES and carries_lent(msg):
                if self.start_pull(conn, msg, msgs[i + 1:]):  # pulls.py: then the rest, in order
                    break
                continue
            if kind is m.PeerGone and msg.worker_id in self.held:
                self.inline_reads_lost(msg.worker_id)  # (a pull may be waiting on it: inline_reads.py)
                self.held[msg.worker_id].append((conn, msg))  # after what that peer sent before dying
                continue
            self.handle_message(conn, msg)

    def handle_message(self, conn, msg) -> None:
        """One message to its handler; a handler's error is logged, not raised."""
        handler = self.handlers.get(type(msg))
        if handler is None:
            log.warning("meshrt: %s sent an unexpected %s", _who(conn), type(msg).__name__)
            return
        try:
            handler(conn, msg)
        except Exception:
            log.exception("meshrt: error handling %s from %s", type(msg).__name__, _who(conn))

    def on_task_return(self, conn, msg: m.TaskReturn) -> None:
        sender = conn.peer_id
        pt = self.pending.pop(msg.task_id, None)
        if pt is not None and pt.retry and pt.retries_left != 0 and self.retry_call(pt, msg, sender):
            return
        if pt is None:  # cancelled or failed meanwhile: nobody wants these values
            for payload in msg.results:
                if payload.loans is not None:
                    self.end_loans(sender, loans.foreign_generations(payload))
                    continue
                self.adopt(payload)
                self.release_payload(payload)
            return
        results = msg.results
        if any(payload.loans is not None for payload in results):  # (before the arguments' loans end:
            results = [self.take_loans(sender, payload) for payload in results]  # one may come back)
        self.release_payload(pt.args)
        if pt.client is not None:
            pt.client.replied(pt)
        for entry, payload in zip(pt.entries, results, strict=False):
            self.table.resolve(entry, payload, self.adopt(payload))
            self._check.append(entry)
            if self.store is not None and (getattr(payload, "is_error", False) or getattr(payload, "shm", None)):
                self.drop_left_behind(entry.id, payload)
        if pt.stream is not None and not pt.stream.finished:
            pt.stream.end(self, None)
        for oid, owner in msg.borrowed:
            self.add_borrower(oid, owner, sender)
        pt.pins = None
        pt.deps = []

    def take_loans(self, sender: int, payload):
        """A result lent by ``sender`` (an actor of this host), read now, on the loop:
        the lender keeps it only until we say so (loans.py)."""
        if payload.loans is None:
            return payload
        payload, generations = loans.take(payload)
        self.end_loans(sender, generations)
        return payload

    def end_loans(self, sender: int, generations: tuple) -> None:
        if generations:
            self.send_to(sender, m.LoanDone(generations))

    def on_loan_done(self, conn, msg: m.LoanDone) -> None:
        for generation in msg.generations:
            loans.end(generation)

    def on_stream_item(self, conn, msg: m.StreamItem) -> None:
        stream = self.streams.get(msg.task_id)
        held = self.adopt(msg.payload)
        if stream is None or stream.closed or msg.index < stream.next_index:
            self.release_payload(msg.payload)
            return  # nobody listens any more, or a retry replays what we have
        oid = ids.object_id(msg.task_id, msg.index + 1)
        entry = self.table.owned(oid)
        self.table.resolve(entry, msg.payload, held)
        self.drop_left_behind(oid, msg.payload)
        stream.push(ObjectRef(oid, self.worker_id, self.table.deltas), msg.index)

    def on_stream_end(self, conn, msg: m.StreamEnd) -> None:
        stream = self.streams.get(msg.task_id)
        if stream is not None:
            stream.end(self, msg.error)

    # == streams ==========================================================================

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


def _who(conn) -> str:
    peer = getattr(conn, "peer_id", None)
    return f"worker {peer}" if peer is not None else "a peer"


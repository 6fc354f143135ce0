"""The caller's side of actors, mixed into Core: create, call, look up, kill."""

from __future__ import annotations

import functools
import pickle
from typing import Any

from ..scheduler import bundles
from . import fanout_calls, ids, lanes, runtime_env
from . import messages as m
from .pending import PendingTask
from .refs import ObjectRef


class ActorCalls:
    """Needs from its host: worker_id, table, pending, actor_clients, io, define_code,
    request_sync, send_controller, namespace, _make_returns, _note_child, _start_pending."""

    def call_actor(self, handle, method: str, args: tuple, kwargs: dict, num_returns: int,
                   inline: bool = False, packed=None, retry_exceptions: Any = False,
                   concurrency_group: str | None = None, name: str | None = None,
                   max_retries: int | None = None) -> Any:
        """``inline``: the actor is on another host, so large arguments are lent
        (lent_payloads.py) instead of placed in this host's store. ``packed``: ``args``
        already serialized, with no refs or store blocks (reused by every call). The call
        leaves from this thread where nothing of ours to the actor is ahead of it."""
        if packed is not None:
            payload, deps, pins = packed, [], []
        else:
            payload, deps, pins = self.pack_args(args, kwargs, f"{handle._class_name}.{method}.remote()", inline,
                                                 lend=not inline)
        pt, result = self.pending_call(handle, method, payload, deps, pins, num_returns, inline, name)
        pt.retry = retry_exceptions
        if max_retries is not None:  # (the method's own max_task_retries)
            pt.retries_left = max_retries
        pt.group = concurrency_group
        pt.label = name
        self.count_call(pt.actor_id, 1)
        client = self.actor_clients.get(pt.actor_id)
        if client is not None and not deps and client.send_now(pt):
            return result
        self.count_unsubmitted(pt.actor_id, 1)
        self.io.post(self._submit_actor_call, pt.actor_id, handle._class_name, pt)
        return result

    def pending_call(self, handle, method: str, payload, deps: list, pins: list, num_returns: int,
                     inline: bool, name: str | None = None) -> tuple:
        """A call's record, owned and awaited here from now on: (PendingTask, its result)."""
        task_id = ids.new_task_id()
        actor_id = int(handle._actor_id)  # (a plain int in messages, not the handle's ActorID)
        pt = PendingTask(task_id, name or f"{handle._class_name}.{lanes.split(method)[0]}", payload, deps, pins,
                         num_returns)
        pt.method = method
        pt.kind = "call"
        pt.actor_id = actor_id
        pt.remote = inline
        pt.retries_left = handle._max_task_retries
        result = self._make_returns(pt, num_returns)
        self.pending[task_id] = pt
        self._note_child(task_id)
        return pt, result

    def call_actors(self, handles: list, method: str, calls: list) -> list:
        """One call to each of many actors (a mesh call to processes on other hosts),
        ``calls`` holding each one's (args, packed) as for call_actor: the calls to
        each host leave as one frame, written from this thread (fanout_calls.py)."""
        return fanout_calls.call_actors(self, handles, method, calls)

    def retry_call(self, pt: PendingTask, msg: m.TaskReturn, sender: int) -> bool:
        """Loop: an actor method called with ``retry_exceptions`` raised one of them: send
        the call again, as Ray does, while the actor's ``max_task_retries`` allow. Only an
        error of the method's own (a TaskError), never meshrt's (a cancel, a death)."""
        results = msg.results
        payload = results[0] if results else None
        if (payload is None or not payload.is_error or payload.loans is not None or pt.client is None
                or pt.cancelled):
            return False
        from .. import exceptions as exc
        from ..objstore.serialization import error_from_payload

        try:
            err = error_from_payload(payload)
            allowed = pickle.loads(pt.retry) if pt.retry is not True else Exception
        except Exception:  # noqa: BLE001 - (cannot tell: the error goes to the caller)
            return False
        if not isinstance(err, exc.TaskError) or not isinstance(err.cause if err.cause is not None else err,
                                                                 allowed):
            return False
        for oid, owner in msg.borrowed:  # (what the failed attempt kept of its arguments)
            self.add_borrower(oid, owner, sender)
        if pt.retries_left > 0:
            pt.retries_left -= 1
        self.pending[pt.task_id] = pt
        client = pt.client
        with client.lock:
            client.inflight.pop(pt.task_id, None)
            pt.sent = False
            client.queue.appendleft(pt)
            client._pump_locked()
        return True

    def create_actor(self, actor_cls, args: tuple, kwargs: dict, opts) -> Any:
        from .api import ActorHandle

        self.define_code(actor_cls.code_id, actor_cls.code_blob)
        # (the actor runs on another host, or may: the controller picks it, or a group's bundle may be anywhere)
        remote = (opts.host != self.host_id or bool(opts.host_policy)
                  or bundles.bundle_of(opts.resources) is not None)
        env = runtime_env.for_submit(self, opts.runtime_env)
        payload, deps, pins = self.pack_args(args, kwargs, f"{actor_cls._name}.remote()", remote)
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
        if not opts.detached:
            # An actor lives while some handle to it does, named or not (Ray's rule: the
            # handles get_actor() gives are not counted, so a name alone does not keep it).
            entry = self.table.owned(handle_oid)
            entry.on_release = functools.partial(self.actor_handle_released, actor_id)
            handle_ref = ObjectRef(handle_oid, self.worker_id, self.table.deltas)
        pt = PendingTask(actor_id, actor_cls._name, payload, deps, pins, 0)
        pt.kind = "create"
        pt.remote = remote

        def create(pt=pt):
            spec = m.ActorSpec(
                actor_id, actor_cls.code_id, actor_cls._name, pt.args, self._dep_payloads(pt),
                self.worker_id, handle_oid, opts.resources, opts.max_restarts, opts.max_concurrency,
                actor_cls._is_async, opts.name, namespace, opts.detached, actor_cls._meta_blob, opts.host,
                opts.label, opts.concurrency_groups, opts.waits_for_host, opts.host_policy, env,
                bool(opts.capture_children), opts.labels, opts.soft_labels, opts.python, opts.fallback_labels,
            )
            self.send_controller(m.CreateActor(spec))

        pt.then = create
        self.io.post(self._create_actor, pt, actor_cls._name)
        return ActorHandle(actor_id, actor_cls._meta, handle_ref, actor_cls._meta_blob)

    def _create_actor(self, pt: PendingTask, class_name: str) -> None:
        client = self.actor_client(pt.task_id, class_name)
        client.creation_pins = pt.pins  # constructor arguments stay alive for restarts
        client.creation_args = pt.args
        self._start_pending(pt)

    def get_actor(self, name: str, namespace: str | None) -> Any:
        from .api import _META_CACHE, ActorHandle

        actor_id, meta_blob, _owner = self.request_sync("get_actor", name, namespace or self.namespace())
        meta = _META_CACHE.get(actor_id) or pickle.loads(meta_blob)
        return ActorHandle(actor_id, meta, None, meta_blob)

    def kill_actor(self, actor_id: int, no_restart: bool) -> None:
        actor_id = int(actor_id)
        client = self.actor_clients.get(actor_id)
        if client is not None:
            client.killed = True  # no call may leave ahead of the kill from now on
        self.io.post(self.send_controller, m.KillActor(actor_id, not no_restart, "it was killed by meshrt.kill()"))

    def _submit_actor_call(self, actor_id: int, class_name: str, pt: PendingTask) -> None:
        client = self.actor_client(actor_id, class_name)
        pt.client = client
        with client.lock:  # queued before send_now can see the count drop (call order)
            self.count_unsubmitted(actor_id, -1)
            client.submit(pt)

    def direct_conn(self, peer: int):
        """(connection, through_agent) a user thread may send to ``peer`` on, or None."""
        return None

    def actor_client(self, actor_id: int, class_name: str = ""):
        client = self.actor_clients.get(actor_id)
        if client is None:
            from .actor_client import ActorClient

            actor_id = int(actor_id)  # (it goes into every call's message)
            client = self.actor_clients[actor_id] = ActorClient(self, actor_id, class_name)
            client.subscribe()
        return client

    def on_actor_state(self, conn, msg: m.ActorState) -> None:
        client = self.actor_clients.get(msg.actor_id)
        if client is not None:
            client.on_state(msg)

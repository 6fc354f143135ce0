"""What actor meshes need from every process's core: ports, relayed messages, and
counts of unanswered calls, one wake-up for many replies. Mixed into Core (which
provides table, adopt, release_payload, send_to, account_outgoing, on_messages, _fetch)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from ..objstore.serialization import Payload
from . import ids
from . import messages as m
from .portal import AsyncCountdown, bridge_for, failed
from .refs import ObjectRef


class MeshSupport:
    def __init__(self) -> None:
        self.ports: dict[int, Any] = {}  # port id -> deliver(ref, rank), for mesh Channels
        self.calls_out: dict[int, int] = {}  # actor id -> calls not answered yet (mesh choose())
        self._calls_lock = threading.Lock()
        # actor id -> calls posted to the loop but not yet queued on their ActorClient:
        # while any are, a user thread must not send a later call directly (order).
        self._unsubmitted: dict[int, int] = {}

    def outstanding_calls(self, actor_id: int) -> int:
        """Calls this process made to an actor that have not been answered yet."""
        return self.calls_out.get(actor_id, 0)

    def known_dead(self, actor_id: int) -> bool:
        """This process has heard that the actor died (mesh choose() passes it over)."""
        client = self.actor_clients.get(actor_id)
        return client is not None and client.state == "dead"

    def unsubmitted_calls(self, actor_id: int) -> int:
        """Calls to ``actor_id`` posted to the core loop and not yet queued there."""
        return self._unsubmitted.get(actor_id, 0)

    def count_call(self, actor_id: int, delta: int) -> None:
        """Any thread: a call to ``actor_id`` was made (+1) or answered (-1)."""
        self._count(self.calls_out, (actor_id,), delta)

    def count_unsubmitted(self, actor_id: int, delta: int) -> None:
        """Any thread: a call was posted to the core loop (+1) or queued there (-1)."""
        self._count(self._unsubmitted, (actor_id,), delta)

    def count_calls(self, actor_ids: list, delta: int) -> None:
        """``count_call`` for each of many actors (a mesh call), under one lock."""
        self._count(self.calls_out, actor_ids, delta)

    def count_unsubmitted_calls(self, actor_ids: list, delta: int) -> None:
        self._count(self._unsubmitted, actor_ids, delta)

    def _count(self, counts: dict, actor_ids, delta: int) -> None:
        with self._calls_lock:
            for actor_id in actor_ids:
                n = counts.get(actor_id, 0) + delta
                if n > 0:
                    counts[actor_id] = n
                else:
                    counts.pop(actor_id, None)

    def _unresolved(self, refs: list, fail_fast: bool) -> list:
        """The entries of ``refs`` still to wait for: none once one failed (``fail_fast``)."""
        entries = self.table.entries
        missing = []
        for ref in refs:
            entry = entries.get(ref._id) or self._entry_for_unknown(ref)
            entry.seen = True  # (a mesh call reads the first failure only: the others count as read)
            if entry.payload is None:
                missing.append(entry)
            elif fail_fast and failed(entry):
                return []
        return missing

    async def wait_all_async(self, refs: list, fail_fast: bool = False) -> None:
        """Await until every ref has a value or an error (``fail_fast``: or until one has
        an error), with one wake-up at the end."""
        missing = self._unresolved(refs, fail_fast)
        if not missing:
            return
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        in_core = self.io.in_loop()
        waiter = AsyncCountdown(len(missing), fut, None if in_core else bridge_for(loop), fail_fast)
        for entry in missing:
            if entry.owner != self.worker_id and not entry.fetching:
                if in_core:
                    self._fetch(entry)
                else:
                    self.io.post(self._fetch, entry)
            entry.add_waiter(waiter)
        await fut

    def wait_all_or_failure(self, refs: list, timeout: float | None) -> None:
        """Block until every ref has a value or one has an error; GetTimeoutError after
        ``timeout``. A mesh call's blocking ``get`` (the async form: wait_all_async)."""
        if self.io.in_loop():
            raise RuntimeError("a mesh call's get() was called from inside meshrt's event loop, where it "
                               "would deadlock; use `await` there instead")
        missing = self._unresolved(refs, fail_fast=True)
        if missing:
            self.refuse_waiting_on_itself(missing)
            self._wait_entries(missing, refs, timeout, fail_fast=True)

    def on_relay(self, conn, msg: m.Relay) -> None:
        """A message that came through a host agent: handle it as if from its sender
        (the batch it came in drains once, at its end)."""
        self.take_messages(Relayed(self, msg.src), [msg.msg])

    def on_port_value(self, conn, msg: m.PortValue) -> None:
        """A value sent through a Port: owned here like a put, then handed to its receiver."""
        self._port_deliver(msg.port_id, msg.payload, self.adopt(msg.payload), msg.rank)

    def _port_deliver(self, port_id: int, payload: Payload, held, rank: int) -> None:
        deliver = self.ports.get(port_id)
        if deliver is None:
            self.release_payload(payload)
            return  # the receiver was closed
        entry = self.table.owned(ids.new_put_id())
        self.table.resolve(entry, payload, held)
        deliver(ObjectRef(entry.id, self.worker_id, self.table.deltas), rank)

    def send_port(self, owner: int, port_id: int, payload: Payload, held, rank: int = 0) -> None:
        """Loop: send one Port value to the process that holds its receiver."""
        if owner == self.worker_id:
            self._port_deliver(port_id, payload, self.adopt(payload, count=False), rank)
            return
        self.account_outgoing(payload, owner)
        self.send_to(owner, m.PortValue(port_id, self.lend_out(payload, owner), rank))


class Relayed:
    """Stands for the connection of a relayed message's sender: replies go back to
    that sender by id (and so through the agent again)."""

    __slots__ = ("core", "peer_id", "peer_pid")

    def __init__(self, core, peer_id: int) -> None:
        self.core = core
        self.peer_id = peer_id
        self.peer_pid = None

    def send(self, msg) -> None:
        self.core.send_to(self.peer_id, msg)

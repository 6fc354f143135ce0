"""The owner's side of the object protocol, mixed into Core.

Borrowers fetch values from their owner; every process that receives a ref is
counted before the message carrying it leaves (``account_outgoing``) and records
the receipt on arrival (``adopt``); dropped refs go back to their owner in batches
(``drain``). See objstore/table.py for the counting rules.
"""

from __future__ import annotations

import logging

from .. import exceptions as exc
from ..objstore.serialization import Payload, inline_copy, system_error_payload
from ..objstore.table import ObjectEntry
from . import ids, unhandled_errors
from . import messages as m
from .portal import in_background
from .refs import ObjectRef

log = logging.getLogger("meshrt")


class Ownership:
    """Needs from its host: worker_id, table, store, _check, _release_batch, send_to,
    send_controller, actor_clients."""

    def _fetch(self, entry: ObjectEntry) -> None:
        if entry.payload is not None or entry.fetching:
            return
        entry.fetching = True
        self.send_to(entry.owner, m.FetchObject(entry.id))

    def on_fetch_object(self, conn, msg: m.FetchObject) -> None:
        entry = self.table.entries.get(msg.object_id)
        borrower = conn.peer_id
        if entry is None:
            payload = system_error_payload(exc.ObjectFreedError(
                ids.to_hex(msg.object_id, ids.OBJECT_HEX), "the owner has already freed this value"))
            self.send_to(borrower, m.ObjectValue(msg.object_id, payload))
        elif entry.payload is not None:
            self.send_value(entry, borrower)
        else:
            entry.add_waiter(_FetchWaiter(self, borrower))

    def send_value(self, entry: ObjectEntry, borrower: int) -> None:
        entry.seen = True
        payload = entry.payload
        self.account_outgoing(payload, borrower)
        if payload.shm is not None and self.remote_peer(borrower):
            # Another host: its agent pulls the block through the tensor engine, or the
            # bytes travel inline.
            if not self.lend(entry, borrower, payload):
                self.note_copy(entry, borrower)
                self.send_inline(entry, borrower, payload)
            return
        sent = self.lend_out(payload, borrower)
        if sent is not payload:  # lent: the borrower's host keeps a copy until we free it
            self.note_copy(entry, borrower)
        self.send_to(borrower, m.ObjectValue(entry.id, sent))

    def lend(self, entry: ObjectEntry, borrower: int, payload: Payload) -> bool:
        """Lend a stored value's block to a borrower on another host (lending.py,
        lent_payloads.py); False: send the bytes inline."""
        return False

    def lend_out(self, payload: Payload, dest: int) -> Payload:
        """``payload`` for ``dest``, its large in-memory buffers lent when ``dest`` is
        on another host (workers, lent_payloads.py)."""
        return payload

    def send_inline(self, entry: ObjectEntry, borrower: int, payload: Payload) -> None:
        """The value with its bytes copied in (off the loop, which must not wait on a
        store pin)."""

        async def send_inline():
            copy = await self.io.loop.run_in_executor(None, inline_copy, payload)
            self.send_to(borrower, m.ObjectValue(entry.id, copy))

        in_background(send_inline())

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

    # ===================================================================================
    # reference counting

    def _arrived(self, args, deps) -> tuple[list, list]:
        """Hold the refs inside arriving arguments; the caller pins them (not counted here)."""
        held: list = []
        arg_refs: list = []
        me = self.worker_id
        for payload in (args, *(p for _, p in deps)):
            if payload.refs:
                held.extend(self.adopt(payload, count=False))
                arg_refs.extend(r for r in payload.refs if r[1] != me)
        return held, arg_refs

    def _still_borrowed(self, arg_refs: list) -> tuple:
        if not arg_refs:
            return ()
        borrowed = []
        entries = self.table.entries
        for oid, owner in dict.fromkeys(arg_refs):
            entry = entries.get(oid)
            if entry is not None and entry.local > 0:
                entry.receipts += 1  # the caller counts us as a borrower in return
                borrowed.append((oid, owner))
        return tuple(borrowed)

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

    def note_copy(self, entry: ObjectEntry, borrower: int) -> None:
        """A large value went to another host (whose agent may keep a copy)."""

    def forget_copies(self, oid: int) -> None:
        """The value is freed: copies other hosts keep of it must go too."""

    def _release_owned(self, entry: ObjectEntry) -> None:
        if not entry.seen and entry.payload is not None and entry.payload.is_error:
            unhandled_errors.report(entry.payload)
        self.forget_copies(entry.id)
        self.release_payload(entry.payload)
        if entry.on_release is not None:
            try:
                entry.on_release()
            except Exception:  # noqa: BLE001 - one hook's failure must not stop the release of others
                log.exception("meshrt: an object's release hook failed")

    def _release_borrowed(self, entry: ObjectEntry) -> None:
        if entry.receipts:
            self._release_batch.setdefault(entry.owner, []).append((entry.id, entry.receipts))

    def actor_handle_released(self, actor_id: int) -> None:
        """The last handle to an actor we created is gone: let it finish and exit."""
        if self.unsubmitted_calls(actor_id):  # (calls made with the handle just before: posted ahead of us)
            self.io.post(self.actor_handle_released, actor_id)  # (after them: `Cls.remote().f.remote()`)
            return
        client = self.actor_clients.get(actor_id)
        if client is not None:
            client.release()
        else:
            self.send_controller(m.KillActor(actor_id, False, "all handles to it went out of scope"))


class _FetchWaiter:
    __slots__ = ("core", "borrower")

    def __init__(self, core, borrower: int) -> None:
        self.core = core
        self.borrower = borrower

    def fire(self, entry: ObjectEntry) -> None:
        self.core.send_value(entry, self.borrower)

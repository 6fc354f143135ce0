"""The receiving side of lent values (lent_payloads.py, lending.py): a message
carrying ``LentPayload`` handles waits while its bytes are read through the tensor
engine, and so does everything its sender sent after it, so each sender's messages
are still handled in the order they were sent (a call's lent arguments before its
next call, stream items before the stream's end). Other senders go on meanwhile.

Where the bytes land: a borrowed object in the receiving host's store, pulled once by
its agent (the driver's controller on the head host) and shared by the host's
processes; a call's results to the driver in the driver's store; anything else (and
anything the driver borrows) in the receiver's memory, as inline bytes would.
"""

from __future__ import annotations

import asyncio
import collections
import threading

from ..objstore.client import layout_of_sizes
from ..objstore.serialization import Payload, system_error_payload
from . import ids
from . import messages as m
from .lent_payloads import drop_lent
from .portal import in_background

# message type -> the field that may hold a lent payload (TaskReturn: results, a tuple;
# ExecuteTask, StartActor: the spec's args)
_FIELDS = {m.TaskReturn: "results", m.ObjectValue: "payload", m.StreamItem: "payload",
           m.PortValue: "payload", m.ActorCall: "args", m.ExecuteTask: "spec", m.StartActor: "spec"}
LENT_TYPES = frozenset(_FIELDS)
_NEVER_HELD = frozenset({m.InlineRead, m.InlineBytes})  # order-free, and a held pull may wait on them


def not_the_route(err: BaseException) -> bool:
    """A read failure no other route mends: the lender dropped the bytes, or the read
    was asked wrongly. Any other may be the route's, and falls back inline."""
    from ..tensor.buffer import BufferDroppedError  # (here: most processes never load the engine)

    return isinstance(err, (BufferDroppedError, ValueError, TypeError))


def carries_lent(msg) -> bool:
    kind = type(msg)
    if kind is m.TaskReturn:
        return any(type(p) is m.LentPayload for p in msg.results)
    if kind is m.ExecuteTask or kind is m.StartActor:  # (the arguments inside the spec)
        return type(msg.spec.args) is m.LentPayload
    return type(getattr(msg, _FIELDS[kind])) is m.LentPayload


def _sender(conn):
    return conn.peer_id if conn.peer_id is not None else id(conn)


class Pulls:
    """Mixed into Core (which provides handle_message, drain, send_to, is_driver)."""

    def __init__(self) -> None:
        self.held: dict = {}  # sender -> deque of (conn, msg) waiting behind a pull
        self._unheld_waiters: list = []  # threading.Events of wait_unheld

    def wait_unheld(self, key, timeout: float) -> bool:
        """Any thread but the loop's: wait until the messages of sender ``key`` no longer
        wait behind a pull (False on timeout). A direct lane's call waits here: its
        sender's earlier messages run first (direct_lanes.py)."""
        if key not in self.held:
            return True
        done = threading.Event()
        self._unheld_waiters.append(done)
        if key not in self.held:  # (checked again after joining: unhold clears, then wakes)
            return True
        return done.wait(timeout)

    def unhold(self, key, backlog) -> None:
        """Loop: the messages of sender ``key`` held behind a pull have been handled."""
        if self.held.get(key) is backlog:
            del self.held[key]
        waiters, self._unheld_waiters = self._unheld_waiters, []
        for done in waiters:
            done.set()

    def hold_if_waiting(self, conn, msgs: list) -> bool:
        """Messages from a sender whose earlier message is still being pulled queue up."""
        backlog = self.held.get(_sender(conn))
        if backlog is None:
            return False
        for msg in msgs:
            if type(msg) in _NEVER_HELD:  # (the pull may be waiting for this very answer)
                self.handle_message(conn, msg)
            else:
                backlog.append((conn, msg))
        return True

    def start_pull(self, conn, msg, rest: list) -> bool:
        """Pull ``msg``'s bytes, then handle it; True: ``rest`` (the sender's later
        messages) waits for it too. A task or actor to start (from the controller) is
        pulled on its own: nothing else the controller says waits for it, and tasks
        and actors are not ordered among themselves."""
        if type(msg) is m.ExecuteTask or type(msg) is m.StartActor:
            in_background(self._pull_alone(conn, msg))
            return False
        key = _sender(conn)
        self.held[key] = collections.deque((conn, later) for later in rest)
        in_background(self._pull_in_order(key, conn, msg))
        return True

    async def _pull_alone(self, conn, msg) -> None:
        self.handle_message(conn, await self._pulled(conn, msg))
        if self.table.deltas or self._check:
            self.drain()

    async def _pull_in_order(self, key, conn, msg) -> None:
        backlog = self.held[key]
        try:
            while True:
                self.handle_message(conn, await self._pulled(conn, msg))
                while backlog:
                    conn, msg = backlog.popleft()
                    if type(msg) in LENT_TYPES and carries_lent(msg):
                        break
                    self.handle_message(conn, msg)
                else:
                    return
        finally:
            self.unhold(key, backlog)
            while backlog:  # (only if something above raised): the rest, as if just arrived
                conn, msg = backlog.popleft()
                self.on_messages(conn, [msg])
            if self.table.deltas or self._check:
                self.drain()

    async def _pulled(self, conn, msg):
        """``msg`` with its lent payloads read into payloads of our own."""
        if type(msg) is m.TaskReturn:
            results = []
            for i, payload in enumerate(msg.results):
                if type(payload) is m.LentPayload:
                    payload = await self._pull(conn, ids.object_id(msg.task_id, i + 1), payload)
                results.append(payload)
            return msg._replace(results=tuple(results))
        if type(msg) is m.ExecuteTask or type(msg) is m.StartActor:
            return msg._replace(spec=msg.spec._replace(args=await self._pull(conn, None, msg.spec.args)))
        if type(msg) is m.ObjectValue:  # a borrowed object: the host keeps one copy for its readers
            return msg._replace(payload=await self._pull(conn, msg.object_id, msg.payload, for_host=True))
        field = _FIELDS[type(msg)]
        return msg._replace(**{field: await self._pull(conn, None, getattr(msg, field))})

    async def _pull(self, conn, key: int | None, lent: m.LentPayload, for_host: bool = False) -> Payload:
        def inline(failure: BaseException):  # (a route that broke after its check: inline_reads.py)
            return self.read_inline(conn.peer_id, lent, failure)

        try:
            if for_host:  # (the driver reads borrowed objects into memory: nothing would free a block)
                payload = None if self.is_driver else await self.host_pull(key, lent, conn.peer_id)
                return payload if payload is not None else await pull_payload(None, lent, inline=inline)
            return await pull_payload(key if self.is_driver else None, lent, inline=inline)
        finally:
            if lent.token:  # (arguments, token 0: the caller keeps them until the call ends)
                self.send_to(conn.peer_id, m.PullDone(0, lent.token))

    async def host_pull(self, key: int, lent: m.LentPayload, owner: int) -> Payload | None:
        """The object pulled by this host's agent into the host's store (or found there);
        None: pull it yourself (the worker overrides)."""
        return None


async def pull_payload(key: int | None, lent: m.LentPayload, client=None, owner: int = 0, inline=None) -> Payload:
    """The bytes behind ``lent``, read into a new block of this host's store under
    ``key`` (when given and there is room; through ``client``, for ``owner``) or into
    memory. ``inline(failure)``: where the tensor engine fails, the bytes sent by their
    lender instead (a list, one per handle), unless the lender dropped them. Never
    raises: a failed pull is an ObjectLostError payload."""
    import numpy as np  # (here: a worker imports numpy only when a payload needs it)

    from ..objstore import serialization

    total, layout = layout_of_sizes([h.nbytes for h in lent.handles])
    client = client or serialization._client
    in_store = False
    try:
        block = None
        if key is not None and client is not None:
            try:
                block = await client.reserve_async(key, owner, total)
                in_store = True
            except Exception:  # noqa: BLE001 - the store is full: into memory instead
                block = None
        if block is None:
            block = memoryview(np.empty(total, dtype=np.uint8))  # (no zero-filling pass)
        timeout = max(60.0, total / 50e6)  # a slow link still finishes; a dead owner fails sooner
        # Every read settles before anything is decided: the block must not be freed
        # (and reused) while another read still writes into it.
        outcomes = await asyncio.gather(*(h.read_into(block[rel:rel + n], timeout=timeout) for h, (rel, n) in
                                          zip(lent.handles, layout, strict=True)), return_exceptions=True)
        failed = next((o for o in outcomes if isinstance(o, BaseException)), None)
        if failed is not None:
            if inline is None or any(map(not_the_route, outcomes)):
                raise failed
            for (rel, n), data in zip(layout, await inline(failed), strict=True):
                view = memoryview(data).cast("B")
                if view.nbytes != n:
                    raise RuntimeError(f"the lender sent {view.nbytes} bytes inline for a buffer of {n}")
                block[rel:rel + n] = view
        if in_store:
            client.seal(key)
            return Payload(lent.data, (), (), False, (key, total, layout, False))
        return Payload(lent.data, tuple(block[rel:rel + n].toreadonly() for rel, n in layout))  # (as the store's:
        # each reader gets read-only arrays or its own copy, never memory another reader writes)
    except Exception as err:  # noqa: BLE001 - the receiver gets the error
        if in_store:
            client.free((key, total, layout))
        from .. import exceptions as exc

        what = ids.to_hex(key, ids.OBJECT_HEX) if key is not None else "a large value"
        return system_error_payload(exc.ObjectLostError(what, f"pulling it from the sender's host failed: {err}"))
    finally:
        drop_lent(lent)  # our copies of the handles: their unpacked keys go

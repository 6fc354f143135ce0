"""The agent's copies of objects owned on other hosts: pulled once, shared here.

The driver's objects reach this host's processes through the agent (``Relay``). The
first time a large value passes, the agent writes it into this host's store and
hands the process a shared-memory descriptor instead of the bytes; later fetches of
the same object by other processes here are answered from that copy without asking
the owner again. The owner (the driver) remembers which hosts it sent the value to
and, when it frees the object, tells their agents to drop their copies
(``DropCopy``); readers still mapping a copy keep it until they unmap (the store's
pins). Values holding refs are not copied: their borrowers must be counted by the
owner, one by one.
"""

from __future__ import annotations

import logging

from ..objstore.client import LocalBackend, StoreClient
from ..objstore.serialization import SHM_THRESHOLD, Payload, system_error_payload
from . import messages as m
from .lent_payloads import drop_lent
from .portal import in_background

log = logging.getLogger("meshrt")

AGENT_OWNER = -1  # the owner id of the agent's own blocks (no worker has it)


class HostCache:
    def __init__(self, store, service) -> None:
        self.store = store
        # An agent's AgentInlineReads, once the head has named its host: for a value the
        # tensor engine cannot read (inline_reads.py). The head's own cache has none.
        self.inline = None
        backend = LocalBackend(store, AGENT_OWNER)
        backend.service = service  # (copies never make this loop wait for the disk: store_service.py)
        self.client = StoreClient(store.arena, backend)
        self.copies: dict[int, Payload] = {}  # object id -> its shared-memory payload here
        self.pulling: dict[int, list] = {}  # object id -> relays waiting for the pull under way
        self.lent_pulls: dict[int, list] = {}  # object id -> answers waiting for a worker's lent value
        self.owned_by: dict[int, set] = {}  # owner worker -> ids of its objects copied here
        self.dropped: set = set()  # objects their owners freed: a pull finishing later must not cache them

    def arrived(self, relay: m.Relay) -> m.Relay:
        """A value on its way from the driver to one of our processes."""
        value: m.ObjectValue = relay.msg
        cached = self.copies.get(value.object_id)
        if cached is None:
            payload = value.payload
            big = payload.shm is None and not payload.is_error and not payload.refs and payload.buffers and \
                sum(b.nbytes for b in payload.buffers) >= SHM_THRESHOLD
            if not big:
                return relay
            try:
                desc = self.client.put(value.object_id, AGENT_OWNER, list(payload.buffers), at_once=True)
            except Exception:  # no room without a spill: the bytes go on as they came
                return relay
            cached = self.copies[value.object_id] = Payload(payload.data, (), (), False, desc + (False,))
        return m.Relay(relay.dest, relay.src, m.ObjectValue(value.object_id, cached))

    def pull(self, relay: m.Relay, deliver, tell_owner) -> None:
        """A large value lent by the driver (``PullValue``): read it straight into this
        host's store once, then hand our processes the copy (see lending.py)."""
        value: m.PullValue = relay.msg
        oid = value.object_id
        done = m.Relay(relay.src, relay.dest, m.PullDone(oid, value.token))
        cached = self.copies.get(oid)
        if cached is not None or oid in self.pulling:
            tell_owner(done)  # a second lend of what we hold or are already pulling
            if cached is not None:
                deliver(m.Relay(relay.dest, relay.src, m.ObjectValue(oid, cached)))
            else:
                self.pulling[oid].append(relay)
            return
        self.pulling[oid] = [relay]
        in_background(self._pull(value, deliver, tell_owner, done))

    async def _pull(self, value: m.PullValue, deliver, tell_owner, done: m.Relay) -> None:
        oid = value.object_id
        _none, total, layout, stream = value.payload.shm
        timeout = max(60.0, total / 50e6)  # a slow link still finishes; a dead owner fails sooner
        in_store = False
        try:
            try:
                target = await self.client.reserve_async(oid, AGENT_OWNER, total)
                in_store = True
            except Exception:  # noqa: BLE001 - the store is full: pull into memory instead
                target = bytearray(total)
            await self._read(value, target, timeout)
            if not in_store:
                result = _inline(value.payload.data, memoryview(target), layout, stream)
            elif oid in self.dropped:  # freed by the owner meanwhile
                self.client.free((oid, total, layout))
                result = system_error_payload(_lost(oid, "the owner freed it while it was being pulled"))
            else:
                self.client.seal(oid)
                result = self.copies[oid] = Payload(value.payload.data, (), (), False, (oid, total, layout, stream))
        except Exception as err:  # noqa: BLE001 - the readers get the error
            if in_store and oid not in self.copies:
                self.client.free((oid, total, layout))
            result = system_error_payload(_lost(oid, err))
        finally:
            value.buffer.drop()  # our handle: its unpacked key goes
            tell_owner(done)
            waiting = self.pulling.pop(oid, [])
        for relay in waiting:
            deliver(m.Relay(relay.dest, relay.src, m.ObjectValue(oid, result)))

    async def _read(self, value: m.PullValue, target, timeout: float) -> None:
        """The lent block's bytes into ``target``: through the tensor engine, or (a route
        that broke after its check) inside a message from the driver."""
        from .pulls import not_the_route

        try:
            await value.buffer.read_into(target, timeout=timeout)
        except Exception as err:
            if self.inline is None or not_the_route(err):
                raise
            data = memoryview(await self.inline.read(value.buffer, err)).cast("B")
            block = memoryview(target).cast("B")
            if data.nbytes != block.nbytes:
                raise RuntimeError(f"the driver sent {data.nbytes} bytes inline for a block of {block.nbytes}") from err
            block[:] = data

    def pull_lent(self, conn, request: m.Request) -> None:
        """A process here got a large value lent by its owner, a process on another host
        (lent_payloads.py): read it into this host's store once; every process here that
        fetches it gets the copy. The owner tells us when to drop it (``DropCopy``, sent
        on by the controller)."""
        oid, lent, owner = request.args

        def answer(payload, req_id=request.req_id) -> None:
            if not conn.closed:  # a failed pull: each reader tries its own handles instead
                conn.send(m.Response(req_id, not payload.is_error, payload if not payload.is_error
                                     else RuntimeError("the host's pull failed")))

        if oid in self.dropped:  # freed already: a late fetch reads it for itself
            drop_lent(lent)
            conn.send(m.Response(request.req_id, False, RuntimeError("freed by its owner")))
            return
        cached = self.copies.get(oid)
        if cached is not None or oid in self.lent_pulls:
            drop_lent(lent)  # (unread: the owner lent it again)
            if cached is not None:
                answer(cached)
            else:
                self.lent_pulls[oid].append(answer)
            return
        self.lent_pulls[oid] = [answer]
        self.owned_by.setdefault(owner, set()).add(oid)
        in_background(self._pull_lent(oid, lent))

    async def _pull_lent(self, oid: int, lent: m.LentPayload) -> None:
        from .pulls import pull_payload

        result = None
        try:
            result = await pull_payload(oid, lent, self.client, AGENT_OWNER)
            if result.shm is not None:
                if oid in self.dropped:
                    self.client.free(result.shm)
                    result = system_error_payload(_lost(oid, "the owner freed it while it was being pulled"))
                else:
                    self.copies[oid] = result
        finally:  # every waiting reader hears back, whatever happened
            result = result or system_error_payload(_lost(oid, "the pull failed"))
            for answer in self.lent_pulls.pop(oid, ()):
                answer(result)

    def owner_gone(self, owner: int) -> None:
        """A worker died: copies of the objects it owned go (their readers keep what they map)."""
        for oid in self.owned_by.pop(owner, ()):
            self.drop(oid)

    def serve(self, conn, relay: m.Relay) -> bool:
        """A process here asks the driver for an object: answer from our copy if we have one."""
        cached = self.copies.get(relay.msg.object_id)
        if cached is None:
            return False
        conn.send(m.Relay(relay.src, relay.dest, m.ObjectValue(relay.msg.object_id, cached)))
        return True

    def drop(self, oid: int) -> None:
        """The owner freed the object."""
        self.dropped.add(oid)
        cached = self.copies.pop(oid, None)
        if cached is not None:
            self.client.free(cached.shm)


def _inline(data: bytes, block: memoryview, layout: tuple, stream: bool) -> Payload:
    views = [block[rel:rel + n] for rel, n in layout]
    if stream:
        data, views = bytes(views[0]), views[1:]
    return Payload(data, tuple(views))


def _lost(oid: int, err: BaseException):
    from .. import exceptions as exc
    from . import ids

    return exc.ObjectLostError(ids.to_hex(oid, ids.OBJECT_HEX), f"pulling the value from its owner's host failed: {err}")

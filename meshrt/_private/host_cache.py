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

from ..objstore.client import LocalBackend, StoreClient
from ..objstore.serialization import SHM_THRESHOLD, Payload
from . import messages as m

AGENT_OWNER = -1  # the owner id of the agent's own blocks (no worker has it)


class HostCache:
    def __init__(self, store) -> None:
        self.store = store
        self.client = StoreClient(store.arena, LocalBackend(store, AGENT_OWNER))
        self.copies: dict[int, Payload] = {}  # object id -> its shared-memory payload here

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
                desc = self.client.put(value.object_id, AGENT_OWNER, list(payload.buffers))
            except Exception:  # the store is full: the bytes go on as they came
                return relay
            cached = self.copies[value.object_id] = Payload(payload.data, (), (), False, desc + (False,))
        return m.Relay(relay.dest, relay.src, m.ObjectValue(value.object_id, cached))

    def serve(self, conn, relay: m.Relay) -> bool:
        """A process here asks the driver for an object: answer from our copy if we have one."""
        cached = self.copies.get(relay.msg.object_id)
        if cached is None:
            return False
        conn.send(m.Relay(relay.src, relay.dest, m.ObjectValue(relay.msg.object_id, cached)))
        return True

    def drop(self, oid: int) -> None:
        """The owner freed the object."""
        cached = self.copies.pop(oid, None)
        if cached is not None:
            self.client.free(cached.shm)

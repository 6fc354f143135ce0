"""Direct connections between workers, opened on first use and cached per peer.

Messages to one peer always take the same connection once one is attached, so
everything one process sends another arrives in the order it was sent. Messages
queue while the connection is being opened.
"""

from __future__ import annotations

import logging
import os

from . import messages as m
from . import wire

log = logging.getLogger("meshrt")


class PeerChannel:
    def __init__(self, core, peer: int) -> None:
        self.core = core
        self.peer = peer
        self.conn = None
        self.queue: list = []
        self.connecting = False
        self.dead = False
        self._task = None  # keeps the connecting task referenced

    def send(self, msg) -> None:
        conn = self.conn
        if conn is not None and not conn.closed:
            conn.send(msg)
            return
        if self.dead:
            return
        self.queue.append(msg)
        if not self.connecting:
            self.connecting = True
            self._task = self.core.io.loop.create_task(self._connect())

    async def _connect(self) -> None:
        core = self.core
        try:
            address = core.addresses.get(self.peer)
            if address is None:
                address = await core.request("worker_address", self.peer)
            if address is None:
                raise ConnectionError(f"worker {self.peer} is gone")
            conn = await wire.connect(
                address, core.token, on_messages=core.on_messages, on_close=core.on_peer_closed
            )
        except (OSError, ConnectionError) as err:
            self.connecting = False
            if self.conn is None:  # nobody dialled us meanwhile either
                log.debug("meshrt: cannot reach worker %s: %s", self.peer, err)
                self.dead = True
                self.queue.clear()
                core.unreachable(self.peer)
            return
        conn.peer_id = self.peer
        conn.send(m.Hello(core.worker_id, os.getpid(), core.listen_address, core.host_id))
        self.attach(conn)

    def attach(self, conn) -> None:
        self.connecting = False
        if self.conn is not None and not self.conn.closed:
            return  # keep the first: switching would reorder messages
        queued, self.queue = self.queue, []
        for msg in queued:  # queued first: a reply sent from another thread comes after
            conn.send(msg)
        self.conn = conn

    def closed(self, conn) -> None:
        if self.conn is conn:
            self.conn = None

"""Large driver objects reach other hosts by a one-sided pull, not inside a message.

When a process on an agent's host asks the driver for a value kept in the driver's
shared-memory store, the driver pins the block, wraps it in a TensorBuffer and
sends that small handle (``PullValue``). The agent reserves a block of its own
store and reads the bytes straight into it through the tensor engine (cross-memory
attach on one machine, UCX between machines), then says ``PullDone`` and the driver
lets the block go. The control connection carries ~1 KiB instead of the value, and
the bytes land once, in the store that serves the host's processes.

``MESHRT_PULL_ENGINE=0`` sends values inline instead.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys

from ..objstore.serialization import Payload
from . import messages as m
from . import ucx_routes
from .portal import in_background

log = logging.getLogger("meshrt")


class Lending:
    """Mixed into DriverCore (which provides io, send_to, note_copy and the inline path)."""

    def __init__(self) -> None:
        self.lent: dict[int, tuple] = {}  # token -> (object id, TensorBuffer, pinned block view)
        self._lend_tokens = itertools.count(1)

    def lend(self, entry, borrower: int, payload: Payload) -> bool:
        """Start lending ``payload``'s block to ``borrower``'s host; False: send it inline."""
        if payload.refs or payload.is_error or not ucx_routes.may_lend(self, self.host_of(borrower)):
            return False
        if not self.relay_for.get(borrower):  # only agents pull
            return False

        async def lend_now():
            try:
                block, buf = await self.io.loop.run_in_executor(None, _open_for_lending, payload.shm)
            except Exception as err:  # noqa: BLE001 - no engine here, or no pin: inline instead
                log.debug("meshrt: lending object %x failed (%s); sending it inline", entry.id, err)
                self.send_inline(entry, borrower, payload)
                return
            token = next(self._lend_tokens)
            self.lent[token] = (entry.id, buf, block)
            _key, total, layout, stream = payload.shm
            meta = Payload(payload.data, (), (), False, (None, total, layout, stream))
            self.send_to(borrower, m.PullValue(entry.id, meta, buf, token))

        self.note_copy(entry, borrower)
        in_background(lend_now())
        return True

    def on_pull_done(self, conn, msg: m.PullDone) -> None:
        lent = self.lent.pop(msg.token, None)
        if lent is not None:
            lent[1].drop()

    def stop_lending(self, object_id: int | None = None) -> None:
        """The object was freed (or the runtime stops): its lent blocks go."""
        for token, (oid, _buf, _block) in list(self.lent.items()):
            if object_id is None or oid == object_id:
                lent = self.lent.pop(token, None)  # PullDone may take it first, on the loop
                if lent is not None:
                    lent[1].drop()


def _open_for_lending(shm: tuple):
    from ..objstore import serialization
    from ..tensor import TensorBuffer
    from ..tensor.ucx import engine_or_none

    if engine_or_none() is None and os.environ.get("MESHRT_TENSOR_TRANSPORT") == "ucx":
        raise OSError("UCX is unavailable here")
    block = serialization._client.open_block(shm[:3])
    return block, TensorBuffer(block)


def close_engine_if_open() -> None:
    """At shutdown: the driver's UCX worker goes with its runtime (its sockets too)."""
    tensor_ucx = sys.modules.get("meshrt.tensor.ucx")
    if tensor_ucx is not None:
        tensor_ucx.close_engine()

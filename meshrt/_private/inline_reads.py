"""When a lent value's bytes cannot be read through the tensor engine, ask the lender
for them inside a message instead of losing the value.

Every host's UCX routes are checked as it joins (ucx_routes.py), but a route may break
later (a link goes down, an interface changes). The lender still holds the bytes it
lent: the reader sends ``InlineRead`` naming the buffers, the lender copies them
(only live buffers it registered, exactly as registered: tensor/buffer.py
``read_owned``) and answers ``InlineBytes`` over the control connection. The reader
also tells the head (``UcxRouteFailed``), which records the two hosts as cut and
tells every process, so later large values between them go inline from the start.
"""

from __future__ import annotations

import asyncio
import itertools
import logging

from ..objstore.serialization import Payload
from . import messages as m
from .portal import in_background

log = logging.getLogger("meshrt")


class InlineReadFailed(Exception):
    """The lender could not send the bytes either (it dropped them, or is gone)."""


class InlineReads:
    """Mixed into Core (which provides io, send_to, send_controller, host_id, host_of)."""

    def __init__(self) -> None:
        self._inline_reads: dict[int, tuple[int, asyncio.Future]] = {}  # req id -> (lender, answer)
        self._inline_ids = itertools.count(1)
        self._routes_reported: set = set()

    async def read_inline(self, lender: int, lent: m.LentPayload, failure: BaseException) -> list:
        """Loop: the bytes behind ``lent``'s handles, sent by ``lender`` inside a message."""
        self._report_route(lender, failure)
        regions = tuple((h._h.slot_ptr, h._h.generation, h._h.ptr, h._h.nbytes) for h in lent.handles)
        req_id = next(self._inline_ids)
        answer = asyncio.get_running_loop().create_future()
        self._inline_reads[req_id] = (lender, answer)
        log.info("meshrt: reading %d bytes from worker %d through UCX failed (%s); asking for them inline",
                 sum(n for *_, n in regions), lender, failure)
        wait_s = 30.0 + sum(n for *_, n in regions) / 10e6  # (a lender that died is noticed sooner)
        try:
            self.send_to(lender, m.InlineRead(req_id, regions))
            msg = await asyncio.wait_for(answer, wait_s)
        except TimeoutError:
            msg = m.InlineBytes(req_id, None, f"no answer in {wait_s:.0f} s")
        finally:
            self._inline_reads.pop(req_id, None)
        if msg.error is not None:
            raise InlineReadFailed(f"{failure}; asked to send the bytes inside a message instead, the lender "
                                   f"could not: {msg.error}")
        return list(msg.payload.buffers)

    def inline_reads_lost(self, lender: int) -> None:
        """Loop: ``lender`` died: its unanswered inline reads fail now."""
        for peer, answer in list(self._inline_reads.values()):
            if peer == lender and not answer.done():
                answer.set_result(m.InlineBytes(0, None, f"worker {lender} died"))

    def on_inline_read(self, conn, msg: m.InlineRead) -> None:
        """Lender: copy the named buffers off the loop and send them back."""
        reader = conn.peer_id

        async def answer() -> None:
            try:
                copies = await self.io.loop.run_in_executor(None, _copies, msg.regions)
                reply = m.InlineBytes(msg.req_id, Payload(b"", tuple(copies)))  # (out of band, every hop)
            except Exception as err:  # noqa: BLE001 - the reader hears why
                reply = m.InlineBytes(msg.req_id, None, f"{type(err).__name__}: {err}")
            self.send_to(reader, reply)

        if reader is not None:
            in_background(answer())

    def on_inline_bytes(self, conn, msg: m.InlineBytes) -> None:
        lender, answer = self._inline_reads.get(msg.req_id, (None, None))
        if answer is not None and lender == conn.peer_id and not answer.done():
            answer.set_result(msg)

    def _report_route(self, lender: int, failure: BaseException) -> None:
        """Tell the head once per host pair: it marks the pair cut for every process."""
        there = self.host_of(lender)
        pair = (self.host_id, there)
        if there is None or there == self.host_id or pair in self._routes_reported:
            return
        self._routes_reported.add(pair)
        self.send_controller(m.UcxRouteFailed(pair, str(failure)))


def _copies(regions: tuple) -> list:
    from ..tensor.buffer import read_owned

    return [read_owned(*region) for region in regions]

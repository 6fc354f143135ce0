"""When a lent value's bytes cannot be read through the tensor engine, ask the lender
for them inside a message instead of losing the value.

Every host's UCX routes are checked as it joins (ucx_routes.py), but a route may break
later (a link goes down, an interface changes). The lender still holds the bytes it
lent: the reader sends ``InlineRead`` naming the buffers, the lender copies them
(only live buffers it registered, exactly as registered: tensor/buffer.py
``read_owned``) and answers ``InlineBytes`` over the control connection. The reader
also tells the head (``UcxRouteFailed``), which records the two hosts as cut and
tells every process, so later large values between them go inline from the start.
A host's agent that cannot read a block the driver lent it asks the same way, on its
own connection to the head (``AgentInlineReads``).
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
        log.info("meshrt: reading %d bytes from worker %d through UCX failed (%s); asking for them inline",
                 sum(n for *_, n in regions), lender, failure)
        msg = await _ask(self._inline_reads, req_id, lender, regions,
                         lambda: self.send_to(lender, m.InlineRead(req_id, regions)))
        return list(_bytes_of(msg, failure, "the lender"))

    def inline_reads_lost(self, lender: int) -> None:
        """Loop: ``lender`` died: its unanswered inline reads fail now."""
        for peer, answer in list(self._inline_reads.values()):
            if peer == lender and not answer.done():
                answer.set_result(m.InlineBytes(0, None, f"worker {lender} died"))

    def on_inline_read(self, conn, msg: m.InlineRead) -> None:
        """Lender: copy the named buffers off the loop and send them back."""
        reader = conn.peer_id
        if reader is not None:
            in_background(answer_inline_read(msg, lambda reply: self.send_to(reader, reply)))

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


class AgentInlineReads:
    """An agent's inline reads, for the driver's values it pulls into its host's store
    (host_cache.py): asked of the head on the agent's own connection (the driver's
    controller answers them: host_directory.py), answered there too."""

    def __init__(self, send_head, host_id: int) -> None:
        self._send_head = send_head
        self._host_id = host_id
        self._answers: dict[int, tuple[int, asyncio.Future]] = {}  # req id -> (lender, answer)
        self._ids = itertools.count(1)
        self._reported = False

    async def read(self, buffer, failure: BaseException) -> bytes:
        """The bytes of the driver's lent ``buffer``."""
        if not self._reported:  # (the driver is on the head's host)
            self._reported = True
            self._send_head(m.UcxRouteFailed((self._host_id, 0), str(failure)))
        h = buffer._h
        regions = ((h.slot_ptr, h.generation, h.ptr, h.nbytes),)
        req_id = next(self._ids)
        log.info("meshrt agent: reading %d bytes from the driver through UCX failed (%s); asking for them inline",
                 h.nbytes, failure)
        msg = await _ask(self._answers, req_id, 0, regions, lambda: self._send_head(m.InlineRead(req_id, regions)))
        return _bytes_of(msg, failure, "the driver")[0]

    def answered(self, msg: m.InlineBytes) -> None:
        _lender, answer = self._answers.get(msg.req_id, (None, None))
        if answer is not None and not answer.done():
            answer.set_result(msg)


async def _ask(answers: dict, req_id: int, lender: int, regions: tuple, send) -> m.InlineBytes:
    """``send`` an InlineRead and wait for its answer, recorded in ``answers`` meanwhile;
    no answer in 30 s plus 10 MB/s of the size is one (a lender that died is noticed
    sooner: ``inline_reads_lost``)."""
    answer = asyncio.get_running_loop().create_future()
    answers[req_id] = (lender, answer)
    wait_s = 30.0 + sum(n for *_, n in regions) / 10e6
    try:
        send()
        return await asyncio.wait_for(answer, wait_s)
    except asyncio.TimeoutError:  # (not the builtin one before Python 3.11)
        return m.InlineBytes(req_id, None, f"no answer in {wait_s:.0f} s")
    finally:
        answers.pop(req_id, None)


def _bytes_of(msg: m.InlineBytes, failure: BaseException, lender: str) -> tuple:
    if msg.error is not None:
        raise InlineReadFailed(f"{failure}; asked to send the bytes inside a message instead, {lender} "
                               f"could not: {msg.error}")
    return msg.payload.buffers


async def answer_inline_read(msg: m.InlineRead, reply) -> None:
    """Lender: copy the buffers ``msg`` names, off the loop, and ``reply`` with them (or
    with why not)."""
    try:
        copies = await asyncio.get_running_loop().run_in_executor(None, _copies, msg.regions)
        answer = m.InlineBytes(msg.req_id, Payload(b"", tuple(copies)))  # (out of band, every hop)
    except Exception as err:  # noqa: BLE001 - the reader hears why
        answer = m.InlineBytes(msg.req_id, None, f"{type(err).__name__}: {err}")
    reply(answer)


def _copies(regions: tuple) -> list:
    from ..tensor.buffer import read_owned

    return [read_owned(*region) for region in regions]

"""Large values to processes on other hosts: lent, not sent.

A process answering a peer on another host with a large value (an actor call's
result, a stream item, a Port value, an object the peer fetches) keeps the value's
buffers where they are, wraps each in a TensorBuffer and sends the small handles
(``LentPayload``). The receiver reads the bytes through the tensor engine (UCX
between machines, cross-memory attach within one) and says ``PullDone``, and the
buffers go (pulls.py is the receiving side). A call's large arguments to an actor on
another host are lent the same way, with token 0: no ``PullDone``, the caller keeps
them until the call is over, so a call retried on a restarted actor can pull them
again. ``MESHRT_PULL_ENGINE=0`` sends the bytes inside the messages instead.
"""

from __future__ import annotations

import asyncio
import itertools
import logging

from ..objstore.serialization import SHM_THRESHOLD, Payload
from . import messages as m
from . import ucx_routes
from .portal import in_background

log = logging.getLogger("meshrt")
_tokens = itertools.count(1)


def lendable(payload) -> bool:
    """A large value held in memory, with no refs inside (whose borrowers its sender
    must count) and not an error."""
    return (type(payload) is Payload and payload.shm is None and payload.loans is None and bool(payload.buffers)
            and not payload.refs
            and not payload.is_error and sum(memoryview(b).nbytes for b in payload.buffers) >= SHM_THRESHOLD)


def _engine_ready(core, dest_host: int | None) -> bool:
    """Lending needs the tensor engine: without UCX a peer on another machine could
    not read the handles (cross-memory attach reaches this machine only); nor may UCX
    lack a route between the two hosts (ucx_routes.py)."""
    if not ucx_routes.may_lend(core, dest_host):
        return False
    from ..tensor.ucx import engine_or_none

    return engine_or_none() is not None


def lend_out(core, payload, dest: int):
    """Worker, core loop: ``payload`` for ``dest`` on another host, lent when large
    (else as is). Nothing is lent to a peer known dead: no PullDone would come."""
    if not lendable(payload) or dest in core.gone_peers or not _engine_ready(core, core.host_of(dest)):
        return payload
    try:
        return _lend(core, payload, dest, payload.data, payload.buffers)
    except Exception as err:  # noqa: BLE001 - the bytes go inline instead
        log.debug("meshrt: lending a value failed (%s); sending it inline", err)
        return payload


def lend_args(core, payload):
    """Any process: a call's arguments for an actor on another host, lent when large.
    The caller drops the handles when the call is over (``release_payload``). (The
    callee's host is not known here: while any host is unreached they go inline.)"""
    if not lendable(payload) or not _engine_ready(core, None):
        return payload
    try:
        return m.LentPayload(payload.data, _handles(payload.buffers), 0)
    except Exception as err:  # noqa: BLE001
        log.debug("meshrt: lending call arguments failed (%s); sending them inline", err)
        return payload


def _handles(buffers) -> tuple:
    """One TensorBuffer per buffer; none left registered if one fails."""
    from ..tensor import TensorBuffer

    handles: list = []
    try:
        for b in buffers:
            handles.append(TensorBuffer(memoryview(b).cast("B")))
    except BaseException:
        drop_handles(handles)
        raise
    return tuple(handles)


def drop_handles(handles) -> None:
    """The owner's buffers go (or, for a holder's copies, their unpacked keys)."""
    for handle in handles:
        handle.drop()


def drop_lent(lent: m.LentPayload) -> None:
    drop_handles(lent.handles)


def _lend(core, keep, dest: int, data: bytes, buffers) -> m.LentPayload:
    """Core loop: register the handles under a new token until ``dest`` is done;
    ``keep`` (the payload, or a pinned store block) lives as long."""
    handles = _handles(buffers)
    token = next(_tokens)
    core.lent_out[token] = (dest, handles, keep)
    return m.LentPayload(data, handles, token)


def lend_value(core, entry, borrower: int, payload: Payload) -> bool:
    """Worker, core loop: lend a stored value a peer on another host fetches; False:
    send it inline."""
    if (payload.refs or payload.is_error or borrower in core.gone_peers
            or not _engine_ready(core, core.host_of(borrower))):
        return False
    core.note_copy(entry, borrower)  # (now: a free while we lend must still reach its host's agent)

    async def lend_now():
        try:  # off the loop: pinning the block is a request to this host's store
            block, data, parts = await asyncio.get_running_loop().run_in_executor(None, _open_block, payload)
            lent = _lend(core, block, borrower, data, parts)  # (on the loop, as lent_out is used)
        except Exception as err:  # noqa: BLE001 - the bytes go inline
            log.debug("meshrt: lending object %x failed (%s); sending it inline", entry.id, err)
            core.send_inline(entry, borrower, payload)
            return
        if borrower in core.gone_peers:  # died meanwhile
            on_pulled(core, m.PullDone(0, lent.token))
            return
        core.send_to(borrower, m.ObjectValue(entry.id, lent))

    in_background(lend_now())
    return True


def _open_block(payload: Payload) -> tuple:
    """(block, pickle bytes, buffer views) of a stored value, pinned while they live."""
    from ..objstore import serialization

    key, total, layout, stream = payload.shm
    block = serialization._client.open_block((key, total, layout))
    parts = [block[rel:rel + n] for rel, n in layout]
    data = payload.data
    if stream:
        data, parts = bytes(parts[0]), parts[1:]
    return block, data, parts


def on_pulled(core, msg: m.PullDone) -> None:
    """Worker: the peer has the bytes; the buffers go."""
    lent = core.lent_out.pop(msg.token, None)
    if lent is not None:
        drop_handles(lent[1])


def forget_lent(core, peer: int) -> None:
    """Worker: ``peer`` died; what was lent to it goes."""
    for token in [t for t, lent in core.lent_out.items() if lent[0] == peer]:
        on_pulled(core, m.PullDone(0, token))

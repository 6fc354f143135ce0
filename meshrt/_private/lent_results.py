"""Large values from processes on other hosts to the driver: pulled, not sent.

A process on an agent's host that answers the driver with a large value (an actor
method returning a big tensor) keeps the value's buffers where they are, wraps each
in a TensorBuffer and answers with the small handles (``LentPayload``). The same
goes for a value it owns that the driver fetches (its block in the host's store
stays pinned meanwhile). The driver reads the bytes straight into a new block of its
own store through the tensor engine, carries on with that block, and says
``PullDone`` so the process lets the buffers go. ``MESHRT_PULL_ENGINE=0`` sends the
bytes inline instead.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os

from ..objstore.client import layout_of_sizes
from ..objstore.serialization import SHM_THRESHOLD, Payload, system_error_payload
from . import ids
from . import messages as m
from .portal import in_background

log = logging.getLogger("meshrt")
_tokens = itertools.count(1)


def lend_results(core, results: tuple, dest: int) -> tuple:
    """Worker, core loop: the results to send, large ones to another host's driver lent."""
    if dest != 0 or not core.remote_peer(dest) or os.environ.get("MESHRT_PULL_ENGINE") == "0":
        return results
    out = []
    for payload in results:
        if (type(payload) is Payload and payload.shm is None and payload.buffers and not payload.refs
                and not payload.is_error and sum(memoryview(b).nbytes for b in payload.buffers) >= SHM_THRESHOLD):
            try:
                payload = _lend(core, payload)
            except Exception as err:  # noqa: BLE001 - no engine here: the bytes go inline
                log.debug("meshrt: lending a result failed (%s); sending it inline", err)
        out.append(payload)
    return tuple(out)


def _lend(core, payload: Payload) -> m.LentPayload:
    from ..tensor import TensorBuffer

    handles = tuple(TensorBuffer(memoryview(b).cast("B")) for b in payload.buffers)
    token = next(_tokens)
    core.lent_results[token] = handles
    return m.LentPayload(payload.data, handles, token)


def lend_value(core, entry, borrower: int, payload: Payload) -> bool:
    """Worker, core loop: lend a stored value the driver fetches; False: send inline."""
    if borrower != 0 or not core.lend_to_driver or payload.refs or payload.is_error \
            or os.environ.get("MESHRT_PULL_ENGINE") == "0":
        return False

    async def lend_now():
        try:  # off the loop: pinning the block is a request to this host's store
            lent = await asyncio.get_running_loop().run_in_executor(None, _lend_block, core, payload)
        except Exception as err:  # noqa: BLE001 - no engine here: the bytes go inline
            log.debug("meshrt: lending object %x failed (%s); sending it inline", entry.id, err)
            core.send_inline(entry, borrower, payload)
            return
        core.send_to(borrower, m.ObjectValue(entry.id, lent))

    in_background(lend_now())
    return True


def _lend_block(core, payload: Payload) -> m.LentPayload:
    from ..objstore import serialization
    from ..tensor import TensorBuffer

    key, total, layout, stream = payload.shm
    block = serialization._client.open_block((key, total, layout))  # pinned while the views live
    parts = [block[rel:rel + n] for rel, n in layout]
    data = payload.data
    if stream:
        data, parts = bytes(parts[0]), parts[1:]
    handles = tuple(TensorBuffer(part) for part in parts)
    token = next(_tokens)
    core.lent_results[token] = handles
    return m.LentPayload(data, handles, token)


def pull_value(core, conn, msg: m.ObjectValue) -> None:
    """Driver, core loop: read a lent value into the store, then take it as fetched."""

    async def pull():
        payload = await _pull_one(msg.object_id, msg.payload)
        core.send_to(conn.peer_id, m.PullDone(0, msg.payload.token))
        core.on_object_value(conn, msg._replace(payload=payload))

    in_background(pull())


def on_result_pulled(core, msg: m.PullDone) -> None:
    """Worker: the driver has the bytes; the buffers go."""
    for handle in core.lent_results.pop(msg.token, ()):
        handle.drop()


def pull_results(core, conn, msg: m.TaskReturn) -> None:
    """Driver, core loop: read lent results into the store, then handle the reply."""

    async def pull():
        results = []
        for i, payload in enumerate(msg.results):
            if type(payload) is m.LentPayload:
                payload = await _pull_one(ids.object_id(msg.task_id, i + 1), payload)
                core.send_to(conn.peer_id, m.PullDone(0, msg.results[i].token))
            results.append(payload)
        core.on_task_return(conn, msg._replace(results=tuple(results)))

    in_background(pull())


async def _pull_one(key: int, lent: m.LentPayload) -> Payload:
    from ..objstore import serialization

    total, layout = layout_of_sizes([h.nbytes for h in lent.handles])
    client = serialization._client
    block, in_store = None, False
    try:
        try:
            block = client.reserve(key, 0, total)
            in_store = True
        except Exception:  # noqa: BLE001 - the store is full: into memory instead
            block = memoryview(bytearray(total))
        timeout = max(60.0, total / 50e6)
        await asyncio.gather(*(h.read_into(block[rel:rel + n], timeout=timeout) for h, (rel, n) in
                               zip(lent.handles, layout, strict=True)))
        if in_store:
            client.seal(key)
            return Payload(lent.data, (), (), False, (key, total, layout, False))
        return Payload(lent.data, tuple(block[rel:rel + n] for rel, n in layout))
    except Exception as err:  # noqa: BLE001 - the caller gets the error
        if in_store:
            client.free((key, total, layout))
        from .. import exceptions as exc

        return system_error_payload(exc.ObjectLostError(ids.to_hex(key, 36),
                                                        f"pulling the result from its host failed: {err}"))

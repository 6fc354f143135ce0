"""Which hosts the tensor engine (UCX) reaches: checked as each agent joins.

Large values between hosts are lent and pulled through UCX (lent_payloads.py,
lending.py). TCP reaching a host does not mean UCX does: UCX picks its own
interfaces (it skips bridge devices, UCX_NET_DEVICES narrows them), so a host joined
over a bridge could take calls but every pull from it would fail. So before a host
counts as joined (``meshrt.hosts()``), the head and its agent each read a few bytes
the other lent through the engine. A host where either read fails is marked
unreached: its processes, and everyone sending to it, put large values inside the
messages instead (as ``MESHRT_PULL_ENGINE=0`` does everywhere), and the head says so
once. Hosts on the head's own machine need no check: they attach to each other's
memory directly.

Only routes to and from the head are checked: two hosts that both reach the head but
not each other still fail their pulls, with an error naming the setting. A process
that does not know the host of the actor it calls sends that call's large arguments
inline while any host is unreached.
"""

from __future__ import annotations

import asyncio
import os

from . import messages as m
from .procutil import machine_id

PROBE_TIMEOUT_S = 10.0  # each side's read; a route UCX lacks fails at once (UCS_ERR_UNREACHABLE)
_PROBE_BYTES = 16
HINT = ("UCX_NET_DEVICES names the interfaces UCX may use; UCX skips bridge devices unless "
        "UCX_TCP_BRIDGE_ENABLE=y")


def pull_engine_on() -> bool:
    """``MESHRT_PULL_ENGINE=0`` sends every large value between hosts inline."""
    return os.environ.get("MESHRT_PULL_ENGINE") != "0"


def may_lend(core, dest_host: int | None) -> bool:
    """Lenders: may a large value for a process on ``dest_host`` be lent (pulled
    through the engine) rather than sent inline?"""
    return pull_engine_on() and not unreached(core, dest_host)


def probe_needed(agent_machine: str) -> bool:
    """Only values between machines take UCX, and only while the pull engine is on."""
    if not pull_engine_on():
        return False
    return agent_machine != machine_id() or os.environ.get("MESHRT_TENSOR_TRANSPORT") == "ucx"


def lent_probe():
    """(TensorBuffer, its bytes): a few random bytes for the other side to read.
    Raises OSError when UCX cannot be opened here."""
    from ..tensor import TensorBuffer
    from ..tensor.ucx import Engine

    Engine.get()  # (raises: a buffer without the engine reaches this machine only)
    data = bytearray(os.urandom(_PROBE_BYTES))
    return TensorBuffer(data), bytes(data)


def read_probe(handle, expected: bytes | None = None) -> str | None:
    """Blocking: read the other side's probe; None when the bytes came, else why not."""
    got = bytearray(_PROBE_BYTES)
    try:
        handle.read_into(got, timeout=PROBE_TIMEOUT_S).get(timeout=PROBE_TIMEOUT_S + 5)
    except Exception as err:  # noqa: BLE001 - any failure means: not this way
        return f"{type(err).__name__}: {err}"
    finally:
        handle.drop()
    if expected is not None and bytes(got) != expected:
        return "the bytes read differ from those lent"
    return None


async def check_host(directory, host) -> str | None:
    """Controller: do the head and ``host``'s agent reach each other through UCX?
    None when both reads worked, else why not (said in the warning)."""
    loop = asyncio.get_running_loop()
    try:
        mine, data = await loop.run_in_executor(None, lent_probe)
    except Exception as err:  # noqa: BLE001
        return f"UCX is unavailable on the head ({err})"
    answer = loop.create_future()
    directory.probes[host.id] = answer
    try:
        host.conn.send(m.UcxProbe(mine, data))
        try:
            reply = await asyncio.wait_for(answer, PROBE_TIMEOUT_S + 10)
        except asyncio.TimeoutError:
            return f"its agent did not answer the check within {PROBE_TIMEOUT_S + 10:g} s"
    finally:
        directory.probes.pop(host.id, None)
        mine.drop()
    if reply.error is not None:
        return f"the agent could not read from the head: {reply.error}"
    why = await loop.run_in_executor(None, read_probe, reply.handle, reply.data)
    return None if why is None else f"the head could not read from the agent: {why}"


def answer_check(handle, expected: bytes) -> tuple:
    """Agent, off its loop: read the head's probe, and lend one back. (The reply, and
    the agent's buffer: it keeps that for its life, 16 bytes the head may be reading.)"""
    why = read_probe(handle, expected)
    if why is not None:
        return m.UcxProbeReply(why), None
    try:
        mine, data = lent_probe()
    except Exception as err:  # noqa: BLE001
        return m.UcxProbeReply(f"UCX is unavailable on the agent ({err})"), None
    return m.UcxProbeReply(None, mine, data), mine


def unreached(core, dest_host: int | None) -> bool:
    """Lenders: must a large value for a process on ``dest_host`` (None: not known
    here) travel inline, because UCX does not reach one end?"""
    hosts = core.ucx_unreached
    if not hosts:
        return False
    return dest_host is None or dest_host in hosts or core.host_id in hosts

"""Which hosts the tensor engine (UCX) connects: checked as each agent joins.

Large values between hosts are lent and pulled through UCX (lent_payloads.py,
lending.py). TCP reaching a host does not mean UCX does: UCX picks its own
interfaces (it skips bridge devices, UCX_NET_DEVICES narrows them), so a host joined
over a bridge could take calls but every pull from it would fail. So before a host
counts as joined (``meshrt.hosts()``), the head and its agent each read a few bytes
the other lent through the engine, and then the new agent and every agent already
checked on another machine read each other's (the bytes each lent the head, kept for
its life). Where a read fails, the route is cut: large values between the processes
at its two ends travel inside the messages instead (as ``MESHRT_PULL_ENGINE=0`` does
everywhere), and the head says so once. A host the head cannot reach is cut from
every host. Hosts on the head's own machine need no check: they attach to each
other's memory directly, and reach the rest as the head does.

A process that does not know the host of the actor it calls sends that call's large
arguments inline while a cut touches its host (or isolates any host).
"""

from __future__ import annotations

import asyncio
import itertools
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


def read_probe(handle, expected: bytes) -> str | None:
    """Blocking: read the other side's probe; None when the bytes came, else why not.
    (The caller drops ``handle``: the head passes some on to other agents.)"""
    return read_probes([(handle, expected)])[0]


def read_probes(probes: list) -> list:
    """Blocking: read each (handle, bytes it must find) at once, so that a few reads
    that time out delay the rest by one timeout in all; why each failed (None: it
    worked)."""
    started = []
    for handle, expected in probes:
        got = bytearray(_PROBE_BYTES)
        try:
            started.append((handle.read_into(got, timeout=PROBE_TIMEOUT_S), got, expected))
        except Exception as err:  # noqa: BLE001 - (said below)
            started.append((err, got, expected))
    whys = []
    for reading, got, expected in started:
        try:
            if isinstance(reading, Exception):
                raise reading
            reading.get(timeout=PROBE_TIMEOUT_S + 5)
        except Exception as err:  # noqa: BLE001 - any failure means: not this way
            whys.append(without_fall_back_hint(f"{type(err).__name__}: {err}"))
            continue
        whys.append(None if bytes(got) == expected else "the bytes read differ from those lent")
    return whys


async def check_host(directory, host) -> str | None:
    """Controller: do the head and ``host``'s agent reach each other through UCX?
    None when both reads worked (``host.lent_probe`` then holds what its agent lent),
    else why not (said in the warning)."""
    loop = asyncio.get_running_loop()
    try:
        mine, data = await loop.run_in_executor(None, lent_probe)
    except Exception as err:  # noqa: BLE001
        return f"UCX is unavailable on the head ({err})"
    try:
        reply = await _ask(directory, host, lambda check_id: m.UcxProbe(check_id, mine, data))
    finally:
        mine.drop()
    if isinstance(reply, str):
        return reply
    if reply.error is not None:
        return f"the agent could not read from the head: {reply.error}"
    why = await loop.run_in_executor(None, read_probe, reply.handle, reply.data)
    if why is not None:
        reply.handle.drop()
        return f"the head could not read from the agent: {why}"
    host.lent_probe = (reply.handle, reply.data)
    return None


def peer_check_needed(host, peer) -> bool:
    """Between two agents, as between the head and one: only across machines."""
    return peer.lent_probe is not None and (
        host.machine != peer.machine or os.environ.get("MESHRT_TENSOR_TRANSPORT") == "ucx")


async def check_peers(directory, host) -> list:
    """Controller, right after ``check_host`` passed (so that of two hosts checked at
    once, exactly one finds the other here): do ``host`` and each agent already
    checked reach each other? The (peer, why) of those that do not."""
    peers = [p for p in directory.hosts.values()
             if p is not host and p.alive and not p.leaving and peer_check_needed(host, p)]
    if not peers:
        return []
    handle, data = host.lent_probe
    replies = await asyncio.gather(_read_peers(directory, host, [(p.id, *p.lent_probe) for p in peers]),
                                   *(_read_peers(directory, p, [(host.id, handle, data)]) for p in peers))
    cut = []
    for peer, theirs in zip(peers, replies[1:], strict=True):
        why = replies[0].get(peer.id)
        if why is not None:
            why = f"{host.name!r} could not read from {peer.name!r}: {why}"
        elif theirs.get(host.id) is not None:
            why = f"{peer.name!r} could not read from {host.name!r}: {theirs[host.id]}"
        if why is not None and peer.alive:
            cut.append((peer, why))
    return cut


async def _read_peers(directory, host, peers: list) -> dict:
    """``host``'s agent reads each of ``peers`` (host id, handle, bytes): {host id: why}
    for those it could not."""
    peers = tuple(peers)
    reply = await _ask(directory, host, lambda check_id: m.UcxPeerCheck(check_id, peers))
    return {peer_id: reply for peer_id, _, _ in peers} if isinstance(reply, str) else reply.failed


_check_ids = itertools.count(1)


async def _ask(directory, host, message):
    """Send ``message(check_id)`` to ``host``'s agent: its answer, or (a str) why none
    came."""
    check_id = next(_check_ids)
    answer = asyncio.get_running_loop().create_future()
    directory.ucx_checks[check_id] = (host.id, answer)
    try:
        host.conn.send(message(check_id))
        return await asyncio.wait_for(answer, PROBE_TIMEOUT_S + 10)
    except asyncio.TimeoutError:
        return f"its agent did not answer the check within {PROBE_TIMEOUT_S + 10:g} s"
    finally:
        directory.ucx_checks.pop(check_id, None)


def end_checks(directory, why: str, host_id: int | None = None) -> None:
    """Controller: the checks waiting on ``host_id``'s agent (None: on any) end now."""
    for waited_on, answer in list(directory.ucx_checks.values()):
        if host_id in (None, waited_on) and not answer.done():
            answer.set_result(why)


def answer_check(probe: m.UcxProbe) -> tuple:
    """Agent, off its loop: read the head's probe, and lend one back. (The reply, and
    the agent's buffer: it keeps that for its life, 16 bytes the head and the other
    agents may read.)"""
    try:
        why = read_probe(probe.handle, probe.data)
    finally:
        probe.handle.drop()
    if why is not None:
        return m.UcxProbeReply(probe.check_id, why), None
    try:
        mine, data = lent_probe()
    except Exception as err:  # noqa: BLE001
        return m.UcxProbeReply(probe.check_id, f"UCX is unavailable on the agent ({err})"), None
    return m.UcxProbeReply(probe.check_id, None, mine, data), mine


async def read_peers(peers: tuple) -> dict:
    """Agent: read each other host's probe; {host id: why} where it failed."""
    try:
        whys = await asyncio.get_running_loop().run_in_executor(
            None, read_probes, [(handle, data) for _, handle, data in peers])
    finally:
        for _, handle, _ in peers:
            handle.drop()
    return {peer_id: why for (peer_id, _, _), why in zip(peers, whys, strict=True) if why is not None}


def unreached(core, dest_host: int | None) -> bool:
    """Lenders: must a large value for a process on ``dest_host`` (None: not known
    here) travel inline, because UCX does not connect this host and that one?"""
    cuts = core.ucx_unreached  # {host}: cut from every host; {a, b}: from each other
    if not cuts:
        return False
    here = core.host_id
    for cut in cuts:
        if len(cut) == 1 and (here in cut or dest_host is None or dest_host in cut):
            return True
        if here in cut and (dest_host is None or dest_host in cut):
            return True
    return False


def without_fall_back_hint(why: str) -> str:
    """A UCX failure told without its advice to send values inline: meshrt does that
    by itself for the hosts it names."""
    from ..tensor.ucx import NO_ROUTE_FALL_BACK

    return why.replace(NO_ROUTE_FALL_BACK, "")

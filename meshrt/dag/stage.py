"""A compiled graph's part in one actor: a thread that, for each execution, runs the
actor's methods of the graph in order, reading their inputs from the graph's sockets
and writing each result to the sockets of those who need it.

The thread runs beside the actor's ordinary calls (as Ray's compiled graphs run in a
concurrency group of their own), so the actor keeps answering them; a method of the
graph that is ``async def`` runs on the actor's event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from . import channel

_stages: dict[bytes, dict] = {}  # graph id -> this process's listener, until the graph starts
_lock = threading.Lock()


@dataclass
class Op:
    """One method call of the graph in this actor. Each argument is ("const", value),
    ("edge", edge id) or ("local", op id: an earlier op of this actor)."""

    op_id: int
    method: str
    args: list
    kwargs: dict
    outs: list = field(default_factory=list)  # edge ids its result goes out on

    def in_edges(self) -> list[int]:
        """The edges it reads, each once."""
        specs = (*self.args, *self.kwargs.values())
        return list(dict.fromkeys(what for kind, what in specs if kind == "edge"))


class Failure:
    """What an execution gets in place of a value whose method raised (or upstream of it)."""

    def __init__(self, error_data: bytes) -> None:
        self.error_data = error_data


def stage_listen(instance: Any, graph_id: bytes) -> tuple[str, str | None, tuple]:
    """(in the actor) Listeners for the graph's edges into this actor: (address on this
    host, TCP address for other hosts or None, namespace)."""
    from .._private import state

    listeners, local, remote = listeners_for(graph_id, getattr(state.core(), "listen_address", ""))
    with _lock:
        _stages[graph_id] = {"listeners": listeners}
    return local, remote, channel.namespace_id()


def listeners_for(graph_id: bytes, peer_address: str) -> tuple[list, str, str | None]:
    """A Unix listener, and a TCP one where this process's peers reach it over TCP."""
    from .._private.addresses import parse_tcp

    sock, local = channel.listen(graph_id)
    listeners, remote = [sock], None
    if peer_address.startswith("tcp:"):
        host = parse_tcp(peer_address)[0]
        if host not in ("", "0.0.0.0", "::"):
            tcp, remote = channel.listen_tcp(host)
            listeners.append(tcp)
    return listeners, local, remote


def stage_drop(instance: Any, graph_id: bytes) -> None:
    """(in the actor) Forget a graph that will not start (its setup failed elsewhere)."""
    with _lock:
        setup = _stages.pop(graph_id, None)
    if setup is not None:
        for sock in setup["listeners"]:
            sock.close()


def stage_start(instance: Any, graph_id: bytes, ops: list[Op], out_addresses: dict[int, str],
                in_edges: list[int], timeout: float) -> None:
    """(in the actor) Connect this actor's outgoing edges, take its incoming ones, and
    start the thread that runs its ops for every execution."""
    from .._private import state

    core = state.core()
    with _lock:
        setup = _stages.pop(graph_id)
    listeners = setup["listeners"]
    outs: dict[int, Any] = {}
    try:
        for edge, address in out_addresses.items():
            outs[edge] = channel.connect(address, core.token, graph_id, edge)
        ins = channel.accept(listeners, core.token, graph_id, set(in_edges), timeout)
    except BaseException:
        for sock in outs.values():
            sock.close()
        raise
    finally:
        for sock in listeners:
            sock.close()
    loop = getattr(getattr(core, "executor", None), "user_loop", None)
    thread = threading.Thread(target=_run, args=(instance, ops, ins, outs, loop), daemon=True,
                              name=f"meshrt-dag-{graph_id.hex()[:8]}")
    thread.start()


def _run(instance: Any, ops: list[Op], ins: dict, outs: dict, loop) -> None:
    from ..objstore.serialization import error_payload

    reads = [(op, op.in_edges()) for op in ops]  # (worked out once, not per execution)
    try:
        while True:
            done: dict[int, Any] = {}
            for op, edges in reads:
                got = {edge: channel.recv(ins[edge]) for edge in edges}
                args = [_value(spec, got, done) for spec in op.args]
                kwargs = {key: _value(spec, got, done) for key, spec in op.kwargs.items()}
                failed = next((v for v in (*args, *kwargs.values()) if isinstance(v, Failure)), None)
                if failed is not None:
                    result = failed  # (an input failed: so does this, with the first cause)
                else:
                    try:
                        result = getattr(instance, op.method)(*args, **kwargs)
                        if inspect.isawaitable(result):
                            result = _on_loop(result, loop)
                    except Exception as err:  # noqa: BLE001 - travels to the driver
                        name = f"{type(instance).__name__}.{op.method}"
                        result = Failure(error_payload(err, name, os.getpid(), skip_frames=1).data)
                done[op.op_id] = result
                if op.outs:
                    encoded = _encoded(result, f"{type(instance).__name__}.{op.method}")  # (once for every edge)
                    for edge in op.outs:
                        channel.write(outs[edge], encoded)
    except channel.ChannelClosed:
        pass  # (torn down, or a neighbour died: closing ours passes it on)
    except BaseException:  # (a bug here must not leave the driver waiting: closing ours tells it)
        import logging

        logging.getLogger("meshrt").exception("meshrt: a compiled graph's thread failed")
    finally:
        for sock in (*ins.values(), *outs.values()):
            sock.close()


def _value(spec: tuple, got: dict, done: dict) -> Any:
    kind, what = spec
    return what if kind == "const" else got[what] if kind == "edge" else done[what]


def _encoded(result: Any, name: str) -> list:
    """A result as a message; one that cannot be pickled as the error that says so."""
    from ..objstore.serialization import error_payload

    try:
        return channel.encode(result)
    except Exception as err:  # noqa: BLE001
        error = TypeError(f"{name} returned a value that cannot be serialized: {err}")
        return channel.encode(Failure(error_payload(error, name, os.getpid()).data))


def _on_loop(awaitable, loop) -> Any:
    if loop is None:  # (a sync actor's method that returned an awaitable)
        return asyncio.run(_awaited(awaitable))
    return asyncio.run_coroutine_threadsafe(_awaited(awaitable), loop).result()


async def _awaited(awaitable) -> Any:
    return await awaitable

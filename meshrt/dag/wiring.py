"""The driver's side of a compiled graph's sockets (channel.py): which edge goes
where, setting them up in each actor (stage.py), feeding inputs and reading results.

An edge within a host (one network namespace) is a Unix socket, one between hosts TCP.
Where the graph has what this path does not carry (nodes nested inside arguments,
per-call options, methods with other than one return, an actor fed by nothing, hosts
that cannot dial each other), the compiled graph makes ordinary calls (compiled.py).
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
from typing import Any

from .. import exceptions as exc
from . import channel, stage
from .dag_node import DAGNode, _collect
from .input_node import InputNode
from .nodes import ClassMethodNode
from .output_node import MultiOutputNode
from .run import in_order

SETUP_TIMEOUT_S = 60.0


class Unwired(Exception):
    """This graph takes ordinary calls instead (why: the message)."""


class Wiring:
    """A compiled graph's edges, built and connected; ``feed`` an execution's inputs,
    ``result`` reads output k of execution i."""

    def __init__(self, root: DAGNode, max_buffered: int | None = None, submit_timeout: float | None = None) -> None:
        self._plan(root)
        self._max_buffered = max_buffered
        self._submit_timeout = submit_timeout
        self._feed_deadline: float | None = None
        self._lock = threading.Lock()  # (one reader at a time)
        self._feed_lock = threading.Lock()  # (one execution's inputs at a time)
        self._buffered: dict[tuple[int, int], Any] = {}
        self._read: list[int] = [0] * len(self._out_edges)
        self._closed = False
        self._broken: str | None = None
        self._connect()

    # -- the plan -------------------------------------------------------------------------

    def _plan(self, root: DAGNode) -> None:
        order = in_order(root)
        methods = [node for node in order if isinstance(node, ClassMethodNode)]
        if isinstance(root, MultiOutputNode):
            outputs = list(root._bound_args)
        else:
            outputs = [root]
        if not all(isinstance(node, ClassMethodNode) for node in outputs):
            raise Unwired("an output is not an actor method's result")
        op_of = {id(node): i for i, node in enumerate(methods)}
        self._actors: dict[int, Any] = {}  # actor id -> handle, in first-use order
        self._ops: dict[int, list[stage.Op]] = {}  # actor id -> its ops, in graph order
        self._inputs: list[tuple[int, DAGNode, int]] = []  # (edge, input node, destination actor)
        self._dest: dict[int, int | None] = {}  # edge -> destination actor id (None: the driver)
        edges: dict[tuple, int] = {}
        ops: list[stage.Op] = []
        for node in methods:
            meta = node._actor._meta.methods.get(node._method_name)
            if node._bound_options or meta is None or meta.num_returns != 1:
                raise Unwired(f"{node!r} has call options or returns other than one value")
            actor = node._actor._actor_id
            self._actors.setdefault(actor, node._actor)

            def spec(value, node=node, actor=actor):
                if not isinstance(value, DAGNode):
                    nested: list = []
                    _collect(value, nested)
                    if nested:
                        raise Unwired("a DAG node nested inside an argument")
                    return ("const", value)
                if isinstance(value, ClassMethodNode) and value._actor._actor_id == actor:
                    return ("local", op_of[id(value)])
                key = (id(value), id(node))
                if key not in edges:
                    edge = edges[key] = len(edges)
                    self._dest[edge] = actor
                    if isinstance(value, ClassMethodNode):
                        ops[op_of[id(value)]].outs.append(edge)
                    else:  # (the input, or part of it: from the driver)
                        self._inputs.append((edge, value, actor))
                return ("edge", edges[key])

            op = stage.Op(op_of[id(node)], node._method_name, [], {})
            ops.append(op)
            op.args = [spec(value) for value in node._bound_args]
            op.kwargs = {key: spec(value) for key, value in node._bound_kwargs.items()}
            self._ops.setdefault(actor, []).append(op)
        self._out_edges = []
        for node in outputs:
            edge = len(edges) + len(self._out_edges)
            self._dest[edge] = None
            ops[op_of[id(node)]].outs.append(edge)
            self._out_edges.append(edge)
        self._input_node = next((n for n in order if isinstance(n, InputNode)), None)
        fed = {actor for actor in self._dest.values() if actor is not None}
        if set(self._actors) - fed:  # (its thread would have nothing to wait for between executions)
            raise Unwired("an actor's methods in the graph take nothing from the input or other actors")

    # -- connecting ---------------------------------------------------------------------------

    def _connect(self) -> None:
        from .._private import state

        core = state.core()
        graph_id = os.urandom(16)
        handles = list(self._actors.values())
        try:
            listened = core.get([h.__ray_call__.remote(stage.stage_listen, graph_id) for h in handles],
                                SETUP_TIMEOUT_S)
        except BaseException:  # (an actor is dead, say: the others forget their listeners)
            for h in handles:
                h.__ray_call__.remote(stage.stage_drop, graph_id)
            raise
        controller = getattr(core, "controller", None)
        listeners, my_local, my_remote = stage.listeners_for(graph_id, getattr(controller, "public_address", "") or "")
        here = channel.namespace_id()
        ends = {actor: (local, remote, tuple(ns)) for actor, (local, remote, ns) in zip(self._actors, listened,
                                                                                         strict=True)}
        ends[None] = (my_local, my_remote, here)  # (the driver)

        def address(src, dest) -> str:
            """Where ``src`` (an actor id, None: the driver) dials ``dest``: the Unix
            address on one host, the TCP one across hosts."""
            local, remote, ns = ends[dest]
            if ns == ends[src][2]:
                return local
            if remote is None:
                raise Unwired("actors on several hosts, and one of them is not reachable over TCP "
                              "(start the driver with init(address=...))")
            return remote

        try:
            inputs = [(edge, address(None, actor)) for edge, _node, actor in self._inputs]
            outs = {actor: {edge: address(actor, self._dest[edge]) for op in self._ops[actor] for edge in op.outs}
                    for actor in self._actors}
        except Unwired:
            core.get([h.__ray_call__.remote(stage.stage_drop, graph_id) for h in handles], SETUP_TIMEOUT_S)
            for sock in listeners:
                sock.close()
            raise
        self._in_socks: dict[int, Any] = {}
        self._out_socks: dict[int, Any] = {}
        try:
            for edge, where in inputs:
                self._in_socks[edge] = channel.connect(where, core.token, graph_id, edge)
            starts = []
            for actor, handle in self._actors.items():
                ins = [edge for edge, dest in self._dest.items() if dest == actor]
                starts.append(handle.__ray_call__.remote(stage.stage_start, graph_id, self._ops[actor], outs[actor],
                                                         ins, SETUP_TIMEOUT_S))
            got = channel.accept(listeners, core.token, graph_id, set(self._out_edges), SETUP_TIMEOUT_S)
            self._out_socks = {i: got[edge] for i, edge in enumerate(self._out_edges)}
            self._output_of = {sock: k for k, sock in self._out_socks.items()}
            core.get(starts, SETUP_TIMEOUT_S)
            for sock in self._in_socks.values():  # (a full one reads results meanwhile: _when_full)
                sock.setblocking(False)
        except BaseException:
            self.close()
            raise
        finally:
            for sock in listeners:
                sock.close()

    # -- running ----------------------------------------------------------------------------

    def feed(self, args: tuple, kwargs: dict) -> None:
        """Send one execution's inputs (the stages run it as they get them)."""
        if self._broken is not None:
            raise exc.RaySystemError(self._broken)
        value = self._input_node._run(args, kwargs, {}) if self._input_node is not None else None
        results = {id(self._input_node): value}
        # (every part read and pickled before any is sent: a bad input sends nothing)
        parts = [(edge, _encoded(value if isinstance(node, InputNode) else node._run(args, kwargs, results)))
                 for edge, node, _actor in self._inputs]
        with self._feed_lock:
            limit = self._submit_timeout
            self._feed_deadline = None if limit is None else time.monotonic() + limit
            for i, (edge, encoded) in enumerate(parts):
                try:
                    channel.write(self._in_socks[edge], encoded, self._when_full)
                except channel.ChannelClosed:
                    self._broken = ("an actor of this compiled graph died or was killed; compile the graph "
                                    "again with live actors")
                    raise exc.RaySystemError(self._broken) from None
                except channel.ChannelTimeout as err:
                    why = (f"execute() could not hand its inputs to the graph within _submit_timeout={limit} s: its "
                           f"first actors took none meanwhile (a method may be stuck, or slower than that)")
                    if err.partial or i:  # (part of an execution went out: the graph's inputs no longer line up)
                        self._broken = why + "; this compiled graph cannot go on: teardown() and compile it again"
                        raise exc.RayChannelTimeoutError(self._broken) from None
                    raise exc.RayChannelTimeoutError(why + "; nothing was sent: execute() again later, or compile "
                                                     "with a larger experimental_compile(_submit_timeout=...)") from None

    def _when_full(self, sock) -> None:
        """An input socket is full: the graph is backed up behind results nobody has read
        yet. Read them into the buffer until the socket takes more (else the stages wait
        on the driver and the driver on them: a hang)."""
        deadline = self._feed_deadline
        if deadline is not None and time.monotonic() >= deadline:
            raise channel.ChannelTimeout()
        if not self._lock.acquire(blocking=False):  # (a get() is reading them already)
            select.select([], [sock], [], 0.01)
            return
        try:
            while not self._closed and not select.select([], [sock], [], 0)[1]:
                if self._broken is not None:
                    raise channel.ChannelClosed(self._broken)
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise channel.ChannelTimeout()
                self._take_results(left, sock)
            if self._closed:
                raise channel.ChannelClosed("the graph was torn down")
        finally:
            self._lock.release()

    def _take_results(self, timeout: float | None, writable=None) -> bool:
        """With the read lock: wait up to ``timeout`` for results (or for ``writable`` to
        take more), and keep each one that came, from any output. False: none came."""
        socks = list(self._out_socks.values())
        try:
            ready, wr, _ = select.select(socks, [writable] if writable is not None else [], [], timeout)
        except (OSError, ValueError):  # (closed under us by teardown() in another thread: the caller says so)
            if self._closed:
                return True
            raise
        for sock in ready:
            k = self._output_of[sock]
            try:
                got = channel.recv(sock)
            except channel.ChannelClosed:
                if self._closed:  # (our own end, closed by teardown() in another thread)
                    return True
                self._broken = ("an actor of this compiled graph died or was killed before its result came; "
                                "compile the graph again with live actors")
                continue
            except OSError:
                if self._closed:
                    return True
                raise
            self._buffered[(self._read[k], k)] = got
            self._read[k] += 1
        return bool(ready or wr)

    def finished(self) -> int:
        """How many executions have all their results here (read, or kept to be read)."""
        return min(self._read)

    def result(self, index: int, output: int, timeout: float | None) -> Any:
        """Output ``output`` of execution ``index`` (read in order, kept until asked)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while (index, output) not in self._buffered:
                if self._closed:
                    raise exc.RaySystemError(f"this compiled graph was torn down before the result of execution "
                                             f"{index} came; read results before teardown()")
                if self._broken is not None:
                    raise exc.ActorDiedError(class_name="compiled graph", cause=self._broken)
                if self._max_buffered is not None and len(self._buffered) >= self._max_buffered:
                    raise exc.RayCgraphCapacityExceeded(
                        f"this compiled graph keeps {len(self._buffered)} results unread, its limit "
                        f"(_max_buffered_results={self._max_buffered}); get() the earlier results first, or "
                        f"compile with a larger experimental_compile(_max_buffered_results=...)")
                left = None if deadline is None else max(deadline - time.monotonic(), 0)
                if not self._take_results(left):
                    raise exc.GetTimeoutError(f"a compiled graph's result (execution {index}) not here after "
                                              f"{timeout} s; give get() a larger timeout (or None)")
            value = self._buffered.pop((index, output))
        if isinstance(value, stage.Failure):
            from ..objstore.serialization import Payload, error_from_payload

            raise error_from_payload(Payload(value.error_data, is_error=True))
        return value

    def close(self) -> None:
        """Close the driver's ends: each stage sees its inputs end and closes its own."""
        if self._closed:
            return
        self._closed = True
        for sock in (*self._in_socks.values(), *self._out_socks.values()):
            try:  # (wakes a get() waiting on it in another thread: closing alone would not)
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


def _encoded(value: Any) -> list:
    try:
        return channel.encode(value)
    except Exception as err:  # noqa: BLE001
        raise TypeError(f"compiled graph execute(): an input of type {type(value).__qualname__} cannot be "
                        f"serialized ({err}); pass something picklable") from None

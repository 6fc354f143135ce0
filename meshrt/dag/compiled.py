"""Ray's compiled graphs (``dag.experimental_compile()``): a graph of actor method
calls, checked and wired once, then executed many times.

Compiling starts, in each actor of the graph, a thread that runs its methods of the
graph for every execution, and joins those threads (and the driver) with a socket per
edge (channel.py, stage.py, wiring.py): a result goes straight to the actor that needs
it, as in Ray. Where that cannot be set up (hosts that cannot dial each other, a node
nested in an argument, per-call options), an execution makes the ordinary calls
``execute()`` makes. Either way Ray's contract holds: the graph is actor methods on live actors fed
by one InputNode, each result is read once, a torn-down graph runs no more.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from .. import exceptions as exc
from .dag_node import DAGNode
from .input_node import InputAttributeNode, InputNode
from .nodes import ClassMethodNode, ClassNode
from .output_node import MultiOutputNode
from .run import in_order, run_graph
from .wiring import Unwired, Wiring

# Ray's defaults for its limits (its RAY_CGRAPH_max_inflight_executions and _max_buffered_results)
DEFAULT_MAX_INFLIGHT_EXECUTIONS = 10
DEFAULT_MAX_BUFFERED_RESULTS = 1000
DEFAULT_SUBMIT_TIMEOUT_S = 10.0  # (Ray's RAY_CGRAPH_submit_timeout)


class CompiledDAGRef:
    """One result of one execution: ``meshrt.get(ref)`` or ``ref.get()``, once."""

    _meshrt_compiled_ref = True

    def __init__(self, read, label: str) -> None:
        self._read = read  # read(timeout) -> the value (or raises its error)
        self._label = label
        self._taken = False

    def get(self, timeout: float | None = None) -> Any:
        if self._taken:
            raise ValueError(f"{self!r} was read already; a compiled graph's result is read once (keep the value)")
        try:
            value = self._read(timeout)
        except (exc.GetTimeoutError, exc.RayCgraphCapacityExceeded):
            raise  # (nothing was taken: it can be read again)
        except BaseException:
            self._taken = True
            raise
        self._taken = True
        return value

    def __reduce__(self):
        raise ValueError(f"{self!r} cannot be pickled or passed to a task or actor; get() its value and pass that")

    def __copy__(self):
        raise ValueError(f"{self!r} cannot be copied; it is read once")

    __deepcopy__ = lambda self, memo: self.__copy__()  # noqa: E731

    def __repr__(self) -> str:
        return f"CompiledDAGRef({self._label})"


class CompiledDAGFuture:
    """One result of ``execute_async()``: ``await`` it, once."""

    def __init__(self, read, label: str) -> None:
        self._read = read
        self._label = label
        self._taken = False

    def __await__(self):
        if self._taken:
            raise ValueError(f"{self!r} was awaited already; a compiled graph's result is read once")
        self._taken = True
        return asyncio.to_thread(self._read, None).__await__()

    def __repr__(self) -> str:
        return f"CompiledDAGFuture({self._label})"


class CompiledDAG:
    """``dag.experimental_compile()``: run it with ``execute(...)`` (or, compiled with
    ``enable_asyncio=True``, ``await execute_async(...)``); ``teardown()`` ends it."""

    def __init__(self, root: DAGNode, *, enable_asyncio: bool, submit_timeout: float | None,
                 max_inflight: int | None = None, max_buffered: int | None = None) -> None:
        if not isinstance(enable_asyncio, bool):
            raise TypeError(f"experimental_compile(enable_asyncio={enable_asyncio!r}): give True or False")
        self._max_inflight = _limit("_max_inflight_executions", max_inflight, DEFAULT_MAX_INFLIGHT_EXECUTIONS)
        max_buffered = _limit("_max_buffered_results", max_buffered, DEFAULT_MAX_BUFFERED_RESULTS)
        _check_compilable(root)
        self._root = root
        self._asyncio = enable_asyncio
        self._submit_timeout = _seconds("_submit_timeout", submit_timeout, DEFAULT_SUBMIT_TIMEOUT_S)
        self._executions = 0
        self._read_up_to = 0  # (the calls path: executions before this one had a result read)
        self._torn_down = False
        try:
            self._wiring: Wiring | None = Wiring(root, max_buffered, self._submit_timeout)
            self.path = "channels"
        except Unwired as why:
            self._wiring = None
            self.path = f"calls ({why})"
        _close_at_shutdown(self)

    def execute(self, *args: Any, **kwargs: Any) -> CompiledDAGRef | list[CompiledDAGRef]:
        if self._asyncio:
            raise ValueError("this graph was compiled with enable_asyncio=True: run it with "
                             "`await compiled.execute_async(...)`")
        return self._wrap(self._start(args, kwargs), CompiledDAGRef)

    async def execute_async(self, *args: Any, **kwargs: Any) -> CompiledDAGFuture | list[CompiledDAGFuture]:
        if not self._asyncio:
            raise ValueError("execute_async() needs the graph compiled with experimental_compile(enable_asyncio=True); "
                             "this one runs with execute()")
        await asyncio.sleep(0)  # (a coroutine, as Ray's: the calls leave when it is awaited)
        return self._wrap(self._start(args, kwargs), CompiledDAGFuture)

    def teardown(self, kill_actors: bool = False) -> None:
        """No more executions; results already returned can still be read. With
        ``kill_actors=True`` the graph's actors are killed too (``meshrt.kill``)."""
        if self._torn_down:
            return
        self._torn_down = True
        if self._wiring is not None:
            self._wiring.close()
        if kill_actors:
            from .._private.toplevel import kill

            actors = {id(node._actor): node._actor for node in in_order(self._root) if isinstance(node, ClassMethodNode)}
            for handle in actors.values():
                kill(handle)

    def visualize(self, filename: str = "compiled_graph", format: str = "png", view: bool = False,  # noqa: A002
                  channel_details: bool = False) -> str:
        """Ray's: the graph as Graphviz DOT source (rendered to ``filename.format``), or
        text with ``format="ascii"`` (visualize.py)."""
        from .visualize import render

        return render(self._root, self.path, filename, format, view, channel_details)

    def _start(self, args: tuple, kwargs: dict) -> Any:
        if self._torn_down:
            raise exc.RaySystemError("this compiled graph was torn down (teardown()); compile the DAG again")
        index = self._executions
        wiring = self._wiring
        finished = wiring.finished() if wiring is not None else self._read_up_to
        if index - finished >= self._max_inflight:
            raise exc.RayCgraphCapacityExceeded(
                f"this compiled graph has {index - finished} executions whose results have not come back, its "
                f"limit (_max_inflight_executions={self._max_inflight}); get() a result of a later execution "
                f"first, or compile with a larger experimental_compile(_max_inflight_executions=...)")
        outputs = len(self._root._bound_args) if isinstance(self._root, MultiOutputNode) else 1
        if wiring is not None:
            wiring.feed(args, kwargs)
            readers = [lambda timeout, k=k: wiring.result(index, k, timeout) for k in range(outputs)]
        else:
            out = run_graph(self._root, args, kwargs)
            refs = out if isinstance(self._root, MultiOutputNode) else [out]
            readers = [lambda timeout, ref=ref: self._value_of(index, ref, timeout) for ref in refs]
        self._executions += 1
        return index, readers

    def _wrap(self, started: tuple, kind: type) -> Any:
        index, readers = started
        if isinstance(self._root, MultiOutputNode):
            return [kind(read, f"execution {index}, output {i}") for i, read in enumerate(readers)]
        return kind(readers[0], f"execution {index}")

    def _value_of(self, index: int, ref, timeout: float | None) -> Any:
        """The calls path: a result read (as the channels path counts executions whose
        results came back, Ray counts those read: every one before it is done too)."""
        from .._private import state

        came = True  # (its value or its error: either way it is done)
        try:
            return state.core().get([ref], timeout)[0]
        except exc.GetTimeoutError:
            came = False
            raise
        finally:
            if came:
                self._read_up_to = max(self._read_up_to, index + 1)

    def __del__(self) -> None:
        wiring = getattr(self, "_wiring", None)
        if wiring is not None:
            wiring.close()  # (its sockets; the actors' threads end as theirs close)

    def __repr__(self) -> str:
        return f"<CompiledDAG of {self._root!r}, {self._executions} execution(s)>"


def _seconds(name: str, value: float | None, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"experimental_compile({name}={value!r}): give the seconds to wait, a number above 0")
    return float(value)


def _limit(name: str, value: int | None, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"experimental_compile({name}={value!r}): give a whole number of 1 or more")
    return value


def _close_at_shutdown(graph: CompiledDAG) -> None:
    """meshrt.shutdown() tears the graph down (its sockets), unless it is gone first."""
    from .._private import state

    hook = getattr(state.core(), "on_shutdown", None)
    if hook is not None:
        ref = weakref.ref(graph)
        hook(lambda: (g := ref()) is not None and g.teardown())


def _check_compilable(root: DAGNode) -> None:
    """Ray compiles only actor method calls on actors that exist, fed by an InputNode."""
    order = in_order(root)
    if not any(isinstance(node, InputNode) for node in order):
        raise ValueError("experimental_compile(): the graph needs an InputNode; build it inside "
                         "`with InputNode() as inp:` and bind inp (or parts of it) to the first calls")
    for node in order:
        if isinstance(node, ClassNode) or (isinstance(node, ClassMethodNode) and isinstance(node._actor, ClassNode)):
            raise ValueError(f"experimental_compile(): {node!r} creates its actor as the graph runs; a compiled "
                             f"graph calls actors that exist: create it with {node._label().split('.')[0]}.remote() "
                             f"and bind its methods (handle.method.bind(...))")
        if not isinstance(node, (InputNode, InputAttributeNode, ClassMethodNode, MultiOutputNode)):
            raise ValueError(f"experimental_compile(): {node!r} is not an actor method call; a compiled graph "
                             f"holds only actor methods (handle.method.bind(...)); run this DAG with execute()")
        if isinstance(node, MultiOutputNode) and node is not root:
            raise ValueError("experimental_compile(): a MultiOutputNode can only end the graph")

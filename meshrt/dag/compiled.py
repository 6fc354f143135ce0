"""Ray's compiled graphs (``dag.experimental_compile()``): a graph of actor method
calls, checked once and then executed many times.

Ray compiles such a graph into loops in its actors that read shared-memory channels,
so a result goes straight to the next actor. Here an execution makes the calls
``execute()`` makes (each result comes back through the driver: about half Ray's speed
per execution, benchmarks/dag.py); what is kept of Ray is the contract: the graph is
actor methods on live actors fed by one InputNode, each result is read once, and a
torn-down graph runs no more.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .. import exceptions as exc
from .dag_node import DAGNode
from .input_node import InputAttributeNode, InputNode
from .nodes import ClassMethodNode, ClassNode
from .output_node import MultiOutputNode
from .run import in_order, run_graph


class CompiledDAGRef:
    """One result of one execution: ``meshrt.get(ref)`` or ``ref.get()``, once."""

    _meshrt_compiled_ref = True

    def __init__(self, ref, label: str) -> None:
        self._ref = ref
        self._label = label
        self._taken = False

    def get(self, timeout: float | None = None) -> Any:
        if self._taken:
            raise ValueError(f"{self!r} was read already; a compiled graph's result is read once (keep the value)")
        value = self._ref_value(timeout)
        self._taken = True
        return value

    def _ref_value(self, timeout: float | None) -> Any:
        from .._private import state

        return state.core().get([self._ref], timeout)[0]

    def __reduce__(self):
        raise ValueError(f"{self!r} cannot be pickled or passed to a task or actor; get() its value and pass that")

    def __copy__(self):
        raise ValueError(f"{self!r} cannot be copied; it is read once")

    __deepcopy__ = lambda self, memo: self.__copy__()  # noqa: E731

    def __repr__(self) -> str:
        return f"CompiledDAGRef({self._label})"


class CompiledDAGFuture:
    """One result of ``execute_async()``: ``await`` it, once."""

    def __init__(self, ref, label: str) -> None:
        self._ref = ref
        self._label = label
        self._taken = False

    def __await__(self):
        if self._taken:
            raise ValueError(f"{self!r} was awaited already; a compiled graph's result is read once")
        self._taken = True
        return self._ref.__await__()

    def __repr__(self) -> str:
        return f"CompiledDAGFuture({self._label})"


class CompiledDAG:
    """``dag.experimental_compile()``: run it with ``execute(...)`` (or, compiled with
    ``enable_asyncio=True``, ``await execute_async(...)``); ``teardown()`` ends it."""

    def __init__(self, root: DAGNode, *, enable_asyncio: bool, submit_timeout: float | None) -> None:
        if not isinstance(enable_asyncio, bool):
            raise TypeError(f"experimental_compile(enable_asyncio={enable_asyncio!r}): give True or False")
        _check_compilable(root)
        self._root = root
        self._asyncio = enable_asyncio
        self._submit_timeout = submit_timeout
        self._executions = 0
        self._torn_down = False

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
        if kill_actors:
            from .._private.toplevel import kill

            actors = {id(node._actor): node._actor for node in in_order(self._root) if isinstance(node, ClassMethodNode)}
            for handle in actors.values():
                kill(handle)

    def _start(self, args: tuple, kwargs: dict) -> Any:
        if self._torn_down:
            raise exc.RaySystemError("this compiled graph was torn down (teardown()); compile the DAG again")
        index = self._executions
        self._executions += 1
        return index, run_graph(self._root, args, kwargs)

    def _wrap(self, started: tuple, kind: type) -> Any:
        index, out = started
        if isinstance(self._root, MultiOutputNode):
            return [kind(ref, f"execution {index}, output {i}") for i, ref in enumerate(out)]
        return kind(out, f"execution {index}")

    def __repr__(self) -> str:
        return f"<CompiledDAG of {self._root!r}, {self._executions} execution(s)>"


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

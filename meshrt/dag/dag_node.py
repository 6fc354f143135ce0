"""What every node of a lazy call graph (Ray's DAG API) has: its bound arguments and
options, ``execute()``, ``experimental_compile()``.

A node records a call instead of making it (``f.bind(x)`` where ``f.remote(x)`` would
run); ``execute()`` then makes every call of the graph once, upstream first, and hands
each call the refs its inputs returned, so values flow between workers without the
driver reading them.
"""

from __future__ import annotations

from typing import Any

TENSOR_TRANSPORTS = ("auto", "nccl", "shm", "cpu", "accelerator")


class DAGNode:
    """A call recorded by ``.bind()``; ``execute(...)`` runs the graph that ends here."""

    def __init__(self, args: tuple, kwargs: dict, options: dict) -> None:
        self._bound_args = tuple(args)
        self._bound_kwargs = dict(kwargs)
        self._bound_options = dict(options)
        self._tensor_transport = "auto"
        self._type_hint = None

    # -- what Ray's DAGNode exposes ------------------------------------------------------

    def get_args(self) -> tuple:
        return self._bound_args

    def get_kwargs(self) -> dict:
        return dict(self._bound_kwargs)

    def get_options(self) -> dict:
        return dict(self._bound_options)

    def with_tensor_transport(self, transport: str = "auto", device: str = "default", _static_shape: bool = False,
                              _direct_return: bool = False) -> DAGNode:
        """Ray's hint for how this node's tensors travel. meshrt moves a tensor the way
        it moves any call's result (shared memory on a host, CUDA IPC between a host's
        GPUs, UCX between hosts), so the hint is checked and kept, not needed."""
        if not isinstance(transport, str) or transport.lower() not in TENSOR_TRANSPORTS:
            raise ValueError(f"with_tensor_transport(transport={transport!r}): give one of "
                             f"{', '.join(map(repr, TENSOR_TRANSPORTS))}")
        self._tensor_transport = transport.lower()
        return self

    def with_type_hint(self, type_hint: Any) -> DAGNode:
        self._type_hint = type_hint
        return self

    @property
    def type_hint(self) -> Any:
        return self._type_hint

    # -- running ----------------------------------------------------------------------------

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        """Make every call of the graph that ends here, each once, upstream first; the
        arguments go to its InputNode. Returns what this node's call returns: an
        ObjectRef (a list of them for a MultiOutputNode), an actor handle for a class."""
        from .run import run_graph

        return run_graph(self, args, kwargs)

    def experimental_compile(self, _submit_timeout: float | None = None, _buffer_size_bytes: int | None = None,
                             enable_asyncio: bool = False, _max_inflight_executions: int | None = None,
                             _max_buffered_results: int | None = None, **_ray_options: Any):
        """Ray's compiled graph: the graph checked and wired once (actor methods only,
        fed by an InputNode; compiled.py), then ``execute()`` many times, each result
        going straight to the actor that needs it; results come back as
        CompiledDAGRefs. Ray's limits hold, with Ray's defaults: at most
        ``_max_inflight_executions`` (10) executions whose results have not come back,
        ``_max_buffered_results`` (1000) results kept unread, ``_submit_timeout`` (10 s)
        for ``execute()`` to hand its inputs over when the graph takes none.
        ``_buffer_size_bytes`` and Ray's other tuning options are taken and unused (a
        socket's buffer is the kernel's)."""
        from .compiled import CompiledDAG

        return CompiledDAG(self, enable_asyncio=enable_asyncio, submit_timeout=_submit_timeout,
                           max_inflight=_max_inflight_executions, max_buffered=_max_buffered_results)

    # -- for the graph walk -----------------------------------------------------------------

    def _upstream(self) -> list[DAGNode]:
        """The nodes whose results this node's call needs."""
        found: list[DAGNode] = []
        _collect((self._bound_args, self._bound_kwargs), found)
        return found

    def _run(self, args: tuple, kwargs: dict, results: dict) -> Any:
        """Make this node's call with its upstream results in place."""
        raise NotImplementedError

    def __reduce__(self):
        raise TypeError(f"{self!r} is a node of a lazy call graph, not a value: it cannot be passed to "
                        f".remote() or pickled; pass it to .bind() and run the graph with execute()")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._label()}>"

    def _label(self) -> str:
        return ""


def _collect(value: Any, found: list) -> None:
    """The DAGNodes in ``value``, looking inside lists, tuples and dicts (as Ray does
    for arguments); other objects are passed as they are."""
    if isinstance(value, DAGNode):
        found.append(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _collect(item, found)


def substitute(value: Any, results: dict) -> Any:
    """``value`` with each DAGNode replaced by what its call returned."""
    if isinstance(value, DAGNode):
        return results[id(value)]
    if isinstance(value, list):
        return [substitute(item, results) for item in value]
    if isinstance(value, tuple):
        items = [substitute(item, results) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)  # (a namedtuple too)
    if isinstance(value, dict):
        return {key: substitute(item, results) for key, item in value.items()}
    return value

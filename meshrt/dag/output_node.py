"""Several results from one execution: ``MultiOutputNode([a, b])``."""

from __future__ import annotations

from typing import Any

from .dag_node import DAGNode


class MultiOutputNode(DAGNode):
    """Ends a graph with several outputs; ``execute()`` returns a list, one per node."""

    def __init__(self, args: list | tuple, other_args_to_resolve: dict | None = None) -> None:
        if not isinstance(args, (list, tuple)):
            raise ValueError(f"MultiOutputNode(args): give a list of DAG nodes, got a {type(args).__name__}")
        for i, node in enumerate(args):
            if not isinstance(node, DAGNode):
                raise ValueError(f"MultiOutputNode: item {i} is a {type(node).__name__}, not a DAG node "
                                 f"(made by .bind() or read from an InputNode)")
        super().__init__(tuple(args), {}, {})

    def _run(self, args: tuple, kwargs: dict, results: dict) -> Any:
        return [results[id(node)] for node in self._bound_args]

    def _label(self) -> str:
        return f"of {len(self._bound_args)}"

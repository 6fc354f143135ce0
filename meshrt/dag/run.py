"""Running a graph: every node's call once, each after the calls it needs."""

from __future__ import annotations

from typing import Any

from .dag_node import DAGNode


def in_order(root: DAGNode) -> list[DAGNode]:
    """The graph's nodes, each after everything upstream of it (a loop, not recursion:
    a chain of thousands of nodes is fine)."""
    order: list[DAGNode] = []
    placed: set[int] = set()
    entered: set[int] = set()
    stack: list[tuple[DAGNode, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        key = id(node)
        if key in placed:
            continue
        if expanded:
            placed.add(key)
            order.append(node)
            continue
        if key in entered:  # (reached again from below itself: bind() cannot make one, but say so)
            raise ValueError(f"{node!r} depends on itself; a DAG has no cycles")
        entered.add(key)
        stack.append((node, True))
        for child in reversed(node._upstream()):
            if id(child) not in placed:
                stack.append((child, False))
    return order


def run_graph(root: DAGNode, args: tuple, kwargs: dict) -> Any:
    from .input_node import InputNode

    order = in_order(root)
    inputs = [node for node in order if isinstance(node, InputNode)]
    if len(inputs) > 1:
        raise ValueError("this DAG has more than one InputNode; build it inside one `with InputNode() as inp:` "
                         "block and use that inp (or inp[i], inp.name) everywhere")
    if not inputs and (args or kwargs):
        raise ValueError(f"{root!r}.execute() got arguments, but the DAG has no InputNode to take them; "
                         f"build it with `with InputNode() as inp:` and bind inp where they go")
    results: dict[int, Any] = {}
    for node in order:
        results[id(node)] = node._run(args, kwargs, results)
    return results[id(root)]

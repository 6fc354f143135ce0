"""``compiled.visualize(...)``, as Ray's: the compiled graph's calls and the edges between
them, as Graphviz DOT source (rendered to ``filename.format`` with the ``graphviz``
package, or written as is for "dot"), or as text with ``format="ascii"``.

Each node is numbered in the order the graph runs; an actor's calls are named
``Class.method`` with the actor's id, so two actors of one class stay apart.
"""

from __future__ import annotations

from .dag_node import DAGNode
from .input_node import InputAttributeNode, InputNode
from .nodes import ClassMethodNode
from .output_node import MultiOutputNode
from .run import in_order

_DOT_FORMATS = ("dot", "gv")  # (written without graphviz: it is the source itself)


def render(root: DAGNode, path: str, filename: str, format: str, view: bool, channel_details: bool) -> str:  # noqa: A002
    """The graph as DOT source or text (see the module docstring); writes the file."""
    order = in_order(root)
    number = {id(node): i for i, node in enumerate(order)}
    edges = [(number[id(up)], number[id(node)]) for node in order for up in node._upstream()]
    if format == "ascii":
        if channel_details:
            raise ValueError("visualize(format='ascii'): channel_details applies to the Graphviz formats only")
        lines = [f"{number[id(node)]}: {_name(node)}" + (f" <- {', '.join(str(u) for u, d in edges if d == i)}"
                                                         if any(d == i for _, d in edges) else "")
                 for i, node in enumerate(order)]
        text = "\n".join(lines)
        if view:
            print(text)
        return text
    how = f" [label=\"{path}\"]" if channel_details else ""
    dot = "\n".join(["digraph compiled_graph {", "  rankdir=LR;",
                     *(f'  n{i} [label="{i}: {_name(node)}"];' for i, node in enumerate(order)),
                     *(f"  n{u} -> n{d}{how};" for u, d in edges), "}"])
    if format in _DOT_FORMATS:
        with open(f"{filename}.{format}", "w") as f:
            f.write(dot + "\n")
        return dot
    try:
        import graphviz
    except ImportError:
        raise ImportError(f"visualize(format={format!r}) renders with the graphviz package: pip install graphviz "
                          f"(and the Graphviz programs); format='dot' writes the source without it, "
                          f"format='ascii' gives text") from None
    graphviz.Source(dot).render(filename, format=format, view=view, cleanup=True)
    return dot


def _name(node: DAGNode) -> str:
    if isinstance(node, InputNode):
        return "input"
    if isinstance(node, InputAttributeNode):
        return f"input[{node._key!r}]"
    if isinstance(node, MultiOutputNode):
        return "output"
    if isinstance(node, ClassMethodNode):
        return f"{node._label()} (actor {node._actor._actor_id:x})"
    return node._label() or type(node).__name__

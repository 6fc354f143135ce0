"""Ray's DAG API: lazy call graphs built with ``.bind()`` and run with ``execute()``,
and compiled graphs of actor method calls (``experimental_compile()``).

    with InputNode() as inp:
        dag = combine.bind(model_a.forward.bind(inp), model_b.forward.bind(inp))
    meshrt.get(dag.execute(3))
"""

from .compiled import CompiledDAG, CompiledDAGFuture, CompiledDAGRef
from .dag_node import DAGNode
from .input_node import DAGInputData, InputAttributeNode, InputNode
from .nodes import ClassMethodNode, ClassNode, FunctionNode
from .output_node import MultiOutputNode

__all__ = [
    "ClassMethodNode", "ClassNode", "CompiledDAG", "CompiledDAGFuture", "CompiledDAGRef", "DAGInputData", "DAGNode",
    "FunctionNode", "InputAttributeNode", "InputNode", "MultiOutputNode",
]

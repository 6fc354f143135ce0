"""meshrt.dag beyond what tests/compat/test_dag.py checks against Ray: the errors a
graph gets where it is written or run, long graphs, options, compiled-graph rules."""
import pickle

import pytest

import meshrt
from meshrt import exceptions as exc
from meshrt.dag import InputNode, MultiOutputNode

pytestmark = pytest.mark.timeout(120)


@meshrt.remote
def double(x):
    return 2 * x


@meshrt.remote
class Model:
    def __init__(self, weight):
        self.weight = weight

    def forward(self, x):
        return self.weight * x

    def pair(self, x):
        return x, -x


def test_bind_checks_the_arguments_where_the_graph_is_written():
    with pytest.raises(TypeError, match=r"double\.bind\(\)"):
        double.bind(1, 2)
    with pytest.raises(TypeError, match=r"bind\(\)"):
        Model.bind()
    with pytest.raises(AttributeError, match="did you mean 'forward'"):
        _ = Model.bind(1).forwrd
    with pytest.raises(TypeError, match=r"\.forward\.bind\(\.\.\.\)"):
        Model.bind(1).forward.remote(3)
    with pytest.raises(TypeError, match="int .* or a str"):
        InputNode()[1.5]
    with pytest.raises(ValueError, match="list of DAG nodes"):
        MultiOutputNode(double.bind(1))


def test_graphs_run_only_as_written(rt):
    loose = InputNode()
    with pytest.raises(ValueError, match="with InputNode"):
        double.bind(loose).execute(1)
    with InputNode() as a, InputNode() as b:
        two_inputs = MultiOutputNode([double.bind(a), double.bind(b)])
    with pytest.raises(ValueError, match="more than one InputNode"):
        two_inputs.execute(1)
    with pytest.raises(ValueError, match="no InputNode"):
        double.bind(1).execute(5)
    with InputNode() as inp:
        third = double.bind(inp[2])
        field = double.bind(inp[0])
    with pytest.raises(ValueError, match=r"positional input 2 \(inp\[2\]\), but execute\(\) got 2"):
        third.execute(1, 2)
    with pytest.raises(ValueError, match=r"single argument \(a int\)"):
        field.execute(7)  # (one argument: inp[0] indexes into it, as in Ray)
    with pytest.raises(TypeError, match=r"\.bind\(\)"):
        double.remote(double.bind(1))  # (a node is no value)


def test_a_long_chain_and_nested_inputs(rt):
    model = Model.remote(1)
    with InputNode() as inp:
        node = inp
        for _ in range(2000):  # (walked without recursion)
            node = model.forward.bind(node)
    assert meshrt.get(node.execute(3)) == 3

    @meshrt.remote
    def unpack(items, mapping):
        return meshrt.get(items) + [meshrt.get(mapping["k"])]

    with InputNode() as inp:
        dag = unpack.bind([double.bind(inp), double.bind(1)], {"k": double.bind(inp)})
    assert meshrt.get(dag.execute(5)) == [10, 2, 10]
    assert dag.get_args()[0][1].get_args() == (1,)


def test_options_travel_with_the_nodes(rt):
    with InputNode() as inp:
        plus_minus = Model.bind(1).pair.options(num_returns=2).bind(inp)
    refs = plus_minus.execute(4)
    assert meshrt.get(refs) == [4, -4]
    handle = Model.remote(1)
    node = handle.pair.options(num_returns=2).bind(5)
    assert meshrt.get(node.execute()) == [5, -5]
    assert double.options(num_cpus=1).bind(3).get_options()["num_cpus"] == 1
    assert node.with_tensor_transport("nccl") is node
    with pytest.raises(ValueError, match="with_tensor_transport"):
        node.with_tensor_transport("carrier pigeon")


def test_compiled_graph_rules(rt):
    handle = Model.remote(2)
    with InputNode() as inp:
        task_graph = double.bind(handle.forward.bind(inp))
        creating = Model.bind(1).forward.bind(inp)
    with pytest.raises(ValueError, match="not an actor method call"):
        task_graph.experimental_compile()
    with pytest.raises(ValueError, match=r"Model\.remote\(\)"):
        creating.experimental_compile()
    with pytest.raises(ValueError, match="needs an InputNode"):
        handle.forward.bind(1).experimental_compile()

    with InputNode() as inp:
        dag = handle.forward.bind(inp)
    compiled = dag.experimental_compile()
    with pytest.raises(ValueError, match="enable_asyncio=True"):
        import asyncio

        asyncio.run(compiled.execute_async(1))
    ref = compiled.execute(4)
    with pytest.raises(ValueError, match="cannot be pickled"):
        pickle.dumps(ref)
    assert meshrt.get(ref) == 8
    compiled.teardown()
    with pytest.raises(exc.RaySystemError, match="torn down"):
        compiled.execute(1)

    again = dag.experimental_compile(enable_asyncio=True)
    with pytest.raises(ValueError, match="execute_async"):
        again.execute(1)
    again.teardown(kill_actors=True)
    with pytest.raises(exc.ActorDiedError):
        meshrt.get(handle.forward.remote(1), timeout=60)

"""Ray's DAG API: graphs built with ``.bind()`` and run with ``execute()``, fed by an
InputNode, ending in a MultiOutputNode; and compiled graphs of actor methods."""
import asyncio

import pytest

import meshrt as ray
from meshrt.dag import InputNode, MultiOutputNode

pytestmark = pytest.mark.timeout(180)


@ray.remote
def add(a, b):
    return a + b


@ray.remote
def double(x):
    return 2 * x


@ray.remote
def total(values):
    return sum(ray.get(values))  # (nodes inside a list arrive as refs, as in Ray)


@ray.remote
class Model:
    def __init__(self, weight):
        self.weight = weight
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.weight * x

    def count(self):
        return self.calls


@pytest.fixture
def cluster():
    ray.init(num_cpus=2)
    yield
    ray.shutdown()


def test_functions_and_inputs(cluster):
    with InputNode() as inp:
        dag = add.bind(double.bind(inp[0]), double.bind(inp.y))
    assert ray.get(dag.execute(1, y=5)) == 12
    assert ray.get(dag.execute(2, y=3)) == 10  # (a graph runs as often as asked)
    with InputNode() as inp:
        single = double.bind(inp)
        parts = add.bind(inp["a"], inp["b"])
    assert ray.get(single.execute(21)) == 42
    assert ray.get(parts.execute({"a": 1, "b": 2})) == 3  # (one argument: inp indexes into it)


def test_actors_created_by_the_graph(cluster):
    with InputNode() as inp:
        m1 = Model.bind(2)
        m2 = Model.bind(3)
        dag = add.bind(m1.forward.bind(inp), m2.forward.bind(inp))
    assert ray.get(dag.execute(10)) == 50
    handle = Model.bind(4).execute()  # (a class node runs to an actor handle)
    assert ray.get(handle.forward.remote(2)) == 8


def test_shared_nodes_run_once_and_outputs(cluster):
    model = Model.remote(5)
    with InputNode() as inp:
        shared = model.forward.bind(inp)
        dag = MultiOutputNode([add.bind(shared, 1), add.bind(shared, 2), total.bind([shared, shared])])
    refs = dag.execute(1)
    assert isinstance(refs, list) and ray.get(refs) == [6, 7, 10]
    assert ray.get(model.count.remote()) == 1


def test_compiled_graph_of_actor_methods(cluster):
    first, second = Model.remote(2), Model.remote(10)
    with InputNode() as inp:
        dag = second.forward.bind(first.forward.bind(inp))
    compiled = dag.experimental_compile()
    try:
        refs = [compiled.execute(i) for i in range(5)]
        assert [ray.get(ref) for ref in refs] == [0, 20, 40, 60, 80]
        assert compiled.execute(7).get() == 140
        with pytest.raises(ValueError):
            ray.get(refs[0])  # (a compiled result is read once)
    finally:
        compiled.teardown()


def test_compiled_graph_limits_executions_in_flight(cluster):
    first = Model.remote(3)
    with InputNode() as inp:
        dag = first.forward.bind(inp)
    compiled = dag.experimental_compile(_max_inflight_executions=4)
    try:
        refs = [compiled.execute(i) for i in range(4)]
        with pytest.raises(ray.exceptions.RayCgraphCapacityExceeded):
            compiled.execute(4)
        assert [ray.get(ref) for ref in refs] == [0, 3, 6, 9]
        assert ray.get(compiled.execute(5)) == 15
    finally:
        compiled.teardown()


def test_compiled_graph_with_several_outputs(cluster):
    a, b = Model.remote(1), Model.remote(-1)
    with InputNode() as inp:
        dag = MultiOutputNode([a.forward.bind(inp[0]), b.forward.bind(inp[1])])
    compiled = dag.experimental_compile()
    try:
        assert ray.get(compiled.execute(3, 4)) == [3, -4]
    finally:
        compiled.teardown()


def test_compiled_graph_with_asyncio(cluster):
    model = Model.remote(3)
    with InputNode() as inp:
        dag = model.forward.bind(inp)

    async def run():
        compiled = dag.experimental_compile(enable_asyncio=True)  # (Ray's binds to the running loop)
        try:
            futures = [await compiled.execute_async(i) for i in range(3)]
            return [await f for f in futures]
        finally:
            compiled.teardown()

    assert asyncio.run(run()) == [0, 3, 6]


def test_errors_reach_the_caller(cluster):
    @ray.remote
    def boom(x):
        raise ValueError(f"bad {x}")

    with InputNode() as inp:
        dag = double.bind(boom.bind(inp))
    with pytest.raises(ValueError, match="bad 3"):
        ray.get(dag.execute(3))

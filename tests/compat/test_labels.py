"""Node labels: ``init(labels=...)`` gives the node labels, and ``label_selector=`` or
``NodeLabelSchedulingStrategy`` runs a task or actor where they match."""
import pytest

import meshrt as ray
from meshrt.util.scheduling_strategies import In, NodeLabelSchedulingStrategy

pytestmark = pytest.mark.timeout(120)


@ray.remote
def where():
    return ray.get_runtime_context().get_node_id()


@ray.remote
class Where:
    def node(self):
        return ray.get_runtime_context().get_node_id()


def test_work_runs_on_the_node_its_labels_select():
    ray.init(num_cpus=2, labels={"zone": "us-east1"})
    try:
        node = ray.get_runtime_context().get_node_id()
        [info] = ray.nodes()
        assert info["Labels"]["zone"] == "us-east1" and info["Labels"]["ray.io/node-id"] == node
        assert ray.get(where.options(label_selector={"zone": "us-east1"}).remote()) == node
        assert ray.get(where.options(label_selector={"zone": "in(us-east1,us-west1)"}).remote()) == node
        assert ray.get(where.options(label_selector={"zone": "!eu-west1"}).remote()) == node
        strategy = NodeLabelSchedulingStrategy(hard={"zone": In("us-east1")})
        assert ray.get(where.options(scheduling_strategy=strategy).remote()) == node
        actor = Where.options(label_selector={"zone": "us-east1"}).remote()
        assert ray.get(actor.node.remote()) == node
        # no node in us-west1: the fallback's selector is used
        fallback = [{"label_selector": {"zone": "us-east1"}}]
        assert ray.get(where.options(label_selector={"zone": "us-west1"}, fallback_strategy=fallback).remote(),
                       timeout=60) == node
    finally:
        ray.shutdown()

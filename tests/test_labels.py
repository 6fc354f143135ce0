"""Node labels and label selectors, as Ray's: ``init(labels=...)``, ``meshrt agent
--labels``, ``label_selector={...}`` and ``NodeLabelSchedulingStrategy`` pick the nodes a
task or actor may run on (meshrt/_private/labels.py, host_choice.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import meshrt
from meshrt import exceptions as exc
from meshrt._private import state, status
from meshrt.util.placement_group import (
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from meshrt.util.scheduling_strategies import (
    DoesNotExist,
    Exists,
    In,
    NodeLabelSchedulingStrategy,
    NotIn,
)

from .test_multihost import TOKEN, AgentProcesses, stop_agent

pytestmark = pytest.mark.timeout(120)


@meshrt.remote
def node():
    return meshrt.get_runtime_context().get_node_id()


@meshrt.remote
class Placed:
    def node(self):
        return meshrt.get_runtime_context().get_node_id(), meshrt.get_runtime_context().get_node_labels()


def test_one_node_runs_what_its_labels_match_and_refuses_the_rest():
    meshrt.init(num_cpus=2, labels={"zone": "a", "tier": "gold"})
    try:
        head = meshrt.get_runtime_context().get_node_id()
        assert meshrt.nodes()[0]["Labels"] == {"zone": "a", "tier": "gold", "ray.io/node-id": head}
        assert "labels tier=gold zone=a" in status.render(state.core().request_sync("cluster_status"))
        for selector in ({"zone": "a"}, {"zone": "in(a,b)", "tier": "!silver"}, {"zone": "!in(b,c)"},
                         {"ray.io/node-id": head}):
            assert meshrt.get(node.options(label_selector=selector).remote()) == head
        strategy = NodeLabelSchedulingStrategy(hard={"zone": In("a"), "tier": Exists(), "gpu": DoesNotExist()},
                                               soft={"zone": NotIn("a")})  # (soft: elsewhere if it can; it cannot)
        assert meshrt.get(node.options(scheduling_strategy=strategy).remote()) == head
        where, labels = meshrt.get(Placed.options(label_selector={"tier": "gold"}).remote().node.remote())
        assert where == head and labels["zone"] == "a"
        with pytest.raises(exc.TaskUnschedulableError, match=r"'zone': 'b'.*init\(labels=...\)"):
            node.options(label_selector={"zone": "b"}).remote()
        with pytest.raises(exc.ActorUnschedulableError, match="label selector"):
            Placed.options(scheduling_strategy=NodeLabelSchedulingStrategy({"gpu": Exists()})).remote()
        fallback = [{"label_selector": {"zone": "b"}}, {"label_selector": {"tier": "gold"}}]
        assert meshrt.get(node.options(label_selector={"zone": "c"}, fallback_strategy=fallback).remote()) == head
        with pytest.raises(exc.TaskUnschedulableError, match="nor its fallback"):
            node.options(label_selector={"zone": "c"}, fallback_strategy=fallback[:1]).remote()
    finally:
        meshrt.shutdown()


def test_bad_labels_and_selectors_are_named_where_they_are_given():
    with pytest.raises(TypeError, match="fallback_strategy is a list of dicts"):
        node.options(fallback_strategy={"label_selector": {"zone": "a"}})
    with pytest.raises(ValueError, match="only 'label_selector' is supported"):
        node.options(fallback_strategy=[{"resources": {"GPU": 1}}])
    with pytest.raises(ValueError, match="non-empty dict"):
        Placed.options(fallback_strategy=[{}])
    with pytest.raises(ValueError, match="fallback_strategy"):
        node.options(fallback_strategy=[{"label_selector": {"zone": "a b"}}])
    with pytest.raises(ValueError, match="label_selector\\['zone'\\]"):
        node.options(label_selector={"zone": "a b"})
    with pytest.raises(TypeError, match="label_selector must be a dict"):
        node.options(label_selector=["zone"])
    with pytest.raises(ValueError, match="label key 'bad key'"):
        Placed.options(label_selector={"bad key": "a"})
    with pytest.raises(ValueError, match="In\\(...\\)"):
        In()
    with pytest.raises(TypeError, match="is not In"):
        NodeLabelSchedulingStrategy(hard={"zone": "a"})
    with pytest.raises(ValueError, match="ray.io/"):
        meshrt.init(num_cpus=1, labels={"ray.io/node-id": "mine"})
    assert not meshrt.is_initialized()


def test_a_node_with_a_gpu_model_carries_it_as_a_label():
    meshrt.init(num_cpus=1, resources={"accelerator_type:H100": 1})
    try:
        assert meshrt.nodes()[0]["Labels"]["ray.io/accelerator-type"] == "H100"
        head = meshrt.get_runtime_context().get_node_id()
        assert meshrt.get(node.options(label_selector={"ray.io/accelerator-type": "in(H100,A100)"}).remote()) == head
    finally:
        meshrt.shutdown()


@pytest.fixture
def labelled_host(monkeypatch):
    """The head (zone a) and one agent's host (zone b, with a gpu label)."""
    monkeypatch.setenv("MESHRT_TOKEN", TOKEN)
    info = meshrt.init(address="127.0.0.1:0", num_cpus=1, labels={"zone": "a"})
    agent = subprocess.Popen(
        [sys.executable, "-m", "meshrt", "agent", "--address", info["tcp_address"], "--name", "zoneb",
         "--num-cpus", "2", "--labels", '{"zone": "b", "gpu": "h100"}', "--object-store-memory", str(128 << 20)],
        env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    meshrt.hosts(min_hosts=1, timeout=60)
    spawned = AgentProcesses([agent])
    head = meshrt.get_runtime_context().get_node_id()
    other = next(n for n in meshrt.nodes() if n["NodeID"] != head)
    yield head, other["NodeID"], spawned.remember
    spawned.remember()
    meshrt.shutdown()
    stop_agent(agent)
    spawned.assert_gone()


def test_tasks_and_actors_go_to_the_host_whose_labels_match(labelled_host):
    head, other, remember = labelled_host
    assert {n["NodeID"]: n["Labels"].get("zone") for n in meshrt.nodes()} == {head: "a", other: "b"}
    assert set(meshrt.get([node.options(label_selector={"zone": "b"}).remote() for _ in range(4)])) == {other}
    assert set(meshrt.get([node.options(label_selector={"zone": "!b"}).remote() for _ in range(4)])) == {head}
    assert set(meshrt.get([node.options(label_selector={"gpu": "in(h100,a100)"}).remote() for _ in range(2)])) \
        == {other}
    soft = NodeLabelSchedulingStrategy(hard={"zone": In("a", "b")}, soft={"gpu": Exists()})
    assert meshrt.get(node.options(scheduling_strategy=soft).remote()) == other
    actor = Placed.options(label_selector={"gpu": "h100"}).remote()
    where, labels = meshrt.get(actor.node.remote(), timeout=60)
    remember()
    assert where == other and labels == {"zone": "b", "gpu": "h100", "ray.io/node-id": other}
    with pytest.raises(exc.ActorUnschedulableError, match="'zone': 'c'"):
        Placed.options(label_selector={"zone": "c"}).remote()  # (no node: named at the call)
    with pytest.raises(exc.TaskUnschedulableError, match="'zone': 'c'"):
        meshrt.get(node.options(label_selector={"zone": "c"}).remote(), timeout=60)  # (named by the controller)


def test_a_fallback_strategy_is_taken_where_no_host_matches_the_selector(labelled_host):
    head, other, remember = labelled_host
    # zone c is nowhere: the first fallback some host matches is taken, in order
    fallback = [{"label_selector": {"zone": "d"}}, {"label_selector": {"gpu": "h100"}},
                {"label_selector": {"zone": "a"}}]
    assert set(meshrt.get([node.options(label_selector={"zone": "c"}, fallback_strategy=fallback).remote()
                           for _ in range(3)], timeout=60)) == {other}
    # a selector some host matches is kept: its fallbacks are never used
    assert set(meshrt.get([node.options(label_selector={"zone": "a"}, fallback_strategy=fallback[1:]).remote()
                           for _ in range(3)], timeout=60)) == {head}
    actor = Placed.options(label_selector={"zone": "c"}, fallback_strategy=fallback).remote()
    assert meshrt.get(actor.node.remote(), timeout=60)[0] == other
    remember()
    with pytest.raises(exc.ActorUnschedulableError, match="nor its fallback_strategy's .*'zone': 'd'"):
        Placed.options(label_selector={"zone": "c"}, fallback_strategy=[{"label_selector": {"zone": "d"}}]).remote()


def test_placement_group_bundles_go_to_the_hosts_their_selectors_match(labelled_host):
    head, other, _remember = labelled_host
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK",
                         bundle_label_selector=[{"zone": "b"}, {"zone": "a"}])
    assert pg.wait(60)
    assert placement_group_table(pg)["bundles_to_node_id"] == {0: other, 1: head}
    remove_placement_group(pg)
    with pytest.raises(ValueError, match="bundle 0's label selector"):
        placement_group([{"CPU": 1}], bundle_label_selector=[{"zone": "c"}])
    with pytest.raises(ValueError, match="one dict per bundle"):
        placement_group([{"CPU": 1}], bundle_label_selector=[{}, {}])

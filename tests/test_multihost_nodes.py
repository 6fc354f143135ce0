"""Ray's view of a cluster of hosts: ``nodes()``, summed resources, and actors placed
on an agent's host with ``NodeAffinitySchedulingStrategy`` (one agent on loopback,
with its own store and a custom resource)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import meshrt
from meshrt.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from meshrt.util.state import list_nodes

from .helpers import wait_until
from .test_multihost import TOKEN, AgentProcesses, stop_agent


@pytest.fixture
def two_nodes(monkeypatch):
    """The head (1 CPU, one 'headonly') and one agent's host (2 CPUs, one 'trainer', and
    2 GPUs it claims: only what the scheduler counts; nothing here starts CUDA)."""
    monkeypatch.setenv("MESHRT_TOKEN", TOKEN)
    info = meshrt.init(address="127.0.0.1:0", num_cpus=1, resources={"headonly": 1})
    agent = subprocess.Popen(
        [sys.executable, "-m", "meshrt", "agent", "--address", info["tcp_address"], "--name", "trainhost",
         "--num-cpus", "2", "--num-gpus", "2", "--resources", '{"trainer": 1}', "--object-store-memory", str(128 << 20)],
        env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    meshrt.hosts(min_hosts=1, timeout=60)
    spawned = AgentProcesses([agent])
    head = meshrt.get_runtime_context().get_node_id()
    other = next(n for n in meshrt.nodes() if n["NodeID"] != head)
    yield head, other, spawned.remember, agent
    spawned.remember()
    meshrt.shutdown()
    stop_agent(agent)
    spawned.assert_gone()


@meshrt.remote
class Where:
    def where(self):
        return meshrt.get_runtime_context().get_node_id(), int(os.environ.get("MESHRT_HOST_ID", "0")), os.getpid()

    def call(self, other):
        return meshrt.get(other.where.remote())


@meshrt.remote
def node_of_task():
    return meshrt.get_runtime_context().get_node_id()


def on(node_id: str, soft: bool = False) -> dict:
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=soft)}


def fill(node: dict, remember, **needs):
    """An actor there that takes what the others in the test ask for; up before it returns."""
    actor = Where.options(**needs, **on(node["NodeID"])).remote()
    meshrt.get(actor.where.remote(), timeout=60)
    remember()
    return actor


@pytest.mark.timeout(120)
def test_nodes_and_resources_span_every_host(two_nodes):
    head, other, *_ = two_nodes
    nodes = {n["NodeID"]: n for n in meshrt.nodes()}
    assert set(nodes) == {head, other["NodeID"]} and all(n["Alive"] for n in nodes.values())
    assert all(n["DeathReason"] == 0 and n["DeathReasonMessage"] == "" for n in nodes.values())
    assert other["NodeName"] == "trainhost"
    assert other["Resources"]["CPU"] == 2.0 and other["Resources"]["trainer"] == 1.0
    total = meshrt.cluster_resources()
    assert total["CPU"] == 3.0 and total["trainer"] == 1.0 and total["GPU"] == 2.0
    assert meshrt.available_resources()["trainer"] == 1.0


@meshrt.remote
def ip_and_node():
    return meshrt.util.get_node_ip_address(), meshrt.get_runtime_context().get_node_id()


@pytest.mark.timeout(120)
def test_each_node_offers_its_ip_as_a_resource_as_ray_s_nodes_do(two_nodes):
    head, other, *_ = two_nodes
    nodes = {n["NodeID"]: n for n in meshrt.nodes()}
    ip = nodes[head]["NodeManagerAddress"]
    assert ip == "127.0.0.1" == other["NodeManagerAddress"] == meshrt.util.get_node_ip_address()  # (all on loopback)
    assert nodes[head]["Resources"][f"node:{ip}"] == 1.0 and nodes[head]["Resources"]["node:__internal_head__"] == 1.0
    assert other["Resources"][f"node:{ip}"] == 1.0 and "node:__internal_head__" not in other["Resources"]
    assert meshrt.cluster_resources()[f"node:{ip}"] == 2.0
    # Ray's idioms: to the head, and to the node a task found itself on
    assert meshrt.get(node_of_task.options(resources={"node:__internal_head__": 0.01}).remote(), timeout=60) == head
    there_ip, there = meshrt.get(ip_and_node.options(**on(other["NodeID"])).remote(), timeout=60)
    assert there == other["NodeID"] and there_ip == ip
    assert meshrt.get(node_of_task.options(resources={f"node:{there_ip}": 0.01}).remote(), timeout=60) in nodes


@pytest.mark.timeout(120)
def test_an_actor_with_node_affinity_runs_on_that_host_and_is_called_from_anywhere(two_nodes):
    head, other, remember, _ = two_nodes
    there = Where.options(resources={"trainer": 1}, **on(other["NodeID"])).remote()
    node_id, host_id, _pid = meshrt.get(there.where.remote(), timeout=60)
    remember()
    assert node_id == other["NodeID"] and host_id != 0  # (its own node id, in its runtime context)
    assert meshrt.available_resources().get("trainer", 0.0) == 0.0  # (as Ray: a resource all in use is left out)
    here = Where.options(**on(head)).remote()
    assert meshrt.get(here.where.remote(), timeout=60)[0] == head
    assert meshrt.get(here.call.remote(there), timeout=60)[0] == other["NodeID"]  # (head -> agent's host)
    meshrt.kill(there)
    assert wait_until(lambda: meshrt.available_resources().get("trainer") == 1.0, 30)


@pytest.mark.timeout(120)
def test_on_a_busy_host_a_hard_affinity_waits_and_a_soft_one_runs_on_the_head(two_nodes):
    head, other, remember, _ = two_nodes
    first = fill(other, remember, num_cpus=2)
    second = Where.options(num_cpus=1, **on(other["NodeID"])).remote()
    answer = second.where.remote()
    soft = Where.options(num_cpus=1, **on(other["NodeID"], soft=True)).remote()
    assert meshrt.get(soft.where.remote(), timeout=60)[0] == head
    ready, _ = meshrt.wait([answer], timeout=0)
    assert not ready  # (no room for it there yet)
    meshrt.kill(first)
    assert meshrt.get(answer, timeout=60)[0] == other["NodeID"]
    remember()
    never = Where.options(num_cpus=3, **on(other["NodeID"])).remote()
    with pytest.raises(meshrt.exceptions.ActorDiedError, match="never has the resources it asks for"):
        meshrt.get(never.where.remote(), timeout=60)


@pytest.mark.timeout(120)
def test_an_affinity_restarts_on_its_host(two_nodes):
    _, other, remember, _ = two_nodes
    actor = Where.options(max_restarts=1, **on(other["NodeID"])).remote()
    node_id, _, pid = meshrt.get(actor.where.remote(), timeout=60)
    remember()
    meshrt.kill(actor, no_restart=False)
    assert wait_until(lambda: _answers_from_another_process(actor, pid), 60)
    remember()
    assert meshrt.get(actor.where.remote(), timeout=60)[0] == node_id


def _answers_from_another_process(actor, pid: int) -> bool:
    try:
        return meshrt.get(actor.where.remote(), timeout=30)[2] != pid
    except meshrt.exceptions.RayActorError:  # (calls made while it restarts may fail)
        return False


@pytest.mark.timeout(120)
def test_a_node_that_is_not_there_is_named_at_the_call(two_nodes):
    head, other, *_ = two_nodes
    with pytest.raises(ValueError, match="no node of the cluster has that id"):
        Where.options(**on("feedbeef")).remote()
    assert meshrt.get(Where.options(**on("feedbeef", soft=True)).remote().where.remote(), timeout=60)[0] == head
    with pytest.raises(ValueError, match="no node of the cluster has that id"):
        node_of_task.options(**on("feedbeef")).remote()  # (tasks: test_multihost_tasks.py)
    with pytest.raises(ValueError, match="scheduling_strategy=3"):
        Where.options(scheduling_strategy=3)


@pytest.mark.timeout(120)
def test_an_actor_asking_for_what_only_another_host_offers_runs_there(two_nodes):
    _, other, remember, _ = two_nodes
    trainer = Where.options(resources={"trainer": 1}).remote()
    assert meshrt.get(trainer.where.remote(), timeout=60)[0] == other["NodeID"]
    remember()
    with pytest.raises(meshrt.exceptions.ActorUnschedulableError, match="largest node has trainer=1"):
        Where.options(resources={"trainer": 2}).remote()
    # From a process of the head host too (it knows the head's totals from its welcome).
    assert meshrt.get(node_of_task.remote(), timeout=60) != other["NodeID"]
    assert meshrt.get(_create_from_a_task.remote(), timeout=60) == other["NodeID"]


@meshrt.remote
def _create_from_a_task():
    return meshrt.get(Where.options(num_cpus=2).remote().where.remote(), timeout=60)[0]


@pytest.mark.timeout(120)
def test_an_actor_waiting_for_room_on_a_host_that_goes_away_fails(two_nodes):
    _, other, remember, agent = two_nodes
    _holder = fill(other, remember, num_cpus=2)  # (its handle keeps the host's CPUs taken)
    waiting = Where.options(num_cpus=2, **on(other["NodeID"])).remote()
    answer = waiting.where.remote()
    meshrt.nodes()  # (a request after its creation, on the same connection: the head has it waiting now)
    agent.kill()
    with pytest.raises(meshrt.exceptions.ActorDiedError, match="before it had room for it"):
        meshrt.get(answer, timeout=60)
    gone = next(n for n in meshrt.nodes() if n["NodeID"] == other["NodeID"])
    assert not gone["Alive"] and gone["DeathReason"] == 2  # (Ray's UNEXPECTED_TERMINATION)
    assert "trainhost" in gone["DeathReasonMessage"] and "went away" in gone["DeathReasonMessage"]
    (row,) = list_nodes(filters=[("node_id", "=", other["NodeID"])])
    assert row.state == "DEAD" and row.state_message == gone["DeathReasonMessage"]
    assert "trainer" not in meshrt.cluster_resources()


@pytest.mark.timeout(120)
def test_what_only_a_busy_host_offers_waits_there_and_a_mix_no_host_has_is_named(two_nodes):
    _, other, remember, _ = two_nodes
    first = fill(other, remember, resources={"trainer": 1})
    # soft affinity to the busy host, for what the head never has: it waits there
    second = Where.options(resources={"trainer": 1}, **on(other["NodeID"], soft=True)).remote()
    answer = second.where.remote()
    meshrt.kill(first)
    assert meshrt.get(answer, timeout=60)[0] == other["NodeID"]
    remember()
    with pytest.raises(meshrt.exceptions.ActorUnschedulableError, match="no single node has all of that"):
        Where.options(resources={"trainer": 1, "headonly": 1}).remote()


class OnHead(meshrt.Actor):
    @meshrt.endpoint
    def where(self):
        return meshrt.get_runtime_context().get_node_id()


@pytest.mark.timeout(120)
def test_gpus_elsewhere_leave_this_hosts_mesh_on_this_host(two_nodes):
    head, other, remember, _ = two_nodes
    gpu = Where.options(num_gpus=1).remote()  # (only the agent's host has GPUs)
    assert meshrt.get(gpu.where.remote(), timeout=60)[0] == other["NodeID"]
    remember()
    procs = meshrt.this_host().spawn_procs(per_host={"gpus": 2})  # (this host has none: plain processes)
    mesh = procs.spawn("onhead", OnHead)
    assert list(mesh.where.call().get(timeout=60).values()) == [head, head]
    procs.stop().get(timeout=60)

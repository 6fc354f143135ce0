"""Where tasks and actors go on a cluster of several hosts when nothing pins them, as
Ray places them: actors over the hosts, ``scheduling_strategy="SPREAD"`` taking the
hosts in turn, and a task queued on a busy host moving to one that frees up first
(spillback). The head has 1 CPU, the agent's host 2 (test_multihost_nodes.two_nodes)."""

from __future__ import annotations

import fcntl

import pytest

import meshrt

from . import test_multihost_nodes
from .test_multihost_nodes import Where, node_of_task, on
from .test_multihost_tasks import Gate, meet

two_nodes = test_multihost_nodes.two_nodes

SPREAD = {"scheduling_strategy": "SPREAD"}


def _nodes_of(actors) -> list:
    return [node for node, _, _ in meshrt.get([a.where.remote() for a in actors], timeout=60)]


@meshrt.remote
def held_by(gate, lock_path: str):
    """Runs (holding its CPU: no get(), which would lend it) until the test unlocks ``lock_path``."""
    gate.arrive.remote()
    with open(lock_path) as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # (blocks while the test holds it)
        fcntl.flock(f, fcntl.LOCK_UN)
    return meshrt.get_runtime_context().get_node_id()


@meshrt.remote
def actors_from_a_task(n: int) -> tuple:
    """From a worker on the head host: where its own actors go."""
    actors = [Where.remote() for _ in range(n)]
    return meshrt.get_runtime_context().get_node_id(), _nodes_of(actors)


@pytest.mark.timeout(120)
def test_actors_asking_for_nothing_take_the_hosts_in_turn(two_nodes):
    head, other, remember, _ = two_nodes
    actors = [Where.remote() for _ in range(4)]
    nodes = _nodes_of(actors)
    remember()
    assert sorted(nodes) == sorted([head, other["NodeID"]] * 2)


def _fill_both_hosts(head, other, remember) -> list:
    """Three actors of 1 CPU: the head's CPU first, then the agent host's two."""
    running = [Where.options(num_cpus=1).remote() for _ in range(3)]
    assert _nodes_of(running) == [head, other["NodeID"], other["NodeID"]]
    remember()
    return running


@pytest.mark.timeout(120)
def test_actors_asking_for_cpus_go_where_they_fit_now_the_head_first(two_nodes):
    head, other, remember, _ = two_nodes
    _fill_both_hosts(head, other, remember)


@pytest.mark.timeout(120)
def test_spread_takes_the_hosts_in_turn_where_the_default_fills_the_head_first(two_nodes):
    head, other, remember, _ = two_nodes
    gate = Gate.options(**on(head)).remote()
    # Half a CPU each: the head has room for two, so by default both run there ...
    assert meshrt.get([meet.options(num_cpus=0.5).remote(gate, 2) for _ in range(2)], timeout=60) == [head] * 2
    # ... and spread, one on each host (both must run at once to return).
    gate = Gate.options(**on(head)).remote()
    nodes = meshrt.get([meet.options(num_cpus=0.5, **SPREAD).remote(gate, 2) for _ in range(2)], timeout=60)
    remember()
    assert sorted(nodes) == sorted([head, other["NodeID"]])
    assert sorted(_nodes_of([Where.options(num_cpus=0.5, **SPREAD).remote() for _ in range(2)])) == sorted(
        [head, other["NodeID"]])


@pytest.mark.timeout(120)
def test_a_task_queued_on_a_busy_host_moves_to_one_that_frees_up(two_nodes, tmp_path):
    head, other, remember, _ = two_nodes
    gate = Gate.options(**on(head)).remote()
    head_lock, agent_lock = tmp_path / "head", tmp_path / "agent"
    with open(head_lock, "w") as on_head, open(agent_lock, "w") as on_agent:
        fcntl.flock(on_head, fcntl.LOCK_EX)
        fcntl.flock(on_agent, fcntl.LOCK_EX)
        first = held_by.remote(gate, str(head_lock))  # (the head first, while it has room)
        meshrt.get(gate.arrivals.remote(1), timeout=60)
        second = [held_by.remote(gate, str(agent_lock)) for _ in range(2)]  # (the agent's 2 CPUs)
        meshrt.get(gate.arrivals.remote(3), timeout=60)
        remember()
        waiting = node_of_task.remote()  # (both hosts full: it queues on the head, the first on a tie)
        meshrt.nodes()  # (a request after the submission: the head has it queued now)
        fcntl.flock(on_agent, fcntl.LOCK_UN)
        assert meshrt.get(second, timeout=60) == [other["NodeID"]] * 2
        # The head is still busy: the queued task ran on the agent's host once it freed up.
        assert meshrt.get(waiting, timeout=60) == other["NodeID"]
        fcntl.flock(on_head, fcntl.LOCK_UN)
        assert meshrt.get(first, timeout=60) == head


@pytest.mark.timeout(120)
def test_a_head_host_worker_places_its_actors_over_the_hosts_too(two_nodes):
    head, other, remember, _ = two_nodes
    here, nodes = meshrt.get(actors_from_a_task.options(**on(head)).remote(4), timeout=60)
    remember()
    assert here == head
    assert sorted(nodes) == sorted([head, other["NodeID"]] * 2)


@pytest.mark.timeout(120)
def test_an_actor_whose_host_goes_away_restarts_on_a_host_that_is_left(two_nodes):
    head, other, remember, agent = two_nodes
    actors = [Where.options(max_restarts=1, max_task_retries=1).remote() for _ in range(2)]
    nodes = _nodes_of(actors)
    remember()
    moved = actors[nodes.index(other["NodeID"])]
    agent.kill()
    assert meshrt.get(moved.where.remote(), timeout=60)[0] == head
    assert meshrt.get(actors[nodes.index(head)].where.remote(), timeout=60)[0] == head


@pytest.mark.timeout(120)
def test_a_task_queued_behind_a_busy_worker_is_handed_back_when_another_host_frees_up(two_nodes, tmp_path):
    head, other, remember, _ = two_nodes
    gate = Gate.options(**on(head)).remote()
    locks = {name: open(tmp_path / name, "w") for name in ("a", "b", "x")}
    try:
        for f in locks.values():
            fcntl.flock(f, fcntl.LOCK_EX)
        a = held_by.remote(gate, locks["a"].name)  # (the head's CPU)
        meshrt.get(gate.arrivals.remote(1), timeout=60)
        b = [held_by.remote(gate, locks["b"].name) for _ in range(2)]  # (the agent's two)
        meshrt.get(gate.arrivals.remote(3), timeout=60)
        remember()
        # Both hosts full: x and w queue on the head, y and z on the agent's host.
        x, y, z, w = held_by.remote(gate, locks["x"].name), node_of_task.remote(), node_of_task.remote(), \
            node_of_task.remote()
        meshrt.nodes()  # (the head has them all queued now)
        fcntl.flock(locks["a"], fcntl.LOCK_UN)
        assert meshrt.get(a, timeout=60) == head  # (its worker now runs x, with w queued behind it)
        meshrt.get(gate.arrivals.remote(4), timeout=60)
        fcntl.flock(locks["b"], fcntl.LOCK_UN)
        assert meshrt.get(b + [y, z], timeout=60) == [other["NodeID"]] * 4
        # x still runs: w was handed back by x's worker and ran on the host that freed up.
        assert meshrt.get(w, timeout=60) == other["NodeID"]
        fcntl.flock(locks["x"], fcntl.LOCK_UN)
        assert meshrt.get(x, timeout=60) == head
    finally:
        for f in locks.values():
            f.close()


@pytest.mark.timeout(120)
def test_actors_waiting_for_room_wait_on_every_host_not_one(two_nodes):
    head, other, remember, _ = two_nodes
    running = _fill_both_hosts(head, other, remember)
    waiting = [Where.options(num_cpus=1).remote() for _ in range(3)]  # (no room anywhere: they wait)
    calls = [actor.where.remote() for actor in waiting]
    meshrt.kill(running[1])  # (a CPU frees on the agent's host: one waits there, it starts)
    ready, _ = meshrt.wait(calls, num_returns=1, timeout=60)
    assert [meshrt.get(ref)[0] for ref in ready] == [other["NodeID"]]
    meshrt.kill(running[0])  # (and one waits on the head)
    ready, _ = meshrt.wait(calls, num_returns=2, timeout=60)
    assert sorted(meshrt.get(ref)[0] for ref in ready) == sorted([head, other["NodeID"]])


@pytest.mark.timeout(120)
def test_an_actor_waiting_on_a_full_host_moves_to_one_that_frees_up(two_nodes):
    head, other, remember, _ = two_nodes
    running = _fill_both_hosts(head, other, remember)
    waiting = Where.options(num_cpus=1).remote()  # (no room anywhere: it waits on the head, first on a tie)
    call = waiting.where.remote()
    meshrt.nodes()  # (a request after the creation: the head has placed it)
    meshrt.kill(running[1])  # (a CPU frees on the agent's host, not on the head)
    assert meshrt.get(call, timeout=60)[0] == other["NodeID"]

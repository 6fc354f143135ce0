"""Tasks on every host of a cluster, as Ray runs them: where their resources are, where
a ``NodeAffinitySchedulingStrategy`` says, and spread once the head's CPUs are taken;
moved or failed when their host goes away (one agent on loopback, its own store)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import meshrt

from . import test_multihost_nodes
from .test_multihost_nodes import Where, node_of_task, on

two_nodes = test_multihost_nodes.two_nodes  # (the fixture: the head and one agent's host)

BIG = 4 << 20  # (well past the size kept inline in messages)


@meshrt.remote
def checksum(arr):
    """Where it ran, what it got, and a large value back."""
    return meshrt.get_runtime_context().get_node_id(), int(arr.sum()), np.full(BIG, 7, dtype=np.uint8)


@meshrt.remote
def count_up(n: int):
    for i in range(n):
        yield i, meshrt.get_runtime_context().get_node_id()


@meshrt.remote
def ask_the_head(head):
    """A task that submits one itself, to the head's node."""
    here = meshrt.get_runtime_context().get_node_id()
    return here, meshrt.get(node_of_task.options(**on(head)).remote(), timeout=60)


@meshrt.remote(num_cpus=0)
class Gate:
    """Counts the tasks that arrive and holds them until as many as asked have."""

    def __init__(self) -> None:
        self.count = 0
        self.is_open = False
        self.changed = asyncio.Condition()

    async def open(self) -> None:
        async with self.changed:
            self.is_open = True
            self.changed.notify_all()

    async def opened(self) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: self.is_open)

    async def arrive(self) -> int:
        async with self.changed:
            self.count += 1
            self.changed.notify_all()
            return self.count

    async def arrivals(self, n: int) -> int:
        async with self.changed:
            await self.changed.wait_for(lambda: self.count >= n)
            return self.count

    async def hold(self) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: False)


@meshrt.remote
def meet(gate, n: int):
    """Returns once ``n`` tasks have arrived: only if they run at the same time."""
    meshrt.get(gate.arrive.remote(), timeout=60)
    meshrt.get(gate.arrivals.remote(n), timeout=60)
    return meshrt.get_runtime_context().get_node_id()


@meshrt.remote(max_retries=1)
def after_the_gate_opens(gate):
    meshrt.get(gate.opened.remote(), timeout=60)
    return meshrt.get_runtime_context().get_node_id()


@meshrt.remote
def held_on_first_attempt(gate):
    if meshrt.get(gate.arrive.remote(), timeout=60) == 1:
        meshrt.get(gate.hold.remote())  # (until its host goes away)
    return meshrt.get_runtime_context().get_node_id()


@pytest.mark.timeout(120)
def test_a_task_asking_for_what_only_another_host_offers_runs_there(two_nodes):
    head, other, remember, _ = two_nodes
    arr = np.arange(BIG // 8, dtype=np.int64)
    node_id, total, big = meshrt.get(checksum.options(num_gpus=1).remote(arr), timeout=60)
    remember()
    assert node_id == other["NodeID"] and total == int(arr.sum())
    assert big.nbytes == BIG and int(big[::4096].sum()) == 7 * (BIG // 4096)
    stored = meshrt.put(arr)  # (a ref argument: fetched from the head's store there)
    node_id, total, _ = meshrt.get(checksum.options(resources={"trainer": 1}).remote(stored), timeout=60)
    assert node_id == other["NodeID"] and total == int(arr.sum())
    assert meshrt.get(ask_the_head.options(num_gpus=1).remote(head), timeout=60) == (other["NodeID"], head)
    with pytest.raises(meshrt.exceptions.TaskUnschedulableError, match="largest node has trainer=1"):
        node_of_task.options(resources={"trainer": 2}).remote()
    with pytest.raises(meshrt.exceptions.TaskUnschedulableError, match="no single node has all of that"):
        node_of_task.options(resources={"trainer": 1, "headonly": 1}).remote()


@pytest.mark.timeout(120)
def test_a_task_runs_on_the_node_its_affinity_names(two_nodes):
    head, other, remember, _ = two_nodes
    assert meshrt.get(node_of_task.options(**on(other["NodeID"])).remote(), timeout=60) == other["NodeID"]
    remember()
    assert [meshrt.get(r, timeout=60) for r in count_up.options(**on(other["NodeID"])).remote(3)] == [
        (i, other["NodeID"]) for i in range(3)]  # (a generator's items, streamed from there)
    assert meshrt.get(node_of_task.options(**on(head)).remote(), timeout=60) == head
    # (packed for any host, as every task once another host is in: its large argument
    # is lent, and read on the head too)
    arr = np.arange(BIG // 8, dtype=np.int64)
    node_id, total, _ = meshrt.get(checksum.options(**on(head)).remote(arr), timeout=60)
    assert node_id == head and total == int(arr.sum())
    with pytest.raises(ValueError, match="no node of the cluster has that id"):
        node_of_task.options(**on("feedbeef")).remote()
    assert meshrt.get(node_of_task.options(**on("feedbeef", soft=True)).remote(), timeout=60) in (head, other["NodeID"])
    # soft, to the head, for what only the agent's host has: run there
    assert meshrt.get(node_of_task.options(num_gpus=1, **on(head, soft=True)).remote(), timeout=60) == other["NodeID"]
    with pytest.raises(meshrt.exceptions.TaskUnschedulableError, match="to host 'trainhost'"):
        meshrt.get(node_of_task.options(resources={"headonly": 1}, **on(other["NodeID"])).remote(), timeout=60)


@pytest.mark.timeout(120)
def test_tasks_spread_over_the_hosts_once_the_heads_cpus_are_taken(two_nodes):
    head, other, remember, _ = two_nodes
    gate = Gate.options(**on(head)).remote()
    # The head has 1 CPU, the agent's host 2: the first task takes the head's, the next
    # two the agent's (all three must run at once to return).
    nodes = meshrt.get([meet.remote(gate, 3) for _ in range(3)], timeout=60)
    remember()
    assert sorted(nodes) == sorted([head, other["NodeID"], other["NodeID"]])
    assert meshrt.get(node_of_task.remote(), timeout=60) == head  # (all idle again: the head first)


@pytest.mark.timeout(120)
def test_tasks_of_a_host_that_goes_away_run_again_elsewhere_or_fail_naming_it(two_nodes):
    head, other, remember, agent = two_nodes
    gate = Gate.options(**on(head)).remote()
    running = held_on_first_attempt.options(max_retries=1, **on(other["NodeID"], soft=True)).remote(gate)
    meshrt.get(gate.arrivals.remote(1), timeout=60)  # (it runs there now)
    holder = Where.options(resources={"trainer": 1}, **on(other["NodeID"])).remote()
    meshrt.get(holder.where.remote(), timeout=60)
    remember()
    queued = node_of_task.options(resources={"trainer": 1}, **on(other["NodeID"])).remote()  # (waits for it)
    meshrt.nodes()  # (a request after the submission, on the same connection: the head has it queued now)
    agent.kill()
    assert meshrt.get(running, timeout=60) == head  # (its retry: on the host that is left)
    with pytest.raises(ValueError, match="has left the cluster"):
        meshrt.get(queued, timeout=60)


@pytest.mark.timeout(120)
def test_a_task_on_another_host_is_cancelled_there(two_nodes):
    _, other, remember, _ = two_nodes
    gate = Gate.remote()
    held = held_on_first_attempt.options(**on(other["NodeID"])).remote(gate)
    meshrt.get(gate.arrivals.remote(1), timeout=60)  # (it runs there now)
    remember()
    meshrt.cancel(held)
    with pytest.raises(meshrt.exceptions.TaskCancelledError):
        meshrt.get(held, timeout=60)
    after = held_on_first_attempt.options(**on(other["NodeID"])).remote(gate)  # (arrives second: returns)
    assert meshrt.get(after, timeout=60) == other["NodeID"]


@pytest.mark.timeout(120)
def test_a_burst_on_a_host_that_goes_away_all_runs_on_the_host_that_is_left(two_nodes):
    head, other, remember, agent = two_nodes
    gate = Gate.options(**on(head)).remote()
    # Spread over both hosts: some run on the agent's host, some wait in its queue, and
    # some of its workers are still starting when it goes; none of them is lost.
    tasks = [after_the_gate_opens.remote(gate) for _ in range(8)]
    meshrt.nodes()  # (a request after the submissions: the head has placed them all)
    remember()
    agent.kill()
    meshrt.get(gate.open.remote(), timeout=60)
    nodes = meshrt.get(tasks, timeout=90)
    assert head in nodes and set(nodes) <= {head, other["NodeID"]}

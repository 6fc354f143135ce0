"""Placement groups, as Ray's: bundles reserved on the cluster's hosts all at once, tasks
and actors run inside them, removal gives everything back (one host here; two hosts,
the head and an agent's, at the end)."""

from __future__ import annotations

import numpy as np
import pytest

import meshrt
from meshrt.util.placement_group import (
    get_current_placement_group,
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from meshrt.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from . import test_multihost_nodes
from .helpers import wait_until
from .test_multihost_tasks import Gate, meet

two_nodes = test_multihost_nodes.two_nodes  # (the fixture: the head, 1 CPU, and an agent's host, 2 CPUs + 2 GPUs)


def inside(pg, index: int = -1) -> dict:
    return {"scheduling_strategy": PlacementGroupSchedulingStrategy(pg, index)}


@meshrt.remote
def what_it_got():
    context = meshrt.get_runtime_context()
    return context.get_assigned_resources(), get_current_placement_group(), context.get_node_id()


@meshrt.remote(num_gpus=0.5, num_cpus=0)
def gpus_seen():
    return meshrt.get_runtime_context().get_node_id(), tuple(meshrt.get_gpu_ids())


@meshrt.remote
class Holder:
    def __init__(self, data=None) -> None:
        self.size = 0 if data is None else int(data.nbytes)

    def sized(self):
        return self.size

    def ping(self):
        return meshrt.get_runtime_context().get_placement_group_id()

    def node(self):
        return meshrt.get_runtime_context().get_node_id()


@pytest.mark.timeout(60)
def test_a_group_reserves_its_bundles_and_what_runs_in_it_takes_from_them(rt4):
    pg = placement_group([{"CPU": 1}, {"CPU": 2}], name="pair")
    assert pg.wait(30)
    table = placement_group_table(pg)
    assert table["state"] == "CREATED" and table["bundles"] == {0: {"CPU": 1}, 1: {"CPU": 2}}
    group = pg.id.hex()
    free = meshrt.available_resources()
    assert free["CPU"] == 1.0 and free[f"CPU_group_1_{group}"] == 2.0  # (PACK: both on this host)
    assert meshrt.get(pg.ready(), timeout=30) == pg and get_placement_group("pair") == pg
    resources, current, _ = meshrt.get(what_it_got.options(**inside(pg, 1)).remote(), timeout=30)
    assert resources == {"CPU": 1} and current == pg  # (by the node's names, inside the group)
    assert meshrt.get(what_it_got.remote(), timeout=30)[1] is None
    gate = Gate.remote()
    assert meshrt.get([meet.options(**inside(pg, 1)).remote(gate, 2) for _ in range(2)], timeout=30)  # (2 CPUs)
    holder = Holder.options(num_cpus=1, **inside(pg, 0)).remote()
    assert meshrt.get(holder.ping.remote(), timeout=30) == group
    assert f"CPU_group_0_{group}" not in meshrt.available_resources()  # (the bundle's CPU is taken)
    assert meshrt.available_resources()["CPU"] == 1.0  # (the rest of the host is not)
    any_bundle = [meshrt.get(what_it_got.options(num_cpus=2, **inside(pg)).remote(), timeout=30)[0]]
    assert any_bundle == [{"CPU": 2}]  # (index -1: the bundle large enough)

    remove_placement_group(pg)
    with pytest.raises(meshrt.exceptions.ActorDiedError, match="placement group pair was removed"):
        meshrt.get(holder.ping.remote(), timeout=30)
    assert wait_until(lambda: meshrt.available_resources().get("CPU") == 4.0)
    assert not [name for name in meshrt.available_resources() if group in name]
    assert placement_group_table(pg)["state"] == "REMOVED"
    with pytest.raises(meshrt.exceptions.TaskPlacementGroupRemoved, match="was removed"):  # (Ray's name)
        meshrt.get(what_it_got.options(**inside(pg, 0)).remote(), timeout=30)
    late = Holder.options(**inside(pg, 0)).remote()
    with pytest.raises(meshrt.exceptions.ActorPlacementGroupRemoved, match="was removed"):
        meshrt.get(late.ping.remote(), timeout=30)
    assert issubclass(meshrt.exceptions.TaskPlacementGroupRemoved, meshrt.exceptions.TaskUnschedulableError)
    placement_group([{"CPU": 1}], name="pair")  # (the name is free again)


@pytest.mark.timeout(60)
def test_a_group_that_does_not_fit_now_waits_and_so_does_what_is_placed_in_it(rt4):
    big = Holder.options(num_cpus=3).remote()
    meshrt.get(big.ping.remote(), timeout=30)
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_PACK")
    assert placement_group_table(pg)["state"] == "PENDING"
    waiting = what_it_got.options(**inside(pg, 1)).remote()
    waiting_actor = Holder.options(**inside(pg)).remote()
    meshrt.kill(big)
    assert meshrt.get(pg.ready(), timeout=30) == pg
    assert meshrt.get(waiting, timeout=30)[1] == pg
    assert meshrt.get(waiting_actor.ping.remote(), timeout=30) == pg.id.hex()
    assert placement_group_table()[pg.id.hex()]["state"] == "CREATED"


@pytest.mark.timeout(60)
def test_any_bundle_takes_the_first_to_free_up_and_waiting_can_be_cancelled(rt4):
    pg = placement_group([{"CPU": 1}, {"CPU": 1}])
    holders = [Holder.options(num_cpus=1, **inside(pg, i)).remote() for i in range(2)]
    assert meshrt.get([h.ping.remote() for h in holders], timeout=30) == [pg.id.hex()] * 2
    first = what_it_got.options(**inside(pg)).remote()  # (no bundle has room: waits for one)
    cancelled = what_it_got.options(**inside(pg)).remote()
    meshrt.cancel(cancelled)
    with pytest.raises(meshrt.exceptions.TaskCancelledError):
        meshrt.get(cancelled, timeout=30)
    meshrt.kill(holders[1])  # (bundle 1 frees first: the waiting task runs there)
    assert meshrt.get(first, timeout=30)[1] == pg
    later = placement_group([{"CPU": 4}])  # (waits for the CPUs pg holds)
    assert not later.wait(0.2)
    remove_placement_group(pg)
    assert later.wait(30)
    remove_placement_group(later)
    assert not later.wait(30)  # (removed: never reserved again)


@pytest.mark.timeout(60)
def test_removing_a_group_ends_what_runs_in_it_and_fails_what_waits_for_it(rt4):
    outside = Holder.options(num_cpus=1).remote()  # (holds a CPU throughout)
    meshrt.get(outside.ping.remote(), timeout=30)
    pg = placement_group([{"CPU": 1}])
    gate = Gate.remote()
    running = meet.options(**inside(pg, 0)).remote(gate, 99)  # (until it is killed)
    assert meshrt.get(gate.arrivals.remote(1), timeout=30) == 1
    later = placement_group([{"CPU": 4}])  # (waits, as long as ``outside`` holds its CPU)
    queued = what_it_got.options(**inside(later, 0)).remote()
    remove_placement_group(pg)
    with pytest.raises(meshrt.exceptions.TaskCancelledError, match="its placement group .* was removed"):
        meshrt.get(running, timeout=30)
    remove_placement_group(later)
    with pytest.raises(meshrt.exceptions.TaskUnschedulableError, match="was removed"):
        meshrt.get(queued, timeout=30)
    assert wait_until(lambda: meshrt.available_resources().get("CPU") == 3.0)


@pytest.mark.timeout(60)
def test_bad_groups_and_requests_fail_at_the_call(rt4):
    with pytest.raises(ValueError, match="can never be placed"):
        placement_group([{"CPU": 8}])
    with pytest.raises(ValueError, match="a host per bundle"):
        placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")
    with pytest.raises(ValueError, match="no one host has room for all of them"):
        placement_group([{"CPU": 3}, {"CPU": 3}], strategy="STRICT_PACK")
    with pytest.raises(ValueError, match="the hosts together have less"):
        placement_group([{"CPU": 3}, {"CPU": 3}], strategy="PACK")
    with pytest.raises(ValueError, match="strategy='TIGHT'"):
        placement_group([{"CPU": 1}], strategy="TIGHT")
    with pytest.raises(ValueError, match="non-empty list"):
        placement_group([])
    with pytest.raises(ValueError, match="bundle 0 must be a dict"):
        placement_group([{"CPU": 0}])
    pg = placement_group([{"CPU": 1}], name="one")
    with pytest.raises(ValueError, match="already exists"):
        placement_group([{"CPU": 1}], name="one")
    with pytest.raises(ValueError, match="bundle_index=3: the placement group has 1 bundle"):
        what_it_got.options(**inside(pg, 3))
    with pytest.raises(ValueError, match="more than bundle 0 of its placement group holds"):
        what_it_got.options(num_cpus=2, **inside(pg, 0))
    with pytest.raises(ValueError, match="more than any bundle"):
        Holder.options(num_gpus=1, **inside(pg))
    with pytest.raises(ValueError, match="is not a placement group"):
        what_it_got.options(placement_group="one")
    with pytest.raises(ValueError, match="needs placement_group= as well"):
        what_it_got.options(placement_group_bundle_index=0)
    with pytest.raises(ValueError, match="no placement group of that name"):
        get_placement_group("none")
    # (Ray's older spelling of the same thing)
    assert meshrt.get(what_it_got.options(placement_group=pg, placement_group_bundle_index=0).remote(),
                      timeout=30)[1] == pg


def _group_id():
    return meshrt.get_runtime_context().get_placement_group_id()


@meshrt.remote(num_cpus=0)
def group_of_children(depth: int, escape: bool = False):
    """The group of this task and, below it, of a child (naming no placement, or
    leaving the group with placement_group=None) and of the child's child."""
    child = group_of_children
    if escape:
        child = child.options(scheduling_strategy=PlacementGroupSchedulingStrategy(None))
    below = meshrt.get(child.remote(depth - 1), timeout=30) if depth else []
    return [_group_id(), *below]


@meshrt.remote(num_cpus=0)
def child_refusing():
    refusing = group_of_children.options(placement_group_capture_child_tasks=False)
    return [_group_id(), *meshrt.get(refusing.remote(0), timeout=30)]


@meshrt.remote(num_cpus=0)
def child_in_bundle(pg):
    return meshrt.get(group_of_children.options(**inside(pg)).remote(1), timeout=30)


@meshrt.remote(num_cpus=0)
def asks_too_much():
    return meshrt.get(what_it_got.options(num_cpus=3).remote(), timeout=30)


@meshrt.remote(num_cpus=0)
class Submitter:
    def children(self):
        return meshrt.get([group_of_children.remote(0), Holder.options(num_cpus=1).remote().ping.remote()],
                          timeout=30)


@pytest.mark.timeout(60)
def test_a_group_that_captures_child_tasks_runs_what_they_submit_in_it(rt4):
    pg = placement_group([{"CPU": 1}, {"CPU": 1}])
    assert pg.wait(30)
    mine = pg.id.hex()
    capturing = PlacementGroupSchedulingStrategy(pg, placement_group_capture_child_tasks=True)
    assert meshrt.get(group_of_children.options(scheduling_strategy=capturing).remote(2)) == [mine] * 3
    assert meshrt.get(group_of_children.options(**inside(pg)).remote(1)) == [mine, None]  # (not captured)
    assert meshrt.get(group_of_children.options(scheduling_strategy=capturing).remote(1, escape=True)) == [mine, None]
    # (Ray's older options, and an actor's calls)
    older = group_of_children.options(placement_group=pg, placement_group_capture_child_tasks=True)
    assert meshrt.get(older.remote(1)) == [mine, mine]
    actor = Submitter.options(scheduling_strategy=capturing).remote()
    assert meshrt.get(actor.children.remote()) == [[mine], mine]
    refuses = group_of_children.options(scheduling_strategy=capturing, placement_group_capture_child_tasks=False)
    assert meshrt.get(refuses.remote(0)) == [mine]
    assert meshrt.get(child_refusing.options(scheduling_strategy=capturing).remote()) == [mine, None]
    # (placed in the group by its own options, a child still captures what it submits, as its parent)
    assert meshrt.get(child_in_bundle.options(scheduling_strategy=capturing).remote(pg)) == [mine, mine]
    with pytest.raises(meshrt.exceptions.TaskError, match="more than any bundle of its placement group"):
        meshrt.get(asks_too_much.options(scheduling_strategy=capturing).remote())


@pytest.mark.timeout(120)
def test_bundles_spread_over_hosts_and_are_reserved_again_when_theirs_goes(two_nodes):
    head, other, remember, agent = two_nodes
    spread = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")
    assert spread.wait(60)
    where = placement_group_table(spread)["bundles_to_node_id"]
    assert sorted(where.values()) == sorted([head, other["NodeID"]])
    for index in range(2):
        assert meshrt.get(what_it_got.options(**inside(spread, index)).remote(), timeout=60)[2] == where[index]
    remember()
    packed = placement_group([{"GPU": 1}, {"GPU": 1}], strategy="STRICT_PACK")  # (only the agent has GPUs)
    assert packed.wait(60)
    assert set(placement_group_table(packed)["bundles_to_node_id"].values()) == {other["NodeID"]}
    seen = meshrt.get([gpus_seen.options(**inside(packed, i)).remote() for i in range(2)], timeout=60)
    remember()
    assert [node for node, _ in seen] == [other["NodeID"]] * 2
    assert sorted(gpus for _, gpus in seen) == [(0,), (1,)]  # (each bundle holds its own GPU)
    big = Holder.options(**inside(packed, 0)).remote(np.ones(4 << 20, dtype=np.uint8))  # (its argument lent)
    assert meshrt.get(big.sized.remote(), timeout=60) == 4 << 20
    remember()
    movable = placement_group([{"CPU": 1}], strategy="SPREAD")  # (the agent's last CPU: the head has none)
    assert movable.wait(60) and placement_group_table(movable)["bundles_to_node_id"] == {0: other["NodeID"]}
    keeper = Holder.options(max_restarts=1, **inside(movable, 0)).remote()
    assert meshrt.get(keeper.node.remote(), timeout=60) == other["NodeID"]
    remember()

    agent.kill()
    assert wait_until(lambda: placement_group_table(movable)["state"] == "RESCHEDULING", timeout=30)
    waiting = what_it_got.options(**inside(spread, 1)).remote()  # (waits for its bundle's new host)
    moved = what_it_got.options(**inside(movable, 0)).remote()
    remove_placement_group(spread)  # (the head's CPU is free again: ``movable`` moves there)
    with pytest.raises(meshrt.exceptions.TaskUnschedulableError, match="was removed"):
        meshrt.get(waiting, timeout=30)
    assert meshrt.get(moved, timeout=60)[2] == head
    assert placement_group_table(movable)["bundles_to_node_id"] == {0: head}
    assert meshrt.get(keeper.node.remote(), timeout=60) == head  # (restarted in its bundle's new place)
    assert meshrt.get(keeper.ping.remote(), timeout=60) == movable.id.hex()


@pytest.mark.timeout(60)
def test_local_mode_runs_what_is_placed_in_a_group_in_the_driver():
    meshrt.init(local_mode=True, num_cpus=2)
    with pytest.raises(ValueError, match="a host per bundle"):
        placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")
    with pytest.raises(ValueError, match="CPU"):
        placement_group([{"CPU": 2}, {"CPU": 1}])
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], name="local")
    assert pg.wait(1) and meshrt.get(pg.ready()) == pg and get_placement_group("local") == pg
    assert meshrt.get(what_it_got.options(**inside(pg, 1)).remote())[2] == meshrt.get_runtime_context().get_node_id()
    remove_placement_group(pg)
    assert placement_group_table(pg)["state"] == "REMOVED" and not pg.wait(1)
    with pytest.raises(meshrt.exceptions.TaskUnschedulableError, match="was removed"):
        what_it_got.options(**inside(pg, 0)).remote()

"""A gang of actors held together by a placement group, as a Ray training job sets up
its workers: reserve the bundles, wait for them, place one actor per bundle and a
helper task in its own bundle, then remove the group when the job is done.

* ``placement_group`` + ``pg.ready()``/``pg.wait()``, ``placement_group_table``.
* ``PlacementGroupSchedulingStrategy`` with a bundle index and with ``-1`` (any).
* ``remove_placement_group`` ends the actors placed in the group.
"""

import pytest

import meshrt as ray
from meshrt.util.placement_group import (
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from meshrt.util.scheduling_strategies import PlacementGroupSchedulingStrategy

pytestmark = pytest.mark.timeout(120)


@ray.remote(num_cpus=1)
class Shard:
    def __init__(self, rank):
        self.rank = rank
        self.total = 0

    def add(self, values):
        self.total += sum(values)
        return self.rank, self.total

    def assigned(self):
        return ray.get_runtime_context().get_assigned_resources().get("CPU")


@ray.remote(num_cpus=1)
def shard_sizes(n, parts):
    return [len(range(i, n, parts)) for i in range(parts)]


def test_a_gang_of_actors_lives_and_ends_with_its_placement_group():
    ray.init(num_cpus=4)
    pg = placement_group([{"CPU": 1}] * 4, strategy="PACK")
    ray.get(pg.ready(), timeout=60)
    assert pg.wait(timeout_seconds=10)
    assert placement_group_table(pg)["state"] == "CREATED"
    assert pg.bundle_count == 4 and pg.bundle_specs[0] == {"CPU": 1}

    shards = [Shard.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        pg, placement_group_bundle_index=i)).remote(i) for i in range(3)]
    sizes = ray.get(shard_sizes.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        pg, placement_group_bundle_index=3)).remote(10, 3), timeout=60)
    assert sizes == [4, 3, 3]
    assert ray.get([s.add.remote(list(range(k))) for s, k in zip(shards, sizes, strict=True)], timeout=60) == [
        (0, 6), (1, 3), (2, 3)]
    assert ray.get([s.assigned.remote() for s in shards], timeout=60) == [1, 1, 1]
    anywhere = ray.get(shard_sizes.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        pg, placement_group_bundle_index=-1)).remote(4, 2), timeout=60)
    assert anywhere == [2, 2]

    remove_placement_group(pg)
    for shard in shards:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(shard.add.remote([1]), timeout=60)
    assert placement_group_table(pg)["state"] == "REMOVED"

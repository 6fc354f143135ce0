"""``num_returns="dynamic"``: Ray's older generator form, still in code written before
"streaming" (Ray deprecates it). The call gives one ref; it resolves, once the generator
has finished, to a ``DynamicObjectRefGenerator`` of a ref per value.

* A sharding task whose number of shards depends on its input, its refs passed on to a
  task that sums them, and the generator itself passed to another task.
* An actor method, declared with ``@ray.method(num_returns="dynamic")`` and chosen per
  call with ``.options()``.
* A generator that raises part-way (its last ref raises it), one that raises before its
  first value, a worker that dies mid-way (the call's ref raises), and a function that is
  not a generator (refused where it is declared).
"""
import os

import numpy as np
import pytest

import meshrt as ray

pytestmark = pytest.mark.timeout(120)


@ray.remote(num_returns="dynamic")
def shard(values, per_shard):
    for start in range(0, len(values), per_shard):
        yield np.asarray(values[start:start + per_shard])


@ray.remote
def total(*shards):
    return int(sum(int(s.sum()) for s in shards))


@ray.remote
def count_and_sum(generator):
    refs = list(generator)
    return type(generator).__name__, len(refs), int(sum(int(s.sum()) for s in ray.get(refs)))


@ray.remote(num_returns="dynamic")
def fails_after(n):
    yield from range(n)
    raise ValueError(f"bad record after {n}")


@ray.remote(num_returns="dynamic", max_retries=0)
def dies_after_one():
    yield 1
    os._exit(1)


@ray.remote
def numbers(n):
    yield from range(n)


@ray.remote
class Pages:
    def __init__(self, rows):
        self.rows = rows

    @ray.method(num_returns="dynamic")
    def pages(self, size):
        for start in range(0, len(self.rows), size):
            yield self.rows[start:start + size]

    def page_list(self, size):
        yield from (self.rows[start:start + size] for start in range(0, len(self.rows), size))


def test_a_dynamic_task_gives_one_ref_to_all_its_values():
    ray.init(num_cpus=2)
    ref = shard.remote(list(range(10)), 3)
    assert isinstance(ref, ray.ObjectRef)
    generator = ray.get(ref)
    assert isinstance(generator, ray.DynamicObjectRefGenerator)
    assert len(generator) == 4
    refs = list(generator)
    assert all(isinstance(r, ray.ObjectRef) for r in refs)
    assert [s.tolist() for s in ray.get(refs)] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert list(generator) == [] and len(generator) == 0  # (each ref is handed out once)
    assert ray.get(total.remote(*refs)) == 45
    assert ray.get(count_and_sum.remote(shard.remote(list(range(6)), 4))) == ("DynamicObjectRefGenerator", 2, 15)
    assert list(ray.get(shard.remote([], 2))) == []
    ready, _ = ray.wait([shard.remote([1, 2], 1)], timeout=60)
    assert len(ready) == 1 and len(ray.get(ready[0])) == 2
    assert ray.get(list(ray.get(numbers.options(num_returns="dynamic").remote(3)))) == [0, 1, 2]


def test_a_dynamic_actor_method_by_decorator_and_by_options():
    ray.init(num_cpus=2)
    pages = Pages.remote(list(range(7)))
    assert ray.get(list(ray.get(pages.pages.remote(3)))) == [[0, 1, 2], [3, 4, 5], [6]]
    refs = list(ray.get(pages.page_list.options(num_returns="dynamic").remote(4)))
    assert ray.get(refs) == [[0, 1, 2, 3], [4, 5, 6]]


def test_errors_in_a_dynamic_generator():
    ray.init(num_cpus=2)
    refs = list(ray.get(fails_after.remote(2)))
    assert len(refs) == 3
    assert ray.get(refs[:2]) == [0, 1]
    with pytest.raises(ValueError, match="bad record after 2"):
        ray.get(refs[2])
    (only,) = list(ray.get(fails_after.remote(0)))
    with pytest.raises(ray.exceptions.RayTaskError, match="bad record after 0"):
        ray.get(only)
    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(dies_after_one.remote())


def test_dynamic_needs_a_generator_function():
    def plain():
        return [1, 2]

    with pytest.raises(ValueError, match="generator"):
        ray.remote(num_returns="dynamic")(plain)
    with pytest.raises(ValueError, match="generator"):
        ray.remote(plain).options(num_returns="dynamic")

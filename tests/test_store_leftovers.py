"""Blocks written for results that never reached their owner go back to the store,
and a retry writes its results again (the first attempt's blocks are in the way)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import meshrt
from meshrt._private import state
from meshrt.exceptions import TaskError, WorkerCrashedError
from tests.helpers import wait_until

MiB = 1 << 20


class DiesOnce:
    """Ends its process while being pickled, the first time only (a marker file says)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        return (int, (5,))


class Unpicklable:
    def __reduce__(self):
        raise TypeError("this value cannot be pickled")


def used() -> int:
    core = state.core()
    core.flush_frees()
    store = core.controller.store
    store.drain_unpins()
    return store.usage()["used"]


@pytest.mark.timeout(60)
def test_a_task_that_died_writing_its_results_is_retried(rt, tmp_path):
    @meshrt.remote(num_returns=2, max_retries=2)
    def two(marker):
        return np.full(8 * MiB, 1, dtype=np.uint8), DiesOnce(marker)

    baseline = used()
    big, small = two.remote(str(tmp_path / "died"))
    assert int(meshrt.get(big, timeout=30)[-1]) == 1 and meshrt.get(small, timeout=30) == 5
    del big, small
    assert wait_until(lambda: used() == baseline, timeout=10)


@pytest.mark.timeout(60)
def test_an_actor_call_that_died_writing_its_results_is_retried(rt, tmp_path):
    @meshrt.remote(max_restarts=1, max_task_retries=1)
    class Maker:
        @meshrt.method(num_returns=2)
        def two(self, marker):
            return np.full(8 * MiB, 1, dtype=np.uint8), DiesOnce(marker)

    baseline = used()
    big, small = Maker.remote().two.remote(str(tmp_path / "died"))
    assert int(meshrt.get(big, timeout=30)[-1]) == 1 and meshrt.get(small, timeout=30) == 5
    del big, small
    assert wait_until(lambda: used() == baseline, timeout=10)


@pytest.mark.timeout(60)
def test_a_streaming_generator_retried_after_its_first_item_yields_it_again(rt, tmp_path):
    """The retry writes item 0 again while its owner holds the first copy: the replay
    gets a block of its own (and is dropped on arrival), not 'already in the store'."""

    @meshrt.remote(max_retries=1)
    def items(marker):
        yield np.full(8 * MiB, 1, dtype=np.uint8)
        yield DiesOnce(marker)

    baseline = used()
    values = [meshrt.get(ref, timeout=30) for ref in items.options(num_returns="streaming").remote(
        str(tmp_path / "died"))]
    assert int(values[0][-1]) == 1 and values[1] == 5
    del values
    assert wait_until(lambda: used() == baseline, timeout=10)


@meshrt.remote(num_returns=2, max_retries=1)
def two_dying_once(marker):
    return np.full(8 * MiB, 1, dtype=np.uint8), DiesOnce(marker)


@meshrt.remote(num_returns=2, max_retries=0)
def two_dying(marker):
    return np.full(8 * MiB, 1, dtype=np.uint8), DiesOnce(marker)


@meshrt.remote
class Owner:
    """Owns the results of the tasks it calls: they are sealed as they are written, so
    only the owner can tell that a block written for it never arrived."""

    def retried(self, marker):
        big, small = two_dying_once.remote(marker)
        return int(meshrt.get(big, timeout=30)[-1]), meshrt.get(small, timeout=30)

    def crashed(self, marker):
        try:
            meshrt.get(list(two_dying.remote(marker)), timeout=30)
        except WorkerCrashedError:
            return "crashed"


@pytest.mark.timeout(60)
def test_blocks_a_dead_attempt_wrote_for_an_actor_go_back(rt, tmp_path):
    owner = Owner.remote()
    baseline = used()
    assert meshrt.get(owner.retried.remote(str(tmp_path / "a")), timeout=60) == (1, 5)
    assert meshrt.get(owner.crashed.remote(str(tmp_path / "b")), timeout=60) == "crashed"
    assert wait_until(lambda: used() == baseline, timeout=10)


@pytest.mark.timeout(60)
def test_results_that_never_reach_their_owner_leave_no_block(rt, tmp_path):
    @meshrt.remote(num_returns=2, max_retries=0)
    def dies(marker):
        return np.full(8 * MiB, 1, dtype=np.uint8), DiesOnce(marker)

    @meshrt.remote(num_returns=2)
    def unpicklable():
        return np.full(8 * MiB, 1, dtype=np.uint8), Unpicklable()

    baseline = used()
    refs = dies.remote(str(tmp_path / "died"))
    with pytest.raises(WorkerCrashedError):
        meshrt.get(refs, timeout=30)
    refs = unpicklable.remote()
    with pytest.raises(TaskError, match="cannot be pickled"):
        meshrt.get(refs, timeout=30)
    del refs
    assert wait_until(lambda: used() == baseline, timeout=10)

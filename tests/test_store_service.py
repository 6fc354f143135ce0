"""Spilling does not stop the cluster: a worker's store request that must spill (or
read a spilled value back) runs off the controller's loop, and so does any that finds
the store busy; the loop goes on scheduling and answering meanwhile."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import meshrt
from meshrt._private import state
from meshrt.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .helpers import wait_until
from .test_multihost import TOKEN, AgentProcesses, stop_agent

MiB = 1 << 20


@pytest.fixture
def small_store():
    meshrt.init(num_cpus=2, object_store_memory=64 * MiB)
    yield state.core().controller
    meshrt.shutdown()


@meshrt.remote
def make(seed: int):
    return np.random.default_rng(seed).random(2 * MiB)  # 16 MiB


@meshrt.remote
def checksum(arr) -> float:
    return float(arr.sum())


@meshrt.remote
def small(x: int) -> int:
    return x + 1


def expected(seed: int) -> float:
    return float(np.random.default_rng(seed).random(2 * MiB).sum())


@pytest.mark.timeout(120)
def test_workers_values_spill_and_come_back_bit_exact(small_store):
    refs = [make.remote(i) for i in range(10)]  # 160 MiB made by workers, into a 64 MiB store
    meshrt.wait(refs, num_returns=len(refs), timeout=60)
    usage = small_store.store.usage()
    assert usage["spills"] >= 6 and usage["spilled_objects"] >= 6
    # read back by workers (their pins restore them) and by the driver
    sums = meshrt.get([checksum.remote(r) for r in refs], timeout=60)
    assert sums == [expected(i) for i in range(10)]
    assert float(meshrt.get(refs[0], timeout=60).sum()) == expected(0)
    assert small_store.store.usage()["restores"] >= 6


@pytest.mark.timeout(120)
def test_the_controller_answers_while_the_store_is_busy(small_store):
    service = small_store.store_service
    big = None
    with small_store.store.lock:  # (as a long spill holds it)
        big = make.remote(1)  # its result's allocation waits for the store, off the loop
        assert wait_until(lambda: service.busy, timeout=30)
        assert meshrt.get([small.remote(i) for i in range(4)], timeout=30) == [1, 2, 3, 4]
        assert meshrt.cluster_resources()["CPU"] == 2.0
        ready, _ = meshrt.wait([big], timeout=0)
        assert not ready
    assert float(meshrt.get(big, timeout=60).sum()) == expected(1)
    assert not service.busy and not service.queue


@pytest.mark.timeout(60)
def test_store_work_stays_in_order_when_one_piece_waits():
    """Unit: while another thread holds the store, work waits and is then done in the order it came."""
    import asyncio

    from meshrt.objstore.store import SharedStore
    from meshrt.objstore.store_service import StoreService

    async def scenario() -> list:
        store = SharedStore(4 * MiB)
        service = StoreService(store, asyncio.get_running_loop())
        done: list = []
        held = threading.Event()
        release = threading.Event()

        def hold():  # another thread holds the store (a long spill)
            with store.lock:
                held.set()
                release.wait(30)

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait(30)
        first = service.ask(7, "store_allocate", (1, MiB, 7))
        service.run(lambda: done.append("seal"))
        second = service.call(lambda: done.append("summary") or len(done))
        assert service.busy and not first.done() and done == []
        release.set()
        offset = await asyncio.wait_for(first, 30)
        position = await asyncio.wait_for(second, 30)
        holder.join(30)
        service.close()
        store.close()
        return [offset, done, position]

    offset, done, position = asyncio.run(scenario())
    assert isinstance(offset, int) and done == ["seal", "summary"] and position == 2


@pytest.fixture
def head_and_agent(monkeypatch):
    """A head with a 64 MiB store and one agent's host (its own store)."""
    monkeypatch.setenv("MESHRT_TOKEN", TOKEN)
    info = meshrt.init(address="127.0.0.1:0", num_cpus=1, object_store_memory=64 * MiB)
    agent = subprocess.Popen(
        [sys.executable, "-m", "meshrt", "agent", "--address", info["tcp_address"], "--num-cpus", "1",
         "--object-store-memory", str(64 * MiB)],
        env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    meshrt.hosts(min_hosts=1, timeout=60)
    spawned = AgentProcesses([agent])
    head = meshrt.get_runtime_context().get_node_id()
    other = next(n["NodeID"] for n in meshrt.nodes() if n["NodeID"] != head)
    yield state.core().controller, other, spawned.remember
    spawned.remember()
    meshrt.shutdown()
    stop_agent(agent)
    spawned.assert_gone()


@pytest.mark.timeout(120)
def test_values_from_another_host_make_room_in_a_full_store(head_and_agent):
    controller, other, remember = head_and_agent
    kept = [meshrt.put(np.random.default_rng(i).random(2 * MiB)) for i in range(3)]  # 48 MiB of the 64
    there = make.options(scheduling_strategy=NodeAffinitySchedulingStrategy(other, soft=False))
    refs = [there.remote(i) for i in (7, 8)]  # 32 MiB made on the agent's host, read here
    values = meshrt.get(refs, timeout=60)
    remember()
    assert [float(v.sum()) for v in values] == [expected(7), expected(8)]
    assert controller.store.usage()["spills"] >= 1
    assert [float(meshrt.get(r, timeout=60).sum()) for r in kept] == [expected(i) for i in range(3)]

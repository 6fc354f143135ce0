"""Resource-aware scheduling and cluster introspection.

* A custom ``db_connection`` resource caps how many tasks hit the database at
  once; a tracker actor records the peak concurrency.
* Fractional GPUs declared with ``ray.init(num_gpus=2)`` on a machine without
  GPUs: quarter-GPU inference tasks, whole-GPU trainer actors that get
  distinct device ids, and ``CUDA_VISIBLE_DEVICES`` set to match.
* An actor holding a license resource blocks tasks that need it until it is
  ``ray.kill``ed.
* Cluster introspection: ``is_initialized``, ``ignore_reinit_error``,
  ``nodes()``, ``cluster_resources()``, ``available_resources()``.
"""
import os
import threading

import pytest

import meshrt as ray

pytestmark = pytest.mark.timeout(120)


@ray.remote
class ConcurrencyTracker:
    def __init__(self):
        self.current = 0
        self.peak = 0
        self.lock = threading.Condition()

    def enter(self):
        with self.lock:
            self.current += 1
            self.peak = max(self.peak, self.current)
            self.lock.notify_all()

    def wait_for_company(self, n, timeout):
        """Until ``n`` queries have been inside at once (True), or ``timeout`` s."""
        with self.lock:
            return self.lock.wait_for(lambda: self.peak >= n, timeout)

    def exit(self):
        with self.lock:
            self.current -= 1

    def peak_seen(self):
        return self.peak


@ray.remote(resources={"db_connection": 1})
def run_query(tracker, query_id, company=2):
    ray.get(tracker.enter.remote())
    # Holding its connection, a query waits until two were inside at once: with two
    # connections that always happens, and a third would raise the peak above 2.
    assert ray.get(tracker.wait_for_company.remote(company, 60))
    ray.get(tracker.exit.remote())
    return f"rows for q{query_id}"


def test_custom_resource_limits_concurrency():
    ray.init(num_cpus=4, resources={"db_connection": 2})
    assert ray.cluster_resources()["db_connection"] == 2
    tracker = ConcurrencyTracker.options(max_concurrency=8).remote()
    results = ray.get([run_query.remote(tracker, i) for i in range(8)])
    assert results == [f"rows for q{i}" for i in range(8)]
    assert ray.get(tracker.peak_seen.remote()) == 2

    # .options() can ask for more of the custom resource per call.
    exclusive = run_query.options(resources={"db_connection": 2}).remote(tracker, 99, 1)
    assert ray.get(exclusive) == "rows for q99"


@ray.remote(num_gpus=0.25)
def embed(batch):
    return {"gpus": ray.get_gpu_ids(), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "n": len(batch)}


@ray.remote(num_gpus=1)
class Trainer:
    def __init__(self, rank):
        self.rank = rank

    def device(self):
        return self.rank, ray.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES")


@ray.remote
def cpu_only():
    return ray.get_gpu_ids()


def test_fractional_and_whole_gpus():
    ray.init(num_cpus=4, num_gpus=2)
    assert ray.cluster_resources()["GPU"] == 2
    assert ray.get_gpu_ids() == []  # the driver holds no GPU

    outs = ray.get([embed.remote(list(range(i))) for i in range(8)])
    assert [o["n"] for o in outs] == list(range(8))
    for o in outs:
        assert len(o["gpus"]) == 1
        assert o["gpus"][0] in (0, 1)
        assert o["cuda"] == str(o["gpus"][0])

    trainers = [Trainer.remote(rank) for rank in range(2)]
    devices = ray.get([t.device.remote() for t in trainers])
    ids = [gpus[0] for _, gpus, _ in devices]
    assert sorted(ids) == [0, 1]  # each trainer owns a different GPU
    for _rank, gpus, cuda in devices:
        assert len(gpus) == 1 and cuda == str(gpus[0])

    assert ray.get(cpu_only.remote()) == []
    for t in trainers:
        ray.kill(t)
    both = ray.get(embed.options(num_gpus=2).remote([1]))
    assert sorted(both["gpus"]) == [0, 1]
    assert sorted(both["cuda"].split(",")) == ["0", "1"]


@ray.remote(resources={"license": 1})
class LicensedSolver:
    def solve(self, x):
        return x ** 2


@ray.remote(resources={"license": 1})
def batch_solve(xs):
    return [x ** 2 for x in xs]


def test_actor_holds_resource_until_killed():
    ray.init(num_cpus=2, resources={"license": 1})
    solver = LicensedSolver.remote()
    assert ray.get(solver.solve.remote(9)) == 81

    batch = batch_solve.remote([1, 2, 3])
    ready, not_ready = ray.wait([batch], timeout=0.5)
    assert ready == [] and not_ready == [batch]  # the only license is taken

    ray.kill(solver)
    assert ray.get(batch, timeout=60) == [1, 4, 9]


def test_cluster_introspection():
    assert not ray.is_initialized()
    ray.init(num_cpus=4, resources={"ssd": 3})
    assert ray.is_initialized()
    ray.init(ignore_reinit_error=True)  # no error, still the same cluster
    assert ray.is_initialized()

    total = ray.cluster_resources()
    assert total["CPU"] == 4
    assert total["ssd"] == 3
    available = ray.available_resources()
    assert available["CPU"] <= total["CPU"]
    assert available["ssd"] == 3

    nodes = ray.nodes()
    assert len(nodes) == 1
    node = nodes[0]
    assert node["Alive"] is True
    assert node["Resources"]["CPU"] == 4
    assert node["Resources"]["ssd"] == 3
    assert node["NodeID"] == ray.get_runtime_context().get_node_id()

    ray.shutdown()
    assert not ray.is_initialized()

"""Resources end to end: GPUs through CUDA_VISIBLE_DEVICES, custom resources, waiting."""

from __future__ import annotations

import os
import sys

import pytest

import meshrt
from tests.helpers import gate, run_python


def test_gpu_tasks_see_their_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")  # (the devices this program may use)
    meshrt.init(num_cpus=2, num_gpus=2)

    @meshrt.remote(num_gpus=1)
    def visible():
        return os.environ["CUDA_VISIBLE_DEVICES"], meshrt.get_gpu_ids()

    env, ids = meshrt.get(visible.remote())
    assert env in ("4", "5") and ids == [int(env)]

    @meshrt.remote
    def cpu_only():
        return os.environ.get("CUDA_VISIBLE_DEVICES"), meshrt.get_gpu_ids()

    # As in Ray 2.x: a task given no GPU keeps the devices it inherits, and holds none.
    assert meshrt.get(cpu_only.remote()) == ("4,5", [])
    assert meshrt.get_gpu_ids() == []  # the driver holds none


def test_a_task_given_no_gpu_sees_none_with_rays_override_on_zero(monkeypatch):
    monkeypatch.setenv("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "1")  # (Ray's switch back to hiding them)
    meshrt.init(num_cpus=1, num_gpus=1)

    @meshrt.remote
    def cpu_only():
        return os.environ.get("CUDA_VISIBLE_DEVICES"), meshrt.get_gpu_ids()

    assert meshrt.get(cpu_only.remote()) == ("", [])


def test_fractional_gpu_actors_share_a_card():
    meshrt.init(num_cpus=2, num_gpus=2)

    @meshrt.remote(num_gpus=0.5)
    class Half:
        def ids(self):
            return meshrt.get_gpu_ids()

    a, b = Half.remote(), Half.remote()
    assert meshrt.get(a.ids.remote()) == meshrt.get(b.ids.remote())
    assert meshrt.available_resources()["GPU"] == 1

    @meshrt.remote(num_gpus=2)
    class Both:
        def ids(self):
            return sorted(meshrt.get_gpu_ids())

    waiting = Both.remote()
    ready, _ = meshrt.wait([waiting.ids.remote()], timeout=0.3)
    assert not ready  # a half-used card cannot be handed out whole
    meshrt.kill(a)
    meshrt.kill(b)
    assert meshrt.get(waiting.ids.remote(), timeout=30) == [0, 1]


def test_custom_resources_limit_concurrency():
    meshrt.init(num_cpus=2, resources={"licence": 1})
    g = gate()

    @meshrt.remote(resources={"licence": 1})
    def licensed(g):
        return meshrt.get(g.wait.remote())

    first = licensed.remote(g)
    second = licensed.remote(g)
    # Only one licence: the second waits even though a CPU is free.
    ready, _ = meshrt.wait([first, second], num_returns=1, timeout=0.3)
    assert not ready
    meshrt.get(g.open.remote())
    assert meshrt.get([first, second], timeout=30) == [True, True]
    assert meshrt.cluster_resources()["licence"] == 1


def test_options_can_ask_for_cpus():
    meshrt.init(num_cpus=2)
    g = gate()

    @meshrt.remote
    def hold(g):
        return meshrt.get(g.wait.remote())

    @meshrt.remote
    def quick():
        return "ran"

    big = hold.options(num_cpus=2).remote(g)
    small = quick.remote()
    ready, _ = meshrt.wait([small], timeout=0.3)
    # while `big` blocks in get it lends its CPUs back, so `small` can run
    assert meshrt.get(small, timeout=30) == "ran"
    meshrt.get(g.open.remote())
    assert meshrt.get(big, timeout=30) is True


def test_workers_import_only_what_payloads_need(monkeypatch):
    # A zygote forked from this driver would carry the test run's imports (torch
    # included): check the fresh interpreter a worker gets otherwise.
    monkeypatch.setenv("MESHRT_FORK_ZYGOTE", "0")
    meshrt.init(num_cpus=2)

    @meshrt.remote
    def modules():
        return "torch" in sys.modules, "numpy" in sys.modules

    assert meshrt.get(modules.remote()) == (False, False)

    @meshrt.remote
    def uses_torch(t):
        return float(t.sum()), "torch" in sys.modules

    torch = pytest.importorskip("torch")
    assert meshrt.get(uses_torch.remote(torch.ones(4))) == (4.0, True)


_PARALLEL_AFTER_DRIVER = """
import torch, meshrt
torch.set_num_threads(2)
float(torch.ones(1 << 22).sum())  # starts this driver's OpenMP pool
meshrt.init(num_cpus=2)

@meshrt.remote
def parallel_sum(n):
    return float(torch.ones(n).sum())

print(meshrt.get(parallel_sum.remote(1 << 22), timeout=60))
"""


def test_workers_run_torch_in_parallel_after_the_driver_did():
    """A driver that ran a parallel torch op before init holds an OpenMP thread pool a
    forked child cannot use: its workers must still run parallel ops (no hang). In a
    driver of its own, so this test process keeps no pool (see conftest)."""
    pytest.importorskip("torch")
    done = run_python(_PARALLEL_AFTER_DRIVER, 90)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(float(1 << 22))


_POOL_SEEN = """
import sys, torch
from meshrt._private import spawn
torch.set_num_threads(2)
# (a thread caught running counts as maybe; on a loaded machine one may be, for a moment)
print(all(spawn._gnu_openmp_threads_may_run() for _ in range(20)))
if sys.argv[-1] == "run":
    float(torch.ones(1 << 22).sum())  # starts this process's OpenMP pool
    print(spawn._gnu_openmp_threads_may_run())
"""


def test_an_openmp_pool_is_seen_before_forking_the_zygote():
    """The zygote's (slow) OpenMP probe is skipped only when no pool can exist: a process
    that never ran a parallel op has none, one that did is seen to have one."""
    pytest.importorskip("torch")
    done = run_python(_POOL_SEEN.replace("sys.argv[-1]", "'run'"), 60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


def test_the_zygote_forks_actor_processes_before_a_pool_prestart():
    import pickle
    import socket

    from meshrt._private import zygote

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        for worker_id, kind in ((1, "task"), (2, "actor"), (3, "task"), (4, "actor")):
            ours.send(pickle.dumps(("spawn", worker_id, {}, kind)))
        requests = zygote._waiting_requests(theirs)
        assert [r[0][1] for r in requests] == [2, 4, 1, 3]
        ours.close()
        assert zygote._waiting_requests(theirs) is None  # the driver is gone
    finally:
        ours.close()
        theirs.close()


def test_the_task_pool_starts_after_init_and_counts_processes_tasks_started_meanwhile():
    """Forked at init, the pool held up a mesh asked for at once: it starts a moment
    later (pool_upkeep.py), topping up what tasks submitted meanwhile started."""
    from meshrt._private import state

    from .helpers import wait_until

    meshrt.init(num_cpus=2)
    try:
        controller = state.core().controller
        first = meshrt.remote(lambda: os.getpid()).remote()  # (before the pool: starts a process of its own)
        assert isinstance(meshrt.get(first, timeout=60), int)
        assert wait_until(lambda: controller._prestart_timer is None, 30)
        assert wait_until(lambda: controller.default_pool_size() == 2, 30)
        pids = set(meshrt.get([meshrt.remote(lambda: os.getpid()).remote() for _ in range(8)], timeout=60))
        assert len(pids) <= 2 and controller.default_pool_size() == 2
    finally:
        meshrt.shutdown()


def test_accelerator_type_names_a_gpu_model():
    from meshrt._private.gpus import accelerator_type_of

    names = {
        "NVIDIA H100 80GB HBM3": "H100", "NVIDIA A100-SXM4-40GB": "A100", "Tesla V100-SXM2-16GB": "V100",
        "Tesla T4": "T4", "NVIDIA A10G": "A10G", "NVIDIA L40S": "L40S", "NVIDIA H100 PCIe": "H100",
        "NVIDIA RTX PRO 6000 Blackwell Server Edition": "RTX-PRO-6000", "NVIDIA GeForce RTX 4090": "GeForce-RTX-4090",
    }
    assert {name: accelerator_type_of(name) for name in names} == names


def test_accelerator_type_without_such_a_node_fails_at_the_call(rt):
    from meshrt.util.accelerators import NVIDIA_H100

    @meshrt.remote
    def f():
        return 1

    with pytest.raises(meshrt.exceptions.TaskUnschedulableError, match=r"accelerator_type='H100', but no node has H100"):
        f.options(accelerator_type=NVIDIA_H100).remote()
    with pytest.raises(ValueError, match=r"accelerator_type=3: give a GPU model"):
        f.options(accelerator_type=3).remote()
    assert not any(name.startswith("accelerator_type:") for name in meshrt.cluster_resources())  # (no GPU here)

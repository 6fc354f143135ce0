"""OMP_NUM_THREADS in workers, as Ray sets it: a task or actor gets the CPUs it asked
for (at least 1), so N workers importing numpy or torch do not start N x cores
threads; a value the user set wins, and mesh processes keep the default."""

from __future__ import annotations

import asyncio
import os

import pytest

import meshrt
from meshrt import Actor, endpoint, this_host

from .helpers import run_python


@pytest.fixture
def unset_rt(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # (before init: workers inherit the driver's)
    meshrt.init(num_cpus=4)
    yield
    meshrt.shutdown()


@meshrt.remote
def threads():
    return os.environ.get("OMP_NUM_THREADS")


@meshrt.remote
def torch_threads():
    import torch

    return torch.get_num_threads()


@meshrt.remote
class Threads:
    def get(self):
        return os.environ.get("OMP_NUM_THREADS")


class MeshThreads(Actor):
    @endpoint
    def get(self):
        return os.environ.get("OMP_NUM_THREADS")


@pytest.mark.timeout(120)
def test_tasks_and_actors_get_the_cpus_they_asked_for_and_meshes_the_default(unset_rt):
    assert meshrt.get(threads.remote(), timeout=30) == "1"
    assert meshrt.get(threads.options(num_cpus=2.5).remote(), timeout=30) == "2"
    assert meshrt.get(threads.options(num_cpus=0.5).remote(), timeout=30) == "1"
    assert meshrt.get(threads.options(runtime_env={"env_vars": {"OMP_NUM_THREADS": "7"}}).remote(), timeout=30) == "7"
    assert meshrt.get(Threads.remote().get.remote(), timeout=30) == "1"  # (Ray's default actor: 0 CPUs -> 1)
    assert meshrt.get(Threads.options(num_cpus=3).remote().get.remote(), timeout=30) == "3"
    assert os.environ.get("OMP_NUM_THREADS") is None  # (the driver's own is left alone)
    # torch too, imported before or in the task (a worker forked after the driver imported it:
    # its OpenMP read the environment then)
    assert meshrt.get(torch_threads.remote(), timeout=60) == 1
    assert meshrt.get(torch_threads.options(num_cpus=2).remote(), timeout=60) == 2

    async def on_a_mesh():
        procs = this_host().spawn_procs(per_host={"gpus": 1})
        try:
            return await procs.spawn("threads", MeshThreads).get.call_one()
        finally:
            await procs.stop()

    assert asyncio.run(on_a_mesh()) is None


@pytest.mark.timeout(120)
def test_a_value_the_user_set_wins():
    code = (
        "import os, meshrt\n"
        "meshrt.init(num_cpus=2)\n"
        "@meshrt.remote\n"
        "def threads():\n"
        "    return os.environ.get('OMP_NUM_THREADS')\n"
        "print('threads', meshrt.get(threads.options(num_cpus=2).remote(), timeout=60))\n"
        "meshrt.shutdown()\n"
    )
    out = run_python(code, timeout=90, env=dict(os.environ, OMP_NUM_THREADS="5"))
    assert "threads 5" in out.stdout, out.stderr

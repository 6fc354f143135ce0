"""Ray names that ordinary Ray programs use, as they behave in Ray (this file runs
against both: tests/compat/run_against_ray.sh).

* Keeping work on a node with the ``node:<ip>`` resource (and the head's
  ``node:__internal_head__``); ``NodeManagerAddress`` and ``get_node_ip_address()``.
* Id classes: ``JobID.from_hex(ctx.get_job_id())``, the runtime context's id
  properties, ``ActorID``, nil ids, ``ObjectID`` as ``ObjectRef``.
* ``ActorUnavailableError`` for the call lost while an actor restarts.
* A cancelled actor method that runs on is reported cancelled.
* ``OMP_NUM_THREADS`` in tasks and actors, the CPUs they asked for.
* A class without a constructor refuses arguments at ``.remote()``; ``log_once``.
"""
import os
import time

import pytest

import meshrt as ray
from meshrt.exceptions import ActorUnavailableError, RayActorError, TaskCancelledError

pytestmark = pytest.mark.timeout(120)


@ray.remote
def where():
    return ray.util.get_node_ip_address(), ray.get_runtime_context().get_node_id()


def test_node_ip_resources_keep_work_on_a_node():
    ray.init(num_cpus=2)
    ip = ray.nodes()[0]["NodeManagerAddress"]
    assert ray.util.get_node_ip_address() == ip
    assert ray.cluster_resources()[f"node:{ip}"] == 1.0
    assert ray.cluster_resources()["node:__internal_head__"] == 1.0
    node = ray.get_runtime_context().get_node_id()
    assert ray.get(where.options(resources={f"node:{ip}": 0.01}).remote()) == (ip, node)
    assert ray.get(where.options(resources={"node:__internal_head__": 0.01}).remote()) == (ip, node)


@ray.remote
class Ids:
    def ids(self):
        ctx = ray.get_runtime_context()
        return ctx.get_actor_id(), ctx.actor_id.hex(), ctx.get_task_id(), ctx.task_id.hex()


def test_id_classes():
    ray.init(num_cpus=2)
    ctx = ray.get_runtime_context()
    assert ray.JobID.from_hex(ctx.get_job_id()) == ctx.job_id and ctx.job_id.hex() == ctx.get_job_id()
    assert ray.NodeID.from_hex(ctx.get_node_id()) == ctx.node_id
    actor = Ids.remote()
    actor_hex, actor_hex_again, task_hex, task_hex_again = ray.get(actor.ids.remote())
    assert actor_hex == actor_hex_again and task_hex == task_hex_again
    assert ray.ActorID.from_hex(actor_hex).hex() == actor_hex
    assert ray.JobID.nil().is_nil() and not ctx.job_id.is_nil()
    assert ray.JobID.from_int(1).hex() == "01000000"
    assert ray.ObjectID is ray.ObjectRef and ray.ObjectRef.nil().is_nil()


@ray.remote(max_restarts=1)
class Fragile:
    def __init__(self):
        self.calls = 0

    def crash(self):
        os._exit(1)

    def count(self):
        self.calls += 1
        return self.calls


def test_the_call_lost_while_an_actor_restarts_is_actor_unavailable():
    ray.init(num_cpus=2)
    actor = Fragile.remote()
    assert ray.get(actor.count.remote()) == 1
    with pytest.raises(ActorUnavailableError) as lost:
        ray.get(actor.crash.remote(), timeout=60)
    assert isinstance(lost.value, RayActorError)
    for _ in range(600):  # (until the restarted actor answers: calls meanwhile may fail too)
        try:
            assert ray.get(actor.count.remote(), timeout=60) == 1  # (fresh state)
            break
        except ActorUnavailableError:
            continue


@ray.remote
class AsyncWithSync:
    """An async actor (one async method): its plain method is not interrupted by a cancel."""

    async def ping(self):
        return "pong"

    def works(self, marker):
        open(marker, "w").close()
        time.sleep(2)  # (simulated work, which the cancel below does not interrupt)
        return "ran to its end"


def test_a_cancelled_actor_method_that_runs_on_is_reported_cancelled(tmp_path):
    ray.init(num_cpus=2)
    actor = AsyncWithSync.remote()
    assert ray.get(actor.ping.remote()) == "pong"
    marker = str(tmp_path / "started")
    ref = actor.works.remote(marker)
    deadline = time.monotonic() + 60
    while not os.path.exists(marker) and time.monotonic() < deadline:  # (until it runs)
        time.sleep(0.01)
    ray.cancel(ref)
    with pytest.raises(TaskCancelledError):
        ray.get(ref, timeout=30)
    assert ray.get(actor.ping.remote()) == "pong"


@ray.remote
def omp():
    return os.environ.get("OMP_NUM_THREADS")


@ray.remote
class OmpActor:
    def omp(self):
        return os.environ.get("OMP_NUM_THREADS")


def test_omp_num_threads_is_the_cpus_asked_for(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    ray.init(num_cpus=4)
    assert ray.get(omp.remote()) == "1"
    assert ray.get(omp.options(num_cpus=2).remote()) == "2"
    assert ray.get(OmpActor.options(num_cpus=3).remote().omp.remote()) == "3"


@ray.remote
class NoConstructor:
    def ok(self):
        return "ok"


def test_a_class_without_a_constructor_refuses_arguments_and_log_once():
    ray.init(num_cpus=1)
    with pytest.raises(TypeError):
        NoConstructor.remote(1)
    handle = NoConstructor.remote()
    assert ray.get(handle.ok.remote()) == "ok" and "ok" in dir(handle)
    key = f"compat-test-{os.getpid()}"
    assert ray.util.log_once(key) and not ray.util.log_once(key)

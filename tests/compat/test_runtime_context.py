"""What a task or actor method learns about itself from ``get_runtime_context()``:
its task name (the options' name, else the function's), its function's full name,
ids that match the refs the caller holds, and whether it was cancelled."""
import pytest

import meshrt as ray

pytestmark = pytest.mark.timeout(120)


@ray.remote
def who_am_i():
    ctx = ray.get_runtime_context()
    return ctx.get_task_name(), ctx.get_task_function_name(), ctx.get_task_id(), ctx.get_job_id()


@ray.remote
class Worker:
    def who(self):
        ctx = ray.get_runtime_context()
        return ctx.get_task_name(), ctx.get_task_function_name(), ctx.get_actor_id(), ctx.is_canceled()


def test_a_task_knows_its_name_function_and_ids():
    ray.init(num_cpus=2)
    try:
        ref = who_am_i.remote()
        name, function, task_id, job_id = ray.get(ref)
        assert name == "who_am_i" and function == f"{__name__}.who_am_i"
        assert task_id == ref.task_id().hex() and job_id == ray.get_runtime_context().get_job_id()
        renamed = ray.get(who_am_i.options(name="renamed").remote())
        assert renamed[0] == "renamed" and renamed[1] == f"{__name__}.who_am_i"
    finally:
        ray.shutdown()


def test_an_actor_method_knows_its_name_and_actor():
    ray.init(num_cpus=2)
    try:
        worker = Worker.remote()
        name, function, actor_id, cancelled = ray.get(worker.who.remote())
        assert name == "Worker.who" and function == f"{__name__}.Worker.who"
        assert isinstance(actor_id, str) and actor_id and cancelled is False
        assert ray.get(worker.who.remote())[2] == actor_id
        assert worker._actor_id.hex() == actor_id  # (Ray's private handle attribute, used by many programs)
        assert {worker._actor_id.hex(): 1}[ray.get(worker.who.remote())[2]] == 1
    finally:
        ray.shutdown()

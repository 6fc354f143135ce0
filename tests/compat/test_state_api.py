"""Ray's state API over a small program (this file runs against both:
tests/compat/run_against_ray.sh): a task's and an actor call's rows from ``get_task``,
the constructor's row, and ``summarize_tasks`` counting the calls. Ray records task
events asynchronously, so each check waits until the row is there (and serves the
state API from its dashboard: against Ray this needs ``pip install "ray[default]"``)."""
import asyncio
import time

import pytest

import meshrt as ray
from meshrt.util.state import get_task, list_tasks, summarize_tasks

pytestmark = pytest.mark.timeout(120)


@ray.remote
def square(x):
    return x * x


@ray.remote
class Tally:
    def __init__(self):
        self.total = 0

    def add(self, k):
        if k < 0:
            raise ValueError("no negative steps")
        self.total += k
        return self.total


def _listed(probe, timeout=60.0):
    """Poll the state API until ``probe()`` is truthy (Ray's task events arrive a
    second or so after the task ends: there is no event to wait on)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError("not listed in time")


def _ended(ref):
    row = get_task(ref.task_id().hex())
    row = row[-1] if isinstance(row, list) else row
    return row if row is not None and row.state in ("FINISHED", "FAILED") else None


def test_tasks_and_actor_calls_in_the_state_api():
    ray.init(num_cpus=2)
    ref = square.remote(3)
    assert ray.get(ref) == 9
    task = _listed(lambda: _ended(ref))
    assert (task.type, task.state, task.name) == ("NORMAL_TASK", "FINISHED", "square")
    assert task.start_time_ms <= task.end_time_ms

    tally = Tally.remote()
    ok = tally.add.remote(2)
    bad = tally.add.remote(-1)
    assert ray.get(ok) == 2
    with pytest.raises(ValueError):
        ray.get(bad)
    call = _listed(lambda: _ended(ok))
    assert (call.type, call.state, call.name, call.func_or_class_name) == (
        "ACTOR_TASK", "FINISHED", "Tally.add", "Tally.add")
    assert call.actor_id == tally._actor_id.hex() and call.start_time_ms <= call.end_time_ms
    failed = _listed(lambda: _ended(bad))
    assert (failed.state, failed.error_type) == ("FAILED", "TASK_EXECUTION_EXCEPTION")
    assert "no negative steps" in failed.error_message
    made = _listed(lambda: [t for t in list_tasks(filters=[("type", "=", "ACTOR_CREATION_TASK")])
                            if t.actor_id == tally._actor_id.hex()])
    assert made[0].name == "Tally.__init__"
    summary = summarize_tasks()["cluster"]["summary"]
    assert summary["Tally.add"]["state_counts"] == {"FINISHED": 1, "FAILED": 1}
    assert summary["square"]["state_counts"] == {"FINISHED": 1}


@ray.remote
def outer():
    return ray.get(square.remote(4)), ray.get_runtime_context().get_task_id()


def test_a_nested_task_names_its_parent_and_its_events():
    ray.init(num_cpus=2)
    ref = outer.remote()
    value, outer_id = ray.get(ref)
    assert value == 16 and outer_id == ref.task_id().hex()

    def inner_ended():
        rows = list_tasks(filters=[("parent_task_id", "=", outer_id)], detail=True)
        done = rows and rows[0].state == "FINISHED" and None not in (rows[0].start_time_ms, rows[0].end_time_ms)
        return rows if done else None

    (inner,) = _listed(inner_ended)
    assert (inner.name, inner.language) == ("square", "PYTHON")
    assert inner.creation_time_ms <= inner.start_time_ms <= inner.end_time_ms
    assert [e["state"] for e in inner.events] == ["PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT",
                                                  "SUBMITTED_TO_WORKER", "RUNNING", "FINISHED"]


def test_a_name_given_with_options_names_the_row_and_its_function_stays():
    ray.init(num_cpus=2)
    ref = square.options(name="squared_once").remote(5)
    tally = Tally.remote()
    call = tally.add.options(name="first_step").remote(1)
    assert ray.get([ref, call]) == [25, 1]
    task = _listed(lambda: _ended(ref))
    assert (task.name, task.func_or_class_name) == ("squared_once", "square")
    named = _listed(lambda: _ended(call))
    assert (named.name, named.func_or_class_name, named.type) == ("first_step", "Tally.add", "ACTOR_TASK")
    assert summarize_tasks()["cluster"]["summary"]["first_step"]["state_counts"] == {"FINISHED": 1}
    with pytest.raises(TypeError):
        tally.add.options(name=3).remote(1)


@ray.remote
class Gate:
    """An async actor: ``wait_open`` waits until ``open`` is called (no polling)."""

    def __init__(self):
        self.opened = asyncio.Event()

    async def open(self):
        self.opened.set()

    async def wait_open(self):
        await self.opened.wait()


@ray.remote
class Blocked:
    def hold(self, gate):
        ray.get(gate.wait_open.remote(), timeout=60)  # (a plain actor: the calls behind wait)
        return "held"

    def after(self, i):
        return i


def test_actor_calls_waiting_behind_a_running_one_are_listed_as_submitted():
    ray.init(num_cpus=2)
    gate, blocked = Gate.remote(), Blocked.remote()
    assert ray.get(blocked.after.remote(-1)) == -1  # (up: Ray lists calls sent before as waiting for ordering)
    held = blocked.hold.remote(gate)
    waiting = [blocked.after.remote(i) for i in range(2)]

    def listed():
        rows = list_tasks(filters=[("actor_id", "=", blocked._actor_id.hex()), ("type", "=", "ACTOR_TASK")])
        states = sorted((row.name, row.state) for row in rows)
        return states if states == [("Blocked.after", "FINISHED")] + [("Blocked.after", "SUBMITTED_TO_WORKER")] * 2 + [
            ("Blocked.hold", "RUNNING")] else None

    _listed(listed)
    ray.get(gate.open.remote())
    assert ray.get(held) == "held" and ray.get(waiting) == [0, 1]
    assert all(_listed(lambda ref=ref: _ended(ref)).state == "FINISHED" for ref in waiting)

"""The placement policy as a pure function: no sockets, no processes."""

from __future__ import annotations

import pytest

from meshrt.scheduler.policy import (
    Dispatch,
    PlaceActor,
    Scheduler,
    StartWorkers,
    env_units,
    split_pool_key,
)
from meshrt.scheduler.resources import NodeResources, normalize, validate_request


def node(**amounts):
    return NodeResources.create(amounts)


def test_dispatches_to_idle_workers_then_asks_for_more():
    s = Scheduler(node(CPU=2))
    s.worker_idle(1, ())
    for t in range(3):
        s.submit_task(t, normalize({"CPU": 1}))
    actions = s.schedule()
    assert actions == [Dispatch(0, 1, actions[0].alloc), StartWorkers((), 1)]
    s.worker_starting((), 1)
    assert s.schedule() == []  # one is on its way already


def test_a_task_in_a_package_environment_waits_for_a_worker_of_that_environment():
    n = node(CPU=2)
    s = Scheduler(n)
    s.worker_idle(1, ())
    in_env = normalize({"CPU": 1}) + env_units("abc")
    s.submit_task(10, in_env)
    s.submit_task(11, normalize({"CPU": 1}))
    actions = s.schedule()
    # (the plain task takes the idle worker; the other asks for a worker of its environment)
    assert [a for a in actions if isinstance(a, Dispatch)] == [Dispatch(11, 1, actions[0].alloc)]
    (start,) = [a for a in actions if isinstance(a, StartWorkers)]
    assert split_pool_key(start.pool_key) == ((), "abc")
    s.worker_idle(2, start.pool_key)
    (dispatch,) = s.schedule()
    assert (dispatch.task_id, dispatch.worker_id) == (10, 2)
    assert n.available["CPU"] == 0 and not any(k.startswith("runtime_env:") for k in n.available)
    n.release(dispatch.alloc)
    assert n.available["CPU"] == 10_000


def test_work_waits_until_resources_free_up():
    n = node(CPU=1)
    s = Scheduler(n)
    s.worker_idle(1, ())
    s.worker_idle(2, ())
    s.submit_task(10, normalize({"CPU": 1}))
    s.submit_task(11, normalize({"CPU": 1}))
    first = s.schedule()
    assert [type(a) for a in first] == [Dispatch]
    n.release(first[0].alloc)
    assert [a.task_id for a in s.schedule()] == [11]


def test_fractional_gpus_share_one_card_best_fit():
    n = node(CPU=8, GPU=2)
    a = n.try_acquire(normalize({"GPU": 0.5}))
    b = n.try_acquire(normalize({"GPU": 0.5}))
    c = n.try_acquire(normalize({"GPU": 0.25}))
    assert a.gpu_ids == b.gpu_ids  # packed onto the same card
    assert c.gpu_ids != a.gpu_ids
    whole = n.try_acquire(normalize({"GPU": 1}))
    assert whole is None  # card 0 full, card 1 partly used
    n.release(c)
    assert n.try_acquire(normalize({"GPU": 1})).gpu_ids == (1,)


def test_ten_tenths_make_one_gpu_exactly():
    n = node(GPU=1)
    allocs = [n.try_acquire(normalize({"GPU": 0.1})) for _ in range(10)]
    assert all(allocs) and n.try_acquire(normalize({"GPU": 0.1})) is None


def test_gpu_tasks_only_use_workers_started_with_their_devices():
    s = Scheduler(node(CPU=4, GPU=2))
    s.worker_idle(1, ())  # a CPU-only pool worker
    s.submit_task(5, normalize({"CPU": 1, "GPU": 1}))
    actions = s.schedule()
    assert actions == [StartWorkers((0,), 1)]


def test_actors_placed_before_tasks_and_blocked_cpu_lending():
    n = node(CPU=1)
    s = Scheduler(n)
    s.submit_actor(99, normalize({"CPU": 1}))
    s.submit_task(1, normalize({"CPU": 1}))
    s.worker_idle(7, ())
    actions = s.schedule()
    assert isinstance(actions[0], PlaceActor) and len(actions) == 1
    n.lend_cpu(actions[0].alloc)  # e.g. blocked in get
    assert isinstance(s.schedule()[0], Dispatch)


def test_infeasible_and_validation():
    n = node(CPU=2)
    assert n.infeasible(normalize({"CPU": 3})) == ("CPU", 30000, 20000)
    assert n.infeasible(normalize({"TPU": 1}))[0] == "TPU"
    with pytest.raises(ValueError, match="whole number"):
        validate_request({"GPU": 1.5}, "task f")
    with pytest.raises(TypeError, match="number"):
        validate_request({"CPU": "2"}, "task f")


def test_cancel_removes_queued_task():
    s = Scheduler(node(CPU=1))
    s.submit_task(1, normalize({"CPU": 1}))
    assert s.remove_task(1) and not s.remove_task(1)
    assert s.queued_tasks() == 0


def test_pipeline_share_only_for_long_queues():
    s = Scheduler(node(CPU=2))
    units = normalize({"CPU": 1})
    for t in range(3):
        s.submit_task(t, units)
    assert s.pipeline_share(units, depth=8, busy_slots=1, workers=2) == 1
    assert s.pipeline_share(units, depth=8, busy_slots=1, workers=4) == 0  # short queue
    for t in range(3, 100):
        s.submit_task(t, units)
    assert s.pipeline_share(units, depth=8, busy_slots=1, workers=2) == 7
    taken = s.take(units, 3)
    assert taken == [0, 1, 2]
    s.requeue_front(taken[1:], units)
    assert s.take(units, 2) == [1, 2]


def test_zero_cpu_tasks_start_workers_a_few_at_a_time():
    s = Scheduler(node(CPU=2))
    for t in range(1000):
        s.submit_task(t, normalize({"CPU": 0}))
    (start,) = s.schedule()
    assert start == StartWorkers((), 2)
    s.worker_starting((), 2)
    assert s.schedule() == []


def test_nested_tasks_go_before_queued_top_level_ones():
    # A task blocked in get() lends its CPU: its subtask (depth 1) must take it, not the
    # next of the driver's many tasks (depth 0), or every top-level task would start and
    # block first, each holding a process.
    s = Scheduler(node(CPU=1))
    one = normalize({"CPU": 1})
    for t in range(3):
        s.submit_task(t, one)  # from the driver
    s.submit_task(10, one, depth=1)  # from task 0
    s.submit_task(20, one, depth=2)  # from task 10
    s.submit_task(11, one, depth=1)
    order = []
    for worker in range(6):
        s.worker_idle(worker, ())
        dispatched = [a for a in s.schedule() if type(a) is Dispatch]
        assert len(dispatched) == 1
        order.append(dispatched[0].task_id)
        s.node.release(dispatched[0].alloc)
    assert order == [20, 10, 11, 0, 1, 2]
    assert s.remove_task(0) is False and s.queued_tasks() == 0
    s.requeue_front([10, 11], one, [1, 1])
    s.submit_task(5, one)
    assert s.remove_task(11) and [s.take(one, 5)] == [[10, 5]]


def test_a_placement_group_bundle_limits_its_tasks_and_gives_them_its_own_gpus():
    from meshrt.scheduler import bundles

    n = node(CPU=4, GPU=2)
    reserved = n.try_acquire(normalize({"CPU": 1, "GPU": 1}))  # (as the controller reserves bundle 0)
    n.add_group(bundles.bundle_resources(reserved.units, "pg", 0), bundles.gpu_pool("pg", 0), reserved.gpus)
    s = Scheduler(n)
    in_bundle = bundles.request_in_bundle(normalize({"CPU": 1, "GPU": 0.5}), "pg", 0)
    for key in [(), reserved.gpu_ids]:
        s.worker_idle(1 if key else 2, key)
    s.submit_task(10, in_bundle)
    s.submit_task(11, in_bundle)
    first = s.schedule()
    assert [(type(a), a.task_id) for a in first] == [(Dispatch, 10)]  # (one CPU in the bundle)
    assert first[0].alloc.gpu_ids == reserved.gpu_ids  # (the bundle's GPU, not the node's other one)
    assert n.available["CPU"] == 3 * 10_000  # (the node outside the bundle is untouched)
    n.lend_cpu(first[0].alloc)  # (blocked in get: its bundle CPU is lent, as a node CPU would be)
    assert n.available[in_bundle[0][0]] == 10_000
    n.reclaim_cpu(first[0].alloc)
    n.release(first[0].alloc)
    s.worker_idle(1, reserved.gpu_ids)
    assert [a.task_id for a in s.schedule()] == [11]
    assert bundles.base_request(in_bundle) == normalize({"CPU": 1, "GPU": 0.5})
    assert bundles.bundle_of(bundles.request_in_bundle((), "pg", -1)) == ("pg", -1)
    n.remove_group(list(bundles.bundle_resources(reserved.units, "pg", 0)) + [bundles.gpu_pool("pg", 0)])
    n.release(reserved)
    assert n.available == n.total and n.gpu_free == [10_000, 10_000]

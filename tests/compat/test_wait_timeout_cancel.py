"""Waiting, timeouts and cancellation.

* Processing results as they finish with a ``ray.wait`` loop (and a bounded
  number of tasks in flight), the classic "as_completed" pattern.
* Polling a task that is blocked on an event: ``ray.wait(timeout=)`` returns
  nothing ready, ``ray.get(timeout=)`` raises ``GetTimeoutError``, and the
  result is fetched once the event fires.
* Cancelling a running task, a queued task, a force-cancel, and a recursive
  cancel that also stops the children a parent task spawned.
"""
import asyncio

import pytest

import meshrt as ray
from meshrt.exceptions import GetTimeoutError, TaskCancelledError

pytestmark = pytest.mark.timeout(120)


@ray.remote
class Signal:
    """An event that tasks can wait on and the driver can fire."""

    def __init__(self):
        self.event = asyncio.Event()

    async def send(self):
        self.event.set()

    async def wait(self):
        await self.event.wait()


@ray.remote
def score_document(doc_id):
    sum(range(20_000 * (doc_id % 5)))  # uneven work
    return doc_id, len(f"document-{doc_id}") * doc_id


def test_wait_loop_processes_results_as_they_finish():
    ray.init(num_cpus=4)
    pending = [score_document.remote(i) for i in range(12)]
    processed = {}
    rounds = 0
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        assert len(ready) == 1
        doc_id, score = ray.get(ready[0])
        processed[doc_id] = score
        rounds += 1
    assert rounds == 12
    assert processed == {i: len(f"document-{i}") * i for i in range(12)}

    # Bounded parallelism: never more than 3 tasks in flight.
    results, in_flight, max_in_flight = [], [], 0
    for i in range(10):
        if len(in_flight) >= 3:
            ready, in_flight = ray.wait(in_flight, num_returns=1)
            results.extend(ray.get(ready))
        in_flight.append(score_document.remote(i))
        max_in_flight = max(max_in_flight, len(in_flight))
    results.extend(ray.get(in_flight))
    assert max_in_flight == 3
    assert sorted(doc for doc, _ in results) == list(range(10))

    # Waiting for everything at once, without pulling values to the driver.
    refs = [score_document.remote(i) for i in range(4)]
    ready, not_ready = ray.wait(refs, num_returns=len(refs), fetch_local=False)
    assert set(ready) == set(refs) and not_ready == []


@ray.remote
def wait_then_compute(signal, x):
    ray.get(signal.wait.remote())
    return x + 1


def test_timeouts_on_blocked_work():
    ray.init(num_cpus=4)
    signal = Signal.remote()
    blocked = wait_then_compute.remote(signal, 41)
    quick = score_document.remote(0)
    assert ray.get(quick) == (0, 0)

    ready, not_ready = ray.wait([blocked, quick], num_returns=2, timeout=0.5)
    assert ready == [quick]
    assert not_ready == [blocked]
    ready, not_ready = ray.wait([blocked], timeout=0)
    assert ready == [] and not_ready == [blocked]

    with pytest.raises(GetTimeoutError):
        ray.get(blocked, timeout=0.2)
    try:
        ray.get([quick, blocked], timeout=0.1)
    except TimeoutError:  # GetTimeoutError is also a builtin TimeoutError
        timed_out = True
    else:
        timed_out = False
    assert timed_out

    ray.get(signal.send.remote())
    assert ray.get(blocked, timeout=60) == 42


@ray.remote
def long_crawl(signal, pages):
    ray.get(signal.send.remote())  # tell the driver we are running
    crawled = 0
    for _ in range(pages):
        sum(range(50_000))  # one page's work (a cancel interrupts it between bytecodes)
        crawled += 1
    return crawled


@ray.remote(num_cpus=1)
class ModelReplica:
    """Holds one CPU for as long as it lives."""

    def ready(self):
        return True


@ray.remote(num_cpus=1)
def batch_inference(n):
    return n * 2


def test_cancel_running_and_queued_tasks():
    ray.init(num_cpus=2)

    # Running task.
    started = Signal.remote()
    crawl = long_crawl.remote(started, 10_000)
    ray.get(started.wait.remote())
    ray.cancel(crawl)
    with pytest.raises(TaskCancelledError):
        ray.get(crawl, timeout=60)

    # Force-cancel kills the worker running the task.
    started2 = Signal.remote()
    crawl2 = long_crawl.remote(started2, 10_000)
    ray.get(started2.wait.remote())
    ray.cancel(crawl2, force=True)
    with pytest.raises(TaskCancelledError):
        ray.get(crawl2, timeout=60)

    # Queued task: two replicas hold both CPUs, so the task cannot start.
    replicas = [ModelReplica.remote() for _ in range(2)]
    assert ray.get([r.ready.remote() for r in replicas]) == [True, True]
    queued = batch_inference.remote(1)
    ready, _ = ray.wait([queued], timeout=0.3)
    assert ready == []
    ray.cancel(queued)
    with pytest.raises(TaskCancelledError):
        ray.get(queued, timeout=60)
    for r in replicas:
        ray.kill(r)
    assert ray.get(batch_inference.remote(21), timeout=60) == 42

    # A cancelled task does not poison the rest of the cluster.
    assert ray.get(long_crawl.remote(Signal.remote(), 2)) == 2


@ray.remote
class ChildRegistry:
    def __init__(self):
        self.children = []
        self.registered = asyncio.Event()

    async def register(self, refs):
        self.children.extend(refs)
        self.registered.set()

    async def get_children(self):
        await self.registered.wait()
        return self.children


@ray.remote
def child_job(part):
    for _ in range(10_000):
        sum(range(50_000))  # long work, until cancelled
    return part


@ray.remote
def parent_job(registry):
    children = [child_job.remote(p) for p in range(2)]
    ray.get(registry.register.remote(children))  # refs inside a list stay refs
    return sum(ray.get(children))


def test_recursive_cancel_stops_children():
    ray.init(num_cpus=4)
    registry = ChildRegistry.remote()
    parent = parent_job.remote(registry)
    children = ray.get(registry.get_children.remote())
    assert len(children) == 2
    assert all(isinstance(c, ray.ObjectRef) for c in children)

    ray.cancel(parent, recursive=True)
    with pytest.raises(TaskCancelledError):
        ray.get(parent, timeout=60)
    for child in children:
        with pytest.raises(TaskCancelledError):
            ray.get(child, timeout=60)

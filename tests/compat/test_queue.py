"""Producer/consumer through ``meshrt.util.queue.Queue``.

* Several producer tasks push readings into a shared queue and a consumer
  actor drains it until it has seen one end-of-stream sentinel per producer.
* A bounded queue as back-pressure: ``Full`` / ``Empty`` from the non-blocking
  and timed calls, and a producer task that blocks on ``put`` until the
  driver makes room.
* A job queue filled by the driver and drained by a fan-out of worker tasks
  that stop when ``get_nowait`` raises ``Empty``.
"""
import pytest

import meshrt as ray
from meshrt.util.queue import Empty, Full, Queue

pytestmark = pytest.mark.timeout(120)

DONE = "__done__"


@ray.remote
def sensor(queue, sensor_id, n):
    for i in range(n):
        queue.put({"sensor": sensor_id, "seq": i, "value": sensor_id * 100 + i})
    queue.put(DONE)
    return n


@ray.remote
class Aggregator:
    def __init__(self, queue, num_producers):
        self.queue = queue
        self.num_producers = num_producers

    def run(self):
        finished = 0
        totals = {}
        last_seq = {}
        while finished < self.num_producers:
            item = self.queue.get(timeout=30)
            if item == DONE:
                finished += 1
                continue
            sid = item["sensor"]
            # Items from one producer arrive in the order it put them.
            assert last_seq.get(sid, -1) == item["seq"] - 1
            last_seq[sid] = item["seq"]
            totals[sid] = totals.get(sid, 0) + item["value"]
        return totals


def test_producers_and_consumer_actor():
    ray.init(num_cpus=4)
    queue = Queue()
    consumer = Aggregator.remote(queue, 3)
    result_ref = consumer.run.remote()
    produced = ray.get([sensor.remote(queue, sid, 20) for sid in (1, 2, 3)])
    totals = ray.get(result_ref)

    assert produced == [20, 20, 20]
    assert totals == {sid: sum(sid * 100 + i for i in range(20)) for sid in (1, 2, 3)}
    assert queue.empty()
    assert queue.qsize() == 0


@ray.remote
def bulk_producer(queue, items):
    for item in items:
        queue.put(item)  # blocks while the queue is full
    return len(items)


def test_bounded_queue_backpressure():
    ray.init(num_cpus=4)
    queue = Queue(maxsize=2)
    queue.put_nowait("a")
    queue.put("b")
    assert queue.full()
    assert queue.qsize() == 2
    with pytest.raises(Full):
        queue.put_nowait("c")
    with pytest.raises(Full):
        queue.put("c", timeout=0.1)

    assert queue.get() == "a"
    assert queue.get_nowait() == "b"
    assert queue.empty()
    with pytest.raises(Empty):
        queue.get_nowait()
    with pytest.raises(Empty):
        queue.get(timeout=0.1)
    with pytest.raises(Empty):
        queue.get(block=False)

    # A producer with more items than the queue can hold only finishes once the
    # driver has consumed enough of them.
    items = list(range(10))
    producer = bulk_producer.remote(queue, items)
    received = [queue.get(timeout=30) for _ in items]
    assert received == items  # FIFO
    assert ray.get(producer) == len(items)
    assert queue.empty()


@ray.remote
def job_worker(jobs, worker_id):
    processed = []
    while True:
        try:
            job = jobs.get_nowait()
        except Empty:
            return worker_id, processed
        processed.append((job["id"], job["a"] * job["b"]))


def test_job_queue_fanout():
    ray.init(num_cpus=4)
    jobs = Queue()
    for i in range(30):
        jobs.put({"id": i, "a": i, "b": 3})
    assert jobs.qsize() == 30

    results = ray.get([job_worker.remote(jobs, w) for w in range(4)])
    assert sorted(w for w, _ in results) == [0, 1, 2, 3]
    done = [item for _, processed in results for item in processed]
    assert sorted(job_id for job_id, _ in done) == list(range(30))  # each job exactly once
    assert dict(done) == {i: 3 * i for i in range(30)}
    assert jobs.empty()

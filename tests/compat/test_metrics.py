"""Application metrics (``ray.util.metrics``): a counter, a gauge and a histogram
recorded from tasks, an actor and the driver, and the records the API refuses."""
import pytest

import meshrt as ray
from meshrt.util.metrics import Counter, Gauge, Histogram

pytestmark = pytest.mark.timeout(120)


@ray.remote
def handle(requests, latency, seconds):
    requests.inc(tags={"route": "/predict"})
    latency.observe(seconds, tags={"route": "/predict"})
    return seconds


@ray.remote
class Batcher:
    def __init__(self):
        self.waiting = Gauge("batch_waiting", description="requests waiting for a batch")

    def add(self, n):
        self.waiting.set(n)
        return n


def test_metrics_are_recorded_from_everywhere():
    ray.init(num_cpus=2)
    requests = Counter("app_requests", description="requests served", tag_keys=("route",))
    latency = Histogram("app_latency_s", description="time to answer", boundaries=[0.1, 1.0], tag_keys=("route",))
    assert ray.get([handle.remote(requests, latency, s) for s in (0.05, 0.5)]) == [0.05, 0.5]
    batcher = Batcher.remote()
    assert ray.get(batcher.add.remote(3)) == 3
    requests.set_default_tags({"route": "/health"})
    requests.inc()
    with pytest.raises(ValueError):
        Counter("app_tagged", tag_keys=("route",)).inc()  # (no value for its tag key)
    with pytest.raises(TypeError):
        requests.inc("one")
    with pytest.raises(ValueError):
        Histogram("app_no_buckets")

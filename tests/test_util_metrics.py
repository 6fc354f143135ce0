"""meshrt.util.metrics: Counter, Gauge and Histogram from tasks, actors and the driver,
added up by the controller and served to Prometheus."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

import meshrt
from meshrt.util.metrics import Counter, Gauge, Histogram, collect, start_http_server

from .helpers import wait_until

pytestmark = pytest.mark.timeout(120)


@meshrt.remote
def handle(requests, latency, route, seconds):
    requests.inc(tags={"route": route})
    latency.observe(seconds, tags={"route": route})


@meshrt.remote
class Queue:
    def __init__(self):
        self.depth = Gauge("queue_depth", "items waiting")

    def resize(self, n):
        self.depth.set(n)


def _series(name):
    for metric in collect():
        if metric["name"] == name:
            return metric["kind"], dict(metric["series"])
    return None, {}


def test_metrics_from_every_process_add_up(rt):
    requests = Counter("requests_total", "requests served", tag_keys=("route",))
    latency = Histogram("latency_s", "time to answer", boundaries=[0.1, 1.0], tag_keys=("route",))
    meshrt.get([handle.remote(requests, latency, "/a", s) for s in (0.05, 0.1, 0.5, 2.0)])
    requests.inc(3, tags={"route": "/b"})  # (the driver's own)
    queue = Queue.remote()
    meshrt.get([queue.resize.remote(5), queue.resize.remote(2)])
    want = {(("route", "/a"),): 4.0, (("route", "/b"),): 3.0}
    assert wait_until(lambda: _series("requests_total") == ("counter", want), timeout=30)
    assert wait_until(lambda: _series("queue_depth") == ("gauge", {(): 2.0}), timeout=30)
    kind, series = _series("latency_s")
    assert kind == "histogram" and series[(("route", "/a"),)] == ([2, 1, 1], 2.65, 4)  # (le 0.1, le 1, +Inf)

    port = start_http_server()
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    assert '# TYPE requests_total counter' in text and 'requests_total{route="/a"} 4' in text
    assert 'latency_s_bucket{route="/a",le="1"} 3' in text and 'latency_s_bucket{route="/a",le="+Inf"} 4' in text
    assert "queue_depth 2" in text
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=30)


def test_bad_metrics_and_records_are_named(rt):
    with pytest.warns(UserWarning, match="exported as '_2fast'"):  # (Ray takes it too)
        assert Counter("2fast").info["name"] == "_2fast"
    with pytest.raises(ValueError, match="non-empty"):
        Counter("")
    with pytest.raises(ValueError, match="boundaries"):
        Histogram("h_bad", boundaries=[1.0, 0.5])
    counter = Counter("calls_total", tag_keys=("who",))
    with pytest.raises(ValueError, match="missing value for tag key"):
        counter.inc()
    with pytest.warns(UserWarning, match="not one of its tag_keys"):  # (Ray records it without, silently)
        counter.inc(tags={"who": "a", "what": "b"})
    with pytest.raises(ValueError, match="only grows"):
        counter.inc(-1, tags={"who": "a"})
    with pytest.raises(TypeError, match="int or float"):
        counter.set_default_tags({"who": "a"}).inc("1")
    with pytest.raises(ValueError, match="is a counter here already"):
        Gauge("calls_total")


def test_a_new_runtime_starts_from_nothing_and_still_hears_the_driver():
    meshrt.init(num_cpus=1)
    Counter("before_total").inc()  # (shut down before its report could leave)
    meshrt.shutdown()
    meshrt.init(num_cpus=1)
    try:
        Counter("after_total").inc(2)
        assert wait_until(lambda: _series("after_total") == ("counter", {(): 2.0}), timeout=30)
        assert _series("before_total") == (None, {})
    finally:
        meshrt.shutdown()

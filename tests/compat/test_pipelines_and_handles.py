"""Actor pipelines, handles passed around, and named actors.

* An ETL pipeline of stage actors: the driver wires ``reader -> parser ->
  enricher -> sink`` by passing each stage's ObjectRef to the next stage and
  only ``ray.get``s the final summary.
* Actor handles passed to tasks and to other actors: worker tasks report
  progress to a shared metrics actor, and an actor holds handles of others.
* A named config/registry actor created by the driver in a namespace and
  looked up by name (``ray.get_actor``) from inside tasks, including
  one in an explicit other namespace and a missing name raising ``ValueError``.
"""
import pytest

import meshrt as ray

pytestmark = pytest.mark.timeout(120)

RAW_LOGS = {
    0: "2024-01-01 GET /index 200 12ms\n2024-01-01 GET /about 404 3ms",
    1: "2024-01-02 POST /login 200 40ms\n2024-01-02 GET /index 200 9ms",
    2: "2024-01-03 GET /admin 500 120ms",
}


@ray.remote
class Reader:
    def read(self, shard):
        return RAW_LOGS[shard]


@ray.remote
class Parser:
    def __init__(self):
        self.lines = 0

    def parse(self, text):
        records = []
        for line in text.splitlines():
            date, method, path, status, latency = line.split()
            self.lines += 1
            records.append({"date": date, "method": method, "path": path,
                            "status": int(status), "ms": int(latency[:-2])})
        return records


@ray.remote
class Enricher:
    def enrich(self, records):
        return [dict(r, ok=r["status"] < 400, slow=r["ms"] > 100) for r in records]


@ray.remote
class Sink:
    def __init__(self):
        self.rows = []

    def write(self, records):
        self.rows.extend(records)
        return len(records)

    def summary(self):
        return {
            "rows": len(self.rows),
            "errors": sorted(r["path"] for r in self.rows if not r["ok"]),
            "slow": [r["path"] for r in self.rows if r["slow"]],
            "index_hits": sum(r["path"] == "/index" for r in self.rows),
        }


def test_etl_pipeline_of_actors_passing_refs():
    ray.init(num_cpus=4)
    reader, parser, enricher, sink = Reader.remote(), Parser.remote(), Enricher.remote(), Sink.remote()

    written = []
    for shard in RAW_LOGS:
        raw_ref = reader.read.remote(shard)
        parsed_ref = parser.parse.remote(raw_ref)       # ref in, resolved value seen by the actor
        enriched_ref = enricher.enrich.remote(parsed_ref)
        written.append(sink.write.remote(enriched_ref))

    assert ray.get(written) == [2, 2, 1]
    summary = ray.get(sink.summary.remote())
    assert summary == {"rows": 5, "errors": ["/about", "/admin"], "slow": ["/admin"], "index_hits": 2}
    assert ray.get(parser.parse.remote("2024-01-04 GET /x 200 1ms"))[0]["path"] == "/x"


@ray.remote
class Metrics:
    def __init__(self):
        self.counters = {}

    def incr(self, key, amount=1):
        self.counters[key] = self.counters.get(key, 0) + amount

    def snapshot(self):
        return dict(self.counters)


@ray.remote
def process_batch(batch, metrics):
    for item in batch:
        metrics.incr.remote("items")
        if item % 3 == 0:
            metrics.incr.remote("fizz")
    # Make sure our increments landed before reporting completion.
    ray.get(metrics.incr.remote("batches"))
    return sum(batch)


@ray.remote
class Coordinator:
    """Holds another actor's handle and passes it on to the tasks it starts."""

    def __init__(self, metrics, num_shards):
        self.metrics = metrics
        self.num_shards = num_shards

    def run(self, numbers):
        refs = [process_batch.remote(numbers[i::self.num_shards], self.metrics)
                for i in range(self.num_shards)]
        total = sum(ray.get(refs))
        ray.get(self.metrics.incr.remote("runs"))
        return total


def test_handles_passed_to_tasks_and_actors():
    ray.init(num_cpus=4)
    metrics = Metrics.remote()
    totals = ray.get([process_batch.remote(list(range(b * 10, b * 10 + 10)), metrics)
                      for b in range(3)])
    assert totals == [45, 145, 245]
    assert ray.get(metrics.snapshot.remote()) == {"items": 30, "fizz": 10, "batches": 3}

    coordinator = Coordinator.remote(metrics, 4)
    assert ray.get(coordinator.run.remote(list(range(20)))) == sum(range(20))
    snap = ray.get(metrics.snapshot.remote())
    assert snap["runs"] == 1
    assert snap["batches"] == 7
    assert snap["items"] == 50


@ray.remote
class FeatureFlags:
    def __init__(self, flags):
        self.flags = dict(flags)
        self.reads = 0

    def is_enabled(self, name):
        self.reads += 1
        return self.flags.get(name, False)

    def set(self, name, value):
        self.flags[name] = value

    def read_count(self):
        return self.reads


@ray.remote
def render_page(user):
    flags = ray.get_actor("feature_flags")  # same namespace as the driver
    theme = "dark" if ray.get(flags.is_enabled.remote("dark_mode")) else "light"
    audit = ray.get_actor("audit_log", namespace="ops")
    ray.get(audit.append.remote(f"rendered:{user}"))
    return f"{user}:{theme}:{ray.get_runtime_context().namespace}"


@ray.remote
class AuditLog:
    def __init__(self):
        self.entries = []

    def append(self, entry):
        self.entries.append(entry)

    def all(self):
        return sorted(self.entries)


@ray.remote
def lookup_missing():
    try:
        ray.get_actor("does_not_exist")
    except ValueError:
        return "missing"
    return "found"


def test_named_actors_looked_up_from_tasks():
    ray.init(num_cpus=4, namespace="webapp")
    flags = FeatureFlags.options(name="feature_flags").remote({"dark_mode": True})
    AuditLog.options(name="audit_log", namespace="ops", lifetime="detached").remote()

    pages = ray.get([render_page.remote(u) for u in ("ann", "bob", "cy")])
    assert pages == ["ann:dark:webapp", "bob:dark:webapp", "cy:dark:webapp"]

    ray.get(flags.set.remote("dark_mode", False))
    assert ray.get(render_page.remote("dee")) == "dee:light:webapp"
    assert ray.get(flags.read_count.remote()) == 4

    audit = ray.get_actor("audit_log", namespace="ops")
    assert ray.get(audit.all.remote()) == ["rendered:ann", "rendered:bob", "rendered:cy", "rendered:dee"]
    with pytest.raises(ValueError):
        ray.get_actor("audit_log")  # lives in "ops", not in "webapp"
    assert ray.get(lookup_missing.remote()) == "missing"

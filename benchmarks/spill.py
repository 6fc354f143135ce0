"""Small tasks while the object store spills: meshrt and Ray side by side.

Each round runs both backends once, each in a fresh subprocess with 2 CPUs and a 256 MiB
object store (spilling to the default directory, on this machine's disk). The driver
times round trips of a small task (``add_one.remote(i)``) and of a task that reads a
1 MiB array from the store (``first_of.remote(stored)``), in turn, on one CPU:

- with nothing else running;
- while, on the other CPU, tasks make 64 MiB arrays one after another (24 of them, 1.5 GiB,
  all kept referenced), so that the store spills to make room for every new one.

The table gives medians over rounds, and meshrt's ratio (>1: meshrt better), the median
of the ratios within each round. The spill rate is the arrays' bytes over the time they
took to be made.

    python benchmarks/spill.py [--repeat 5] [--markdown PATH]
"""

from __future__ import annotations

import os
import statistics
import threading
import time

import _rounds
import numpy as np

BACKENDS = ("meshrt", "ray")
ARRAYS = 24
ARRAY_BYTES = 64 << 20
STORED_BYTES = 1 << 20


def _round_trips(ray, probes: list, stop: threading.Event | None, least: int = 200) -> list[list[float]]:
    """Round trips of each probe (a function returning a ref) in turn, until ``stop``."""
    times: list[list[float]] = [[] for _ in probes]
    while (stop is not None and not stop.is_set()) or len(times[-1]) < least:
        for probe, kept in zip(probes, times, strict=True):
            t0 = time.perf_counter()
            ray.get(probe(len(kept)))
            kept.append(time.perf_counter() - t0)
        if stop is None and len(times[-1]) >= least:
            break
    return times


def child(backend: str) -> dict:
    if backend == "meshrt":
        import meshrt as ray

        ray.init(num_cpus=2, object_store_memory=256 << 20)
    else:
        import ray

        ray.init(num_cpus=2, object_store_memory=256 << 20, logging_level="ERROR", include_dashboard=False)

    @ray.remote(num_cpus=1)
    def add_one(x):
        return x + 1

    @ray.remote(num_cpus=1)
    def first_of(arr):
        return float(arr[0])

    @ray.remote(num_cpus=1)
    def make(seed):
        return np.full(ARRAY_BYTES // 8, float(seed))

    out = {}
    try:
        stored = ray.put(np.ones(STORED_BYTES // 8))  # (in the store: read by reference)
        probes = [add_one.remote, lambda _: first_of.remote(stored)]
        ray.get([add_one.remote(i) for i in range(4)] + [first_of.remote(stored)])
        idle, idle_read = _round_trips(ray, probes, None)
        out["idle_us"] = statistics.median(idle) * 1e6
        out["idle_read_us"] = statistics.median(idle_read) * 1e6
        kept, stop = [], threading.Event()

        def produce():
            try:
                for i in range(ARRAYS):
                    ref = make.remote(i)
                    ray.wait([ref], fetch_local=False)  # (made and stored; one at a time)
                    kept.append(ref)
            finally:
                stop.set()

        t0 = time.perf_counter()
        producer = threading.Thread(target=produce)
        producer.start()
        busy, busy_read = _round_trips(ray, probes, stop, least=20)
        producer.join()
        out["spill_mb_s"] = ARRAYS * ARRAY_BYTES / (time.perf_counter() - t0) / 1e6
        out["spilling_median_us"] = statistics.median(busy) * 1e6
        out["spilling_p95_ms"] = statistics.quantiles(busy, n=20)[-1] * 1e3
        out["spilling_max_ms"] = max(busy) * 1e3
        out["reading_median_us"] = statistics.median(busy_read) * 1e6
        out["reading_p95_ms"] = statistics.quantiles(busy_read, n=20)[-1] * 1e3
        out["reading_max_ms"] = max(busy_read) * 1e3
        last = ray.get(kept[0])  # (read back from where it was spilled)
        assert float(last[0]) == 0.0 and float(last[-1]) == 0.0
    finally:
        ray.shutdown()
    return out


ROWS = [  # key, label, higher is better, format
    ("idle_us", "small task round trip, idle (µs)", False, "{:,.0f}"),
    ("spilling_median_us", "small task round trip while the store spills, median (µs)", False, "{:,.0f}"),
    ("spilling_p95_ms", "... 95th percentile (ms)", False, "{:.1f}"),
    ("spilling_max_ms", "... slowest (ms)", False, "{:.1f}"),
    ("idle_read_us", "task reading a 1 MiB stored array, idle (µs)", False, "{:,.0f}"),
    ("reading_median_us", "... while the store spills, median (µs)", False, "{:,.0f}"),
    ("reading_p95_ms", "... 95th percentile (ms)", False, "{:.1f}"),
    ("reading_max_ms", "... slowest (ms)", False, "{:.1f}"),
    ("spill_mb_s", "64 MiB arrays made while spilling (MB/s)", True, "{:,.0f}"),
]


def main() -> None:
    _rounds.main(__doc__, os.path.abspath(__file__), BACKENDS, child, ROWS, "2 CPUs, 256 MiB store")


if __name__ == "__main__":
    main()

"""multiprocessing.Pool's calls: meshrt's Pool, Ray's and the standard library's, side by side.

Each round runs every backend once, in a fresh subprocess, with a pool of 2 processes
(this machine's cores) and the same program:

- start: ``Pool(2)`` and a first ``map`` of one item (the runtime already up for meshrt
  and Ray, as in a program that uses it for other things too);
- ``map`` of 10,000 tiny items (default chunksize);
- ``imap_unordered`` of 1,000 tiny items, chunksize 1 (a round trip per item);
- 500 ``apply_async`` then every ``get``;
- ``map`` over 8 numpy arrays of 8 MiB (summed): large arguments;
- ``map`` of 16 items of 50 ms CPU each: makespan, against the ideal 0.4 s.

The table gives medians over rounds, and meshrt's ratio to each (>1: meshrt better),
the median of the ratios within each round.

    python benchmarks/pool.py [--repeat 5] [--markdown PATH]
"""

from __future__ import annotations

import os
import time

import _rounds
import numpy as np

BACKENDS = ("meshrt", "ray", "multiprocessing")


def tiny(x):
    return x + 1


def add(a, b):
    return a + b


def total(array):
    return float(array.sum())


def burn(seconds):
    end = time.process_time() + seconds
    n = 0
    while time.process_time() < end:
        n += 1
    return n


def _pool_class(backend: str):
    if backend == "meshrt":
        import meshrt
        from meshrt.util.multiprocessing import Pool

        meshrt.init(num_cpus=2)
        return Pool, meshrt.shutdown
    if backend == "ray":
        import ray
        from ray.util.multiprocessing import Pool

        ray.init(num_cpus=2, logging_level="ERROR", include_dashboard=False)
        return Pool, ray.shutdown
    from multiprocessing import Pool

    return Pool, lambda: None


def child(backend: str) -> dict:
    Pool, stop = _pool_class(backend)
    out = {}
    try:
        t0 = time.perf_counter()
        pool = Pool(2)
        pool.map(tiny, [0])
        out["start_s"] = time.perf_counter() - t0
        with pool:
            t0 = time.perf_counter()
            assert pool.map(tiny, range(10_000))[-1] == 10_000
            out["map_10k_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            assert len(list(pool.imap_unordered(tiny, range(1000)))) == 1000
            out["imap_unordered_per_s"] = 1000 / (time.perf_counter() - t0)
            t0 = time.perf_counter()
            results = [pool.apply_async(add, (i, 1)) for i in range(500)]
            assert [r.get() for r in results][-1] == 500
            out["apply_async_500_s"] = time.perf_counter() - t0
            arrays = [np.full(1 << 20, float(i)) for i in range(8)]  # 8 MiB each
            t0 = time.perf_counter()
            assert pool.map(total, arrays, chunksize=1)[1] == float(1 << 20)
            out["map_8x8MiB_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            pool.map(burn, [0.05] * 16, chunksize=1)
            out["cpu_16x50ms_s"] = time.perf_counter() - t0
    finally:
        stop()
    return out


ROWS = [  # key, label, higher is better, format
    ("start_s", "Pool(2) + first map (s)", False, "{:.3f}"),
    ("map_10k_s", "map of 10,000 tiny items (s)", False, "{:.3f}"),
    ("imap_unordered_per_s", "imap_unordered, chunksize 1 (items/s)", True, "{:,.0f}"),
    ("apply_async_500_s", "500 apply_async + get (s)", False, "{:.3f}"),
    ("map_8x8MiB_s", "map over 8 arrays of 8 MiB (s)", False, "{:.3f}"),
    ("cpu_16x50ms_s", "16 items of 50 ms CPU (s; ideal 0.40)", False, "{:.3f}"),
]



def main() -> None:
    _rounds.main(__doc__, os.path.abspath(__file__), BACKENDS, child, ROWS, "2 processes")


if __name__ == "__main__":
    main()

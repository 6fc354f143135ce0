#!/usr/bin/env python
"""Object-store benchmarks: meshrt vs Ray, driven by the same code.

    python benchmarks/objstore.py                        # both backends, 3 repeats
    python benchmarks/objstore.py --backend ray --quick
    python benchmarks/objstore.py --backend meshrt --only put_warm,get_large
    python benchmarks/objstore.py --repeat 3 --markdown  # also benchmarks/results/objstore.md
    python benchmarks/objstore.py --render benchmarks/results/objstore.json

Each backend runs in its own fresh subprocess
(``<python> benchmarks/objstore.py --backend X --child --json-out TMP``) that
does ``import meshrt as ray`` or ``import ray`` and then uses only the Ray API
(plus, for the store-usage check, meshrt's available_resources() and Ray's
internal plasma usage log).  The parent prints one table (stdout); progress and
the backends' logs go to stderr; raw samples go to --json (default
benchmarks/results/objstore.json).

Method (GB = 10^9 bytes; 256 MiB = 268,435,456 bytes):
  * ``init(num_cpus=4, object_store_memory=4 << 30)`` for both backends.
  * The 256 MiB array is ``np.random.default_rng(0).random(32 << 20)``
    (float64), created in the driver before ``init``.
  * memcpy: in each backend's child, before ``init`` (so no runtime runs), a
    single-thread ``np.copyto`` of the 256 MiB array into a pre-touched,
    page-aligned anonymous ``mmap`` of the same size; the 2-thread number
    copies the two halves in two threads.  Median of 5 copies after 1 warm-up.
    It is the machine's reference, not a backend number (no ratio).
  * put 256 MiB, first of a session: a fresh process creates the array, calls
    ``init``, then times exactly one ``put``.  With --repeat N, N-1 samples
    come from short-lived probe processes, the N-th is the child's own first
    put.
  * put 256 MiB, warm: ``ref = put(x); del ref`` repeated; the first two puts
    of the session are not timed, then 4 timed puts per repetition; median
    (the fastest timed put is an info row: Ray's warm puts are bimodal).
    The "÷ memcpy" info row divides that median by the same child's
    single-thread memcpy median.
  * get latency: ``ref = put(v)`` once, then ``get(ref)`` (result dropped at
    once) in a loop of >= --duration s and >= 20 gets per repetition; value:
    median latency; reported: median over repetitions.  For 256 MiB the info
    row says whether the returned array lives in a shared mapping of the store
    (/proc/self/maps: memfd or /dev/shm, no private copy).
  * numpy argument: an actor ``nbytes(self, a): return a.nbytes``;
    ``get(actor.nbytes.remote(x))`` with the array itself as the argument;
    1 warm-up call, 4 timed calls per repetition; GB/s = 256 MiB / time.
  * torch round trip: ``t = torch.randn(32 << 20)`` (128 MiB float32),
    ``echo(self, t): return t``; the warm-up checks ``torch.equal``; 4 timed
    ``get(actor.echo.remote(t))`` per repetition, GB/s = 128 MiB / time.  The
    info row does the same but writes ``t[0]`` (outside the timer) before
    every call, so a runtime cannot reuse a copy it stored for an earlier
    call of the same, unchanged tensor.
  * small puts/s: ``put(b"x" * 100)``, ref dropped at once, >= --duration s
    per repetition.
  * put/get/drop cycles: ``r = put(np.ones(128 << 10)); v = get(r); del v, r``
    10,000 times (2,000 with --quick), once (not repeated).  Driver RSS and
    store usage are read before the loop and after it (gc.collect + --settle
    s); store usage is then polled for up to 10 s until it is back at the
    baseline.  meshrt: usage = capacity - available_resources()
    ["object_store_memory"].  Ray: the plasma "bytes in use" + "bytes
    evictable" of core_worker.log_plasma_usage() (its available_resources()
    does not change when objects are stored).
  * Every group runs under a watchdog (--metric-timeout); a hung/crashed
    child is restarted for the remaining groups.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import _benchlib as bl  # noqa: E402
import _harness as h  # noqa: E402
from _harness import kill_actors, log  # noqa: E402
from _memprobe import StoreUsage, driver_memory, is_store_mapping, mapping_of, measure_memcpy  # noqa: E402

perf = time.perf_counter

NUM_CPUS = 4
STORE_BYTES = 4 << 30
BIG_ELEMS = 32 << 20            # float64 -> 256 MiB
BIG_BYTES = BIG_ELEMS * 8
TORCH_ELEMS = 32 << 20          # float32 -> 128 MiB
TORCH_BYTES = TORCH_ELEMS * 4
SMALL_GET_BYTES = 1024          # the "1 KiB" object for get latency
SMALL_OBJECT = b"x" * 100       # the "small object" for put()
CYCLE_ELEMS = 128 << 10         # float64 -> 1 MiB
CYCLES = 10_000
CYCLES_QUICK = 2_000
PUTS_PER_REPEAT = 4             # timed 256 MiB operations per repetition
MEMCPY_SAMPLES = 5
RSS_LIMIT_MIB = 50.0
STORE_RESIDUAL_LIMIT_MIB = 0.5  # "back to baseline": less than half of one 1 MiB object left
STORE_POLL_S = 10.0
GB = 1e9

# --only groups, in run order (memcpy and put_first always run before init).
RUN_ORDER = ["memcpy", "put_first", "put_warm", "get_small", "get_large", "numpy_arg", "torch_rt",
             "small_puts", "cycles"]


# ---------------------------------------------------------------------------
# Metric catalogue (display order).  Duck-types bl.Metric for bl.fmt_value /
# bl.improvement, plus absolute checks and rows that are not compared.
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class OMetric:
    key: str
    group: str
    label: str                     # may contain {cycles}
    unit: str
    higher_is_better: bool
    target: float | None = None       # required improvement factor (meshrt vs ray)
    target_text: str = "-"
    digits: int | None = None
    compare: bool = True                 # False: no ratio column (machine reference rows)
    limit: float | None = None        # absolute check on the value itself
    limit_op: str = "<"                  # value <limit_op> limit passes
    fmt: Callable[[Any], str] | None = None


def _yes_no(v):
    return "yes" if v >= 0.5 else "NO (copied)"


def _times(v):
    return f"{v:.2f}x"


METRICS: list[OMetric] = [
    OMetric("memcpy_1t", "memcpy", "machine: memcpy 256 MiB, 1 thread (GB/s)", "GB/s", True,
            target_text="reference (measured in each child before init)", digits=2, compare=False),
    OMetric("put_first", "put_first", "put 256 MiB, first of a session (GB/s)", "GB/s", True, digits=2,
            target=3.0, target_text=">= 3x Ray"),
    OMetric("put_warm", "put_warm", "put 256 MiB, warm (GB/s)", "GB/s", True, 1.0, ">= 1x Ray", digits=2),
    OMetric("put_warm_best", "put_warm", "info: put 256 MiB warm, fastest timed put (GB/s)", "GB/s", True,
            digits=2),
    OMetric("put_warm_vs_memcpy", "put_warm", "info: put 256 MiB warm ÷ memcpy 1 thread", "x", True,
            target_text=">= 0.7x memcpy", compare=False, limit=0.7, limit_op=">=", fmt=_times),
    OMetric("get_small_ms", "get_small", "get latency 1 KiB (ms)", "ms", False, digits=3),
    OMetric("get_large_ms", "get_large", "get latency 256 MiB (ms)", "ms", False, 1.0,
            "zero-copy, no slower than Ray (>= 1x)", digits=3),
    OMetric("get_large_zero_copy", "get_large", "info: get 256 MiB returns a view of the store", "", True,
            target_text="zero-copy", compare=False, limit=0.5, limit_op=">=", fmt=_yes_no),
    OMetric("numpy_arg", "numpy_arg", "256 MiB numpy argument to an actor (GB/s)", "GB/s", True, 1.2,
            ">= 1.2x", digits=2),
    OMetric("torch_rt", "torch_rt", "128 MiB torch tensor round trip through an actor (GB/s)", "GB/s", True,
            10.0, ">= 10x", digits=2),
    OMetric("torch_rt_changed", "torch_rt",
            "info: same, tensor written in place before each call (GB/s)", "GB/s", True, digits=2),
    OMetric("small_puts", "small_puts", "small puts/s", "/s", True),
    OMetric("cycles_rss_mib", "cycles", "{cycles} x put/get/drop 1 MiB: driver RSS growth (MiB)", "MiB",
            False, target_text="< 50 MiB (absolute)", digits=1, compare=False, limit=RSS_LIMIT_MIB,
            limit_op="<"),
    OMetric("cycles_store_mib", "cycles", "{cycles} x put/get/drop 1 MiB: store usage left over (MiB)",
            "MiB", False, target_text="back to baseline (absolute)", digits=1, compare=False,
            limit=STORE_RESIDUAL_LIMIT_MIB, limit_op="<"),
    OMetric("cycles_per_s", "cycles", "info: {cycles} x put/get/drop 1 MiB, cycles/s", "/s", True),
    # --- informational -------------------------------------------------------
    OMetric("memcpy_2t", "memcpy", "info: machine: memcpy 256 MiB, 2 threads (GB/s)", "GB/s", True,
            target_text="reference", digits=2, compare=False),
    OMetric("init_s", "put_first", "info: init() call in the child (s)", "s", False, digits=2,
            target_text="(meshrt's init returns before its runtime is up)", compare=False),
]
GROUP_KEYS: dict[str, list[str]] = {}
for _m in METRICS:
    GROUP_KEYS.setdefault(_m.group, []).append(_m.key)
# Keys the parent derives from other medians (not produced by the child).
DERIVED = {"put_warm_vs_memcpy", "put_warm_best"}


# ---------------------------------------------------------------------------
# Remote bodies: top-level in __main__ so that cloudpickle ships them by value.
# ---------------------------------------------------------------------------

class _Sink:
    def ready(self):
        return True

    def nbytes(self, a):
        return a.nbytes

    def echo(self, t):
        return t


# ---------------------------------------------------------------------------
# Init and the big array
# ---------------------------------------------------------------------------

def do_init(ray):
    # Same call for both backends; no Ray-only kwargs.
    ray.init(num_cpus=NUM_CPUS, object_store_memory=STORE_BYTES)


def make_big_array():
    import numpy as np

    return np.random.default_rng(0).random(BIG_ELEMS)


def timed_put(ray, x):
    """Seconds for one put(x); the ref is dropped at once."""
    t0 = perf()
    ref = ray.put(x)
    dt = perf() - t0
    del ref
    return dt


# ---------------------------------------------------------------------------
# Probe for "put, first of a session": a fresh process.
# ---------------------------------------------------------------------------

def probe_main(backend):
    ray = h.import_backend(backend)
    x = make_big_array()                 # created BEFORE init
    t0 = perf()
    do_init(ray)
    init_s = perf() - t0
    put_s = timed_put(ray, x)
    ray.shutdown()
    sys.stdout.write(json.dumps({"put_s": put_s, "init_s": init_s}) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------------------
# Context and metrics
# ---------------------------------------------------------------------------

class Ctx(h.Ctx):
    def __init__(self, c, x):
        super().__init__(c)
        self.x = x
        self.puts_done = 0          # puts of the big array so far in this session
        self.Sink = c.ray.remote(_Sink)


def m_put_warm(ctx):
    ray, x = ctx.ray, ctx.x
    while ctx.puts_done < 2:            # the first two puts of the session are not timed
        ref = ray.put(x)
        del ref
        ctx.puts_done += 1
    for _ in range(ctx.repeat * PUTS_PER_REPEAT):
        dt = timed_put(ray, x)
        ctx.puts_done += 1
        ctx.rec("put_warm", BIG_BYTES / dt / GB, ms=round(dt * 1e3, 2))


def m_get_small(ctx):
    import numpy as np

    ray = ctx.ray
    v = np.arange(SMALL_GET_BYTES, dtype=np.uint8)
    ref = ray.put(v)
    got = ray.get(ref)
    if not np.array_equal(got, v):
        raise RuntimeError("get of the 1 KiB array returned different values")
    del got
    ctx.latency("get_small_ms", lambda: ray.get(ref), min_rounds=50)


def m_get_large(ctx):
    import numpy as np

    ray, x = ctx.ray, ctx.x
    ref = ray.put(x)
    ctx.puts_done += 1
    v = ray.get(ref)
    if v.shape != x.shape or not np.array_equal(v[:: 1 << 12], x[:: 1 << 12]) or v[-1] != x[-1]:
        raise RuntimeError("get of the 256 MiB array returned different values")
    mp = mapping_of(v.ctypes.data)
    zero_copy = is_store_mapping(mp) and not v.flags.owndata
    ctx.rec("get_large_zero_copy", 1.0 if zero_copy else 0.0,
            mapping=(mp or {}).get("path"), perms=(mp or {}).get("perms"),
            mapping_mib=(mp or {}).get("size_mib"), writeable=bool(v.flags.writeable),
            owndata=bool(v.flags.owndata))
    del v
    ctx.latency("get_large_ms", lambda: ray.get(ref))


def m_numpy_arg(ctx):
    ray, x = ctx.ray, ctx.x
    actors = [ctx.Sink.remote()]
    a = actors[0]
    try:
        ray.get(a.ready.remote())
        n = ray.get(a.nbytes.remote(x))                 # warm-up
        if n != x.nbytes:
            raise RuntimeError(f"actor saw {n} bytes, expected {x.nbytes}")
        for _ in range(ctx.repeat * PUTS_PER_REPEAT):
            t0 = perf()
            ray.get(a.nbytes.remote(x))
            dt = perf() - t0
            ctx.rec("numpy_arg", BIG_BYTES / dt / GB, ms=round(dt * 1e3, 2))
    finally:
        kill_actors(ray, actors)


def m_torch_rt(ctx):
    import torch

    ray = ctx.ray
    torch.manual_seed(0)
    t = torch.randn(TORCH_ELEMS)
    actors = [ctx.Sink.remote()]
    a = actors[0]
    try:
        ray.get(a.ready.remote())
        out = ray.get(a.echo.remote(t))                 # warm-up + correctness
        if not (isinstance(out, torch.Tensor) and torch.equal(out, t)):
            raise RuntimeError("echo returned a different tensor")
        del out
        for _ in range(ctx.repeat * PUTS_PER_REPEAT):
            t0 = perf()
            out = ray.get(a.echo.remote(t))
            dt = perf() - t0
            del out
            ctx.rec("torch_rt", TORCH_BYTES / dt / GB, ms=round(dt * 1e3, 2))
        # The same with an in-place write before each call (outside the timer):
        # the tensor has changed, so it must travel again.
        for i in range(ctx.repeat * PUTS_PER_REPEAT + 1):
            t[0] = float(i)
            t0 = perf()
            out = ray.get(a.echo.remote(t))
            dt = perf() - t0
            if i == 0:
                if not torch.equal(out, t):
                    raise RuntimeError("echo of a changed tensor returned stale or different values")
            else:
                ctx.rec("torch_rt_changed", TORCH_BYTES / dt / GB, ms=round(dt * 1e3, 2))
            del out
    finally:
        kill_actors(ray, actors)


def m_small_puts(ctx):
    ray, obj = ctx.ray, SMALL_OBJECT
    ctx.rate("small_puts", lambda: ray.put(obj))    # ref dropped at once


def m_cycles(ctx):
    import numpy as np

    ray = ctx.ray
    cycles = CYCLES_QUICK if ctx.args.quick else CYCLES
    usage = StoreUsage(ray, ctx.backend, STORE_BYTES)
    ctx.writer.info("cycles_store_mib", how=usage.how, cycles=cycles)
    # A few cycles first so that one-time setup (allocator, caches) is not
    # counted as growth, then settle and take the baseline.
    for _ in range(20):
        r = ray.put(np.ones(CYCLE_ELEMS))
        v = ray.get(r)
        del v, r
    gc.collect()
    time.sleep(ctx.args.settle)
    base_store = usage.read()
    base_mem = driver_memory()
    log(f"  baseline: store {_mib(base_store)}, driver {base_mem}")
    trace = []
    t0 = perf()
    for i in range(1, cycles + 1):
        r = ray.put(np.ones(CYCLE_ELEMS))
        v = ray.get(r)
        del v, r
        if i % 1000 == 0:
            el = perf() - t0
            s = usage.read()
            trace.append({"i": i, "t_s": round(el, 2), "store_mib": None if s is None else round(s / 2**20, 1),
                          "rss_mib": round(driver_memory().get("VmRSS", 0), 1)})
    el = perf() - t0
    ctx.rec("cycles_per_s", cycles / el, n=cycles)
    gc.collect()
    time.sleep(ctx.args.settle)
    end_mem = driver_memory()
    end_store = usage.read()
    t_poll = perf()
    while (base_store is not None and end_store is not None and end_store > base_store
           and perf() - t_poll < STORE_POLL_S):
        time.sleep(0.1)
        end_store = usage.read()
    waited = perf() - t_poll
    growth = end_mem.get("VmRSS", 0) - base_mem.get("VmRSS", 0)
    split = {k: round(end_mem.get(k, 0) - base_mem.get(k, 0), 1) for k in ("RssAnon", "RssFile", "RssShmem")}
    ctx.rec("cycles_rss_mib", growth, **{f"d_{k}": v for k, v in split.items()})
    ctx.writer.info("cycles_rss_mib", before=base_mem, after=end_mem, trace=trace)
    if base_store is not None and end_store is not None:
        ctx.rec("cycles_store_mib", (end_store - base_store) / 2**20, baseline_mib=round(base_store / 2**20, 2),
                after_mib=round(end_store / 2**20, 2), extra_wait_s=round(waited, 1))
    else:
        ctx.writer.info("cycles_store_mib", unavailable="no reliable store-usage API")
        log("  store usage: n/a for this backend")
    log(f"  trace (every 1000 cycles): {trace}")


def _mib(b):
    return "n/a" if b is None else f"{b / 2**20:.1f} MiB"


GROUP_FUNCS = {
    "put_warm": m_put_warm,
    "get_small": m_get_small,
    "get_large": m_get_large,
    "numpy_arg": m_numpy_arg,
    "torch_rt": m_torch_rt,
    "small_puts": m_small_puts,
    "cycles": m_cycles,
}


# ---------------------------------------------------------------------------
# Child: memcpy and put probes before init, init + first put, then the groups.
# ---------------------------------------------------------------------------

def child_main(c):
    ray, writer, backend = c.ray, c.writer, c.backend
    x = make_big_array()                  # before init (put_first needs that)

    # 1. Machine reference, before anything of the runtime runs.
    def memcpy():
        one, two = measure_memcpy(x, MEMCPY_SAMPLES)
        for v in one:
            writer.sample("memcpy_1t", v)
        for v in two:
            writer.sample("memcpy_2t", v)
        log(f"[{backend}] memcpy 256 MiB: 1 thread {bl.median(one):.2f} GB/s, "
            f"2 threads {bl.median(two):.2f} GB/s (median of {len(one)})")

    if "memcpy" in c.items:
        c.guard("memcpy_1t", memcpy)

    # 2. put, first of a session: probes in fresh processes before our own init.
    def record_probe(r):
        writer.sample("put_first", BIG_BYTES / r["put_s"] / GB, ms=round(r["put_s"] * 1e3, 1), probe=True)
        log(f"  put_first: {BIG_BYTES / r['put_s'] / GB:.2f} GB/s ({r['put_s'] * 1e3:.1f} ms; "
            f"init {r['init_s']:.2f} s)")

    if "put_first" in c.items:
        c.probes("put_first", record_probe)

    # 3. init, then (if wanted) the session's first put.
    def init():
        t0 = perf()
        do_init(ray)
        init_s = perf() - t0
        writer.sample("init_s", init_s)
        log(f"[{backend}] init {init_s:.2f} s")
        ctx = Ctx(c, x)
        if "put_first" in c.items:
            dt = timed_put(ray, x)
            ctx.puts_done += 1
            ctx.rec("put_first", BIG_BYTES / dt / GB, ms=round(dt * 1e3, 1), probe=False)
        return ctx

    fail_keys = [k for g in c.items if g != "memcpy" for k in GROUP_KEYS.get(g, []) if k not in DERIVED]
    ctx = c.init("put_first", init, fail_keys)
    if ctx is None:
        return 4
    # 4. The other groups, each recorded under its first metric.
    c.run(GROUP_FUNCS, ctx, key_of=lambda g: GROUP_KEYS[g][0])
    c.shutdown()
    return 0


# ---------------------------------------------------------------------------
# Parent: which groups a crashed child got through; derived metrics
# ---------------------------------------------------------------------------

def group_done(metrics, g):
    """A group counts as done when its first metric has a result or an error."""
    m = metrics.get(GROUP_KEYS[g][0])
    return m is not None and (m.get("samples") or m.get("error"))


def finish_backend(out, wanted, remaining, rc):
    for g in wanted:
        for k in GROUP_KEYS[g]:
            if k not in out["metrics"] and k not in DERIVED and k not in ("init_s", "memcpy_2t"):
                out["metrics"][k] = {"samples": [], "median": None, "info": {},
                                     "error": "not run" if g in remaining or rc == 0 else
                                     f"not run (child rc={rc})"}
    # Derived: put warm relative to this child's own memcpy.
    pw = out["metrics"].get("put_warm") or {}
    mc = out["metrics"].get("memcpy_1t") or {}
    if pw.get("median") and mc.get("median") and not pw.get("error") and not mc.get("error"):
        r = pw["median"] / mc["median"]
        out["metrics"]["put_warm_vs_memcpy"] = {"samples": [r], "median": r, "error": None,
                                                "info": {"put_warm_gbps": pw["median"],
                                                         "memcpy_1t_gbps": mc["median"]}}
    samples = [v for v in pw.get("samples", []) if isinstance(v, (int, float))]
    if samples and not pw.get("error"):
        out["metrics"]["put_warm_best"] = {"samples": [max(samples)], "median": max(samples), "error": None,
                                           "info": {"of": len(samples)}}


# ---------------------------------------------------------------------------
# Report: ratios, absolute checks, table rows
# ---------------------------------------------------------------------------

def passes(m: OMetric, v) -> bool | None:
    if m.limit is None or not isinstance(v, (int, float)):
        return None
    return {"<": v < m.limit, "<=": v <= m.limit, ">=": v >= m.limit, ">": v > m.limit}[m.limit_op]


def _value(report, b, key):
    info = report["backends"].get(b, {})
    if info.get("state", "skipped") != "ok":
        return None
    res = info.get("metrics", {}).get(key)
    if not res or res.get("error"):
        return None
    return res.get("median")


def _cell(m: OMetric, report, b) -> str:
    info = report["backends"].get(b)
    if info is None:
        return "skipped"
    st = info.get("state", "skipped")
    if st != "ok":
        return st
    res = info.get("metrics", {}).get(m.key)
    if res is None or res.get("median") is None:
        if res is not None and res.get("error"):
            return "not run" if res["error"].startswith("not run") else "error"
        if m.key == "cycles_store_mib" and _value(report, b, "cycles_rss_mib") is not None:
            return "n/a"
        return "not run"
    s = bl.fmt_value(m, res["median"])
    ok = passes(m, res["median"])
    if ok is not None and m.fmt is None:
        s += " ok" if ok else " FAIL"
    if res.get("error"):
        s += " (partial)"
    return s


def _label(m: OMetric, report) -> str:
    return m.label.format(cycles=f"{report['args'].get('cycles', CYCLES):,}")


def compute_ratios(report):
    ratios = {}
    for m in METRICS:
        vm, vr = _value(report, "meshrt", m.key), _value(report, "ray", m.key)
        entry = {}
        if m.compare:
            r = bl.improvement(m, vm, vr)
            if r is not None:
                entry.update(improvement=r, target=m.target, met=None if m.target is None else r >= m.target)
        if m.limit is not None:
            entry.update(limit=f"{m.limit_op} {m.limit}", meshrt_ok=passes(m, vm), ray_ok=passes(m, vr))
        if entry:
            ratios[m.key] = entry
    return ratios


def build_rows(report) -> list[list[str]]:
    rows = []
    backends = report["backends"]
    wanted = report["args"].get("only") or RUN_ORDER
    for m in METRICS:
        if m.group not in wanted:
            continue    # a group left out by --only
        if not m.compare or m.target is None:
            # informational rows that no backend produced are left out
            if m.limit is None and all(_value(report, b, m.key) is None for b in ("meshrt", "ray")) \
                    and not any(backends.get(b, {}).get("metrics", {}).get(m.key, {}).get("error")
                                for b in ("meshrt", "ray")) and m.label.startswith("info"):
                continue
        cells = {b: _cell(m, report, b) for b in ("meshrt", "ray")}
        vm, vr = _value(report, "meshrt", m.key), _value(report, "ray", m.key)
        ratio = "-"
        tgt = m.target_text
        if m.compare:
            r = bl.improvement(m, vm, vr)
            if r is not None:
                ratio = f"{r:.2f}x" if r < 10 else f"{r:.1f}x"
                if m.target is not None:
                    tgt += "  [ok]" if r >= m.target else "  [MISS]"
        if m.limit is not None:
            ok = passes(m, vm)
            if ok is not None:
                tgt += "  [ok]" if ok else "  [FAIL]"
        if m.key == "get_large_ms":
            zc = _value(report, "meshrt", "get_large_zero_copy")
            if zc is not None and zc < 0.5:
                tgt += " (not zero-copy!)"
        rows.append([_label(m, report), cells["meshrt"], cells["ray"], ratio, tgt])
    return rows


HEADER = ["metric", "meshrt", "ray", "ratio (improvement factor, >1 = meshrt better)", "target"]


METHOD = ("each backend in its own fresh process, `init(num_cpus=4, object_store_memory=4 << 30)` for both; "
          "GB = 10^9 bytes; memcpy measured in each backend's process before `init` (machine reference); "
          "ratio is meshrt's improvement factor over Ray (> 1 = meshrt better); absolute checks "
          "(RSS growth, store usage, ÷ memcpy, zero-copy) are judged on meshrt's value. "
          "Details: docstring of `benchmarks/objstore.py`.")


# ---------------------------------------------------------------------------
# The script, as the harness sees it
# ---------------------------------------------------------------------------

class ObjstoreBench(h.Bench):
    name = "objstore"
    metrics = METRICS
    run_order = RUN_ORDER
    unit = "group"
    required_api = ("init", "remote", "get", "put", "shutdown")
    probe_flag = "--put-probe"
    probe_what = "put"
    pass_quick = True
    gc_between_items = True
    default_repeat = 3
    metric_timeout = 180.0
    help_quick = f"fast smoke run: 1 repetition, 0.25 s loops, 1 s settle, {CYCLES_QUICK:,} cycles"
    help_duration = ("minimum timed seconds per repetition of a latency/throughput loop "
                     "(default 1.0, --quick 0.25)")
    help_settle = "seconds to settle before reading RSS / store usage (default 2, --quick 1)"
    markdown_const = os.path.join(HERE, "results", "objstore.md")
    help_markdown = "also write the table as markdown (default PATH benchmarks/results/objstore.md; '-' = stdout)"

    def child(self, c):
        return child_main(c)

    def probe(self, backend):
        probe_main(backend)

    def item_done(self, metrics, item):
        return group_done(metrics, item)

    def finish(self, out, wanted, remaining, rc):
        finish_backend(out, wanted, remaining, rc)

    def report_args(self, args):
        return {"num_cpus": NUM_CPUS, "object_store_memory": STORE_BYTES, "big_bytes": BIG_BYTES,
                "torch_bytes": TORCH_BYTES, "cycles": CYCLES_QUICK if args.quick else CYCLES,
                "puts_per_repeat": PUTS_PER_REPEAT, "numpy": bl.lib_version("numpy"),
                "torch": bl.lib_version("torch")}

    def ratios(self, report):
        return compute_ratios(report)

    def render_text(self, report):
        return bl.render_table(HEADER, build_rows(report),
                               bl.footer(report) + f"; total {report.get('total_wall_s')} s")

    def render_markdown(self, report):
        a = report["args"]
        extra = (f", torch {a['torch']}" if a.get("torch") else "") + (f", numpy {a['numpy']}" if a.get("numpy") else "")
        return bl.render_markdown(report, HEADER, build_rows(report), METHOD, libraries_extra=extra)


def main(argv=None):
    return h.main(ObjstoreBench(), argv)


if __name__ == "__main__":
    sys.exit(main())

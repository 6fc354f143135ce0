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

import argparse
import gc
import json
import logging
import mmap
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import _benchlib as bl  # noqa: E402

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
REQUIRED_API = ("init", "remote", "get", "put", "shutdown")


def log(msg):
    sys.stderr.write(f"[objstore {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


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
METRIC_BY_KEY = {m.key: m for m in METRICS}
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
# Backend import / init
# ---------------------------------------------------------------------------

def import_backend(backend):
    if backend == "meshrt":
        if REPO_ROOT not in sys.path:
            sys.path.insert(0, REPO_ROOT)
        import meshrt as ray  # noqa: F401
    else:
        import ray  # noqa: F401
    return ray


def backend_version(ray):
    v = getattr(ray, "__version__", None)
    if v is None:
        try:
            from importlib.metadata import version

            v = version(ray.__name__)
        except Exception:
            v = "unknown"
    return str(v)


def do_init(ray):
    # Same call for both backends; no Ray-only kwargs.
    ray.init(num_cpus=NUM_CPUS, object_store_memory=STORE_BYTES)


def make_big_array():
    import numpy as np

    return np.random.default_rng(0).random(BIG_ELEMS)


# ---------------------------------------------------------------------------
# Machine reference: memcpy bandwidth
# ---------------------------------------------------------------------------

def measure_memcpy(src, samples=MEMCPY_SAMPLES):
    """(1-thread GB/s samples, 2-thread GB/s samples) copying src into a
    pre-touched, page-aligned anonymous mapping."""
    import numpy as np

    n = src.nbytes
    mm = mmap.mmap(-1, n)
    try:
        dst = np.frombuffer(mm, dtype=src.dtype)
        dst.fill(0.0)                                   # touch every page first
        one, two = [], []
        np.copyto(dst, src)                             # warm-up
        for _ in range(samples):
            t0 = perf()
            np.copyto(dst, src)
            one.append(n / (perf() - t0) / GB)
        half = len(src) // 2
        parts = [(dst[:half], src[:half]), (dst[half:], src[half:])]
        for i in range(samples + 1):
            go = threading.Barrier(3)
            ts = [threading.Thread(target=_copy_after, args=(go, d, s)) for d, s in parts]
            for t in ts:
                t.start()
            go.wait()
            t0 = perf()
            for t in ts:
                t.join()
            dt = perf() - t0
            if i:                                       # first one is a warm-up
                two.append(n / dt / GB)
        if not np.array_equal(dst[:: 1 << 16], src[:: 1 << 16]):
            raise RuntimeError("memcpy check failed")
        del dst, parts
        return one, two
    finally:
        try:
            mm.close()
        except BufferError:     # a view still alive; the mapping goes with it
            pass


def _copy_after(barrier, dst, src):
    import numpy as np

    barrier.wait()
    np.copyto(dst, src)


# ---------------------------------------------------------------------------
# Probe for "put, first of a session": a fresh process.
# ---------------------------------------------------------------------------

def probe_main(backend):
    ray = import_backend(backend)
    x = make_big_array()                 # created BEFORE init
    t0 = perf()
    do_init(ray)
    init_s = perf() - t0
    t0 = perf()
    ref = ray.put(x)
    put_s = perf() - t0
    del ref
    ray.shutdown()
    sys.stdout.write(json.dumps({"put_s": put_s, "init_s": init_s}) + "\n")
    sys.stdout.flush()


def run_probe(backend, timeout):
    cmd = [sys.executable, os.path.abspath(__file__), "--backend", backend, "--put-probe"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=None, text=True, cwd=REPO_ROOT)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_tree(p.pid)
        p.communicate()
        raise
    if p.returncode != 0:
        raise RuntimeError(f"put probe exited with status {p.returncode}")
    return json.loads(out.strip().splitlines()[-1])


def _kill_tree(pid):
    try:
        import psutil

        root = psutil.Process(pid)
        procs = root.children(recursive=True) + [root]
    except Exception:
        procs = []
    for q in procs:
        try:
            q.kill()
        except Exception:
            pass


# ---------------------------------------------------------------------------
# Helpers: process memory, where an address lives, store usage
# ---------------------------------------------------------------------------

def driver_memory() -> dict[str, float]:
    """This process's RSS and its split (MiB), from /proc/self/status."""
    out = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                    out[k] = int(v.split()[0]) / 1024.0
    except OSError:
        import psutil

        out["VmRSS"] = psutil.Process().memory_info().rss / 2**20
    return out


def mapping_of(addr: int) -> dict[str, str] | None:
    """The /proc/self/maps line that holds addr: {'perms', 'path'}."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                lo, hi = (int(h, 16) for h in parts[0].split("-"))
                if lo <= addr < hi:
                    return {"perms": parts[1], "path": parts[5].strip() if len(parts) > 5 else "",
                            "size_mib": round((hi - lo) / 2**20, 1)}
    except OSError:
        pass
    return None


def is_store_mapping(mp: dict[str, str] | None) -> bool:
    if not mp:
        return False
    path = mp["path"]
    return path.startswith("/memfd:") or path.startswith("/dev/shm") or "plasma" in path


class StoreUsage:
    """Bytes the object store holds right now, or None where the backend
    exposes nothing reliable."""

    def __init__(self, ray, backend):
        self.ray = ray
        self.backend = backend
        self.how = None
        self._captured: list[str] = []
        if backend == "meshrt":
            self.how = "capacity - available_resources()['object_store_memory']"
            try:
                self.capacity = int(ray.cluster_resources()["object_store_memory"])
            except Exception:
                self.capacity = STORE_BYTES
        else:
            try:
                self.cw = ray._private.worker.global_worker.core_worker
                self.logger = logging.getLogger("ray._raylet")
                if self.read() is not None:
                    self.how = "core_worker.log_plasma_usage(): bytes in use + bytes evictable"
            except Exception as e:
                log(f"  no plasma usage for Ray: {type(e).__name__}: {e}")
                self.how = None

    def read(self) -> int | None:
        if self.backend == "meshrt":
            return self.capacity - int(self.ray.available_resources()["object_store_memory"])
        if not hasattr(self, "cw"):
            return None
        cap = self._captured

        class _Grab(logging.Filter):
            def filter(self, record):
                msg = record.getMessage()
                if "Plasma Store Usage" in msg:
                    cap.append(msg)
                    return False        # swallow it: not for the console
                return True

        flt = _Grab()
        self.logger.addFilter(flt)
        try:
            cap.clear()
            self.cw.log_plasma_usage()
        finally:
            self.logger.removeFilter(flt)
        if not cap:
            return None
        text = cap[-1]
        got = {k: int(v) for k, v in re.findall(r"bytes (in use|evictable|unsealed): (\d+)", text)}
        if "in use" not in got:
            return None
        return got["in use"] + got.get("evictable", 0)


# ---------------------------------------------------------------------------
# Context and metrics
# ---------------------------------------------------------------------------

class Ctx:
    def __init__(self, ray, args, writer, backend, x):
        self.ray = ray
        self.args = args
        self.writer = writer
        self.backend = backend
        self.repeat = args.repeat
        self.dur = args.duration
        self.x = x
        self.puts_done = 0          # puts of the big array so far in this session
        self.Sink = ray.remote(_Sink)

    def rec(self, key, value, **info):
        self.writer.sample(key, value, **info)
        m = METRIC_BY_KEY[key]
        log(f"  {key}: {fmt(m, value)} {m.unit}"
            + (f"  ({', '.join(f'{k}={v}' for k, v in info.items())})" if info else ""))


def kill_actors(ray, actors):
    kill = getattr(ray, "kill", None)
    for a in actors:
        if kill is None:
            break
        try:
            kill(a)
        except Exception as e:
            log(f"kill() failed: {type(e).__name__}: {e}")
    actors.clear()


def latency_rounds(fn, min_time, min_rounds=20):
    lat = []
    t_end = perf() + min_time
    while len(lat) < min_rounds or perf() < t_end:
        t0 = perf()
        fn()
        lat.append(perf() - t0)
    return sorted(lat)


def m_put_warm(ctx):
    ray, x = ctx.ray, ctx.x
    while ctx.puts_done < 2:            # the first two puts of the session are not timed
        ref = ray.put(x)
        del ref
        ctx.puts_done += 1
    for _ in range(ctx.repeat * PUTS_PER_REPEAT):
        t0 = perf()
        ref = ray.put(x)
        dt = perf() - t0
        del ref
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

    def one():
        ray.get(ref)

    latency_rounds(one, min(0.3, ctx.dur))
    for _ in range(ctx.repeat):
        lat = latency_rounds(one, ctx.dur, 50)
        ctx.rec("get_small_ms", bl.median(lat) * 1e3, n=len(lat),
                p10_ms=round(lat[len(lat) // 10] * 1e3, 4), p90_ms=round(lat[(len(lat) * 9) // 10] * 1e3, 4))


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

    def one():
        ray.get(ref)

    latency_rounds(one, min(0.3, ctx.dur))
    for _ in range(ctx.repeat):
        lat = latency_rounds(one, ctx.dur)
        ctx.rec("get_large_ms", bl.median(lat) * 1e3, n=len(lat),
                p10_ms=round(lat[len(lat) // 10] * 1e3, 4), p90_ms=round(lat[(len(lat) * 9) // 10] * 1e3, 4))


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
    ray = ctx.ray
    obj = SMALL_OBJECT

    def loop(min_time):
        n = 0
        t0 = perf()
        while True:
            ray.put(obj)        # ref dropped at once
            n += 1
            el = perf() - t0
            if el >= min_time:
                return n / el, n

    loop(min(0.3, ctx.dur))
    for _ in range(ctx.repeat):
        rate, n = loop(ctx.dur)
        ctx.rec("small_puts", rate, n=n)


def m_cycles(ctx):
    import numpy as np

    ray = ctx.ray
    cycles = CYCLES_QUICK if ctx.args.quick else CYCLES
    usage = StoreUsage(ray, ctx.backend)
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
# Child: runs all (or --only) groups against one backend.
# ---------------------------------------------------------------------------

def child_main(args):
    backend = args.backend
    writer = bl.ResultWriter(args.json_out, backend)
    writer.flush()
    groups = [g for g in RUN_ORDER if g in args.only] if args.only else list(RUN_ORDER)
    watchdog = bl.Watchdog(writer)

    try:
        ray = import_backend(backend)
    except BaseException as e:
        log(f"[{backend}] cannot import: {type(e).__name__}: {e}")
        missing = isinstance(e, ModuleNotFoundError) and e.name == ("meshrt" if backend == "meshrt" else "ray")
        writer.set(import_error=f"{type(e).__name__}: {e}", module_missing=missing, running=None)
        return 3
    lacking = [n for n in REQUIRED_API if not callable(getattr(ray, n, None))]
    if lacking:
        msg = f"module {ray.__name__} ({getattr(ray, '__file__', None) or 'namespace package'}) lacks " \
              + ", ".join(lacking)
        log(f"[{backend}] not usable yet: {msg}")
        writer.set(import_error=msg, module_missing=True, running=None)
        return 3
    writer.set(version=backend_version(ray), module_file=getattr(ray, "__file__", None))
    log(f"[{backend}] imported {ray.__name__} {backend_version(ray)}")

    x = make_big_array()                  # before init (put_first needs that)

    # 1. Machine reference, before anything of the runtime runs.
    if "memcpy" in groups:
        writer.start("memcpy_1t")
        watchdog.arm("memcpy_1t", args.metric_timeout)
        try:
            one, two = measure_memcpy(x)
            for v in one:
                writer.sample("memcpy_1t", v)
            for v in two:
                writer.sample("memcpy_2t", v)
            log(f"[{backend}] memcpy 256 MiB: 1 thread {bl.median(one):.2f} GB/s, "
                f"2 threads {bl.median(two):.2f} GB/s (median of {len(one)})")
        except Exception as e:
            traceback.print_exc()
            writer.error("memcpy_1t", f"{type(e).__name__}: {e}")
        finally:
            watchdog.disarm()
            writer.done("memcpy_1t")

    # 2. put, first of a session: probes in fresh processes before our own init.
    if "put_first" in groups:
        writer.start("put_first")
        for i in range(args.repeat - 1):
            log(f"[{backend}] put probe {i + 1}/{args.repeat - 1} (fresh process)")
            try:
                r = run_probe(backend, args.metric_timeout)
            except Exception as e:
                log(f"  put probe failed ({type(e).__name__}: {e}); no more probes")
                if isinstance(e, subprocess.TimeoutExpired):
                    writer.error("put_first", f"probe timeout after {args.metric_timeout} s")
                break
            writer.sample("put_first", BIG_BYTES / r["put_s"] / GB, ms=round(r["put_s"] * 1e3, 1),
                          probe=True)
            log(f"  put_first: {BIG_BYTES / r['put_s'] / GB:.2f} GB/s ({r['put_s'] * 1e3:.1f} ms; "
                f"init {r['init_s']:.2f} s)")

    # 3. init, then (if wanted) the session's first put.
    init_key = "put_first" if "put_first" in groups else "_init"
    watchdog.arm(init_key, args.metric_timeout)
    try:
        t0 = perf()
        do_init(ray)
        init_s = perf() - t0
        writer.sample("init_s", init_s)
        log(f"[{backend}] init {init_s:.2f} s")
        ctx = Ctx(ray, args, writer, backend, x)
        if "put_first" in groups:
            t0 = perf()
            ref = ray.put(x)
            dt = perf() - t0
            del ref
            ctx.puts_done += 1
            ctx.rec("put_first", BIG_BYTES / dt / GB, ms=round(dt * 1e3, 1), probe=False)
        writer.note_descendants()
    except Exception as e:
        traceback.print_exc()
        msg = f"{type(e).__name__}: {e}"
        for g in groups:
            for k in GROUP_KEYS.get(g, []):
                if k not in DERIVED and not (g == "memcpy"):
                    writer.error(k, msg if k == "put_first" else "init failed: " + msg)
        writer.note_descendants()
        try:
            ray.shutdown()
        except Exception:
            pass
        return 4
    finally:
        watchdog.disarm()
        writer.done(init_key)

    # 4. The other groups.
    for g in groups:
        if g not in GROUP_FUNCS:
            continue
        key = GROUP_KEYS[g][0]
        log(f"[{backend}] {g}")
        writer.start(key)
        watchdog.arm(key, args.metric_timeout)
        try:
            GROUP_FUNCS[g](ctx)
        except Exception as e:
            log(f"[{backend}] {g} FAILED: {type(e).__name__}: {e}")
            traceback.print_exc()
            writer.error(key, f"{type(e).__name__}: {e}")
        finally:
            watchdog.disarm()
            writer.done(key)
            gc.collect()

    # 5. Shutdown.
    watchdog.arm("_shutdown", args.metric_timeout)
    try:
        ray.shutdown()
    except Exception:
        traceback.print_exc()
    finally:
        watchdog.disarm()
    return 0


# ---------------------------------------------------------------------------
# Parent
# ---------------------------------------------------------------------------

def _group_done(metrics, g):
    """A group counts as done when its first metric has a result or an error."""
    m = metrics.get(GROUP_KEYS[g][0])
    return m is not None and (m.get("samples") or m.get("error"))


def run_backend(backend, args):
    wanted = [g for g in RUN_ORDER if not args.only or g in args.only]
    out = {"state": "ok", "version": None, "metrics": {}, "runs": []}
    remaining = list(wanted)
    restarts = 0
    while remaining:
        fd, tmp = tempfile.mkstemp(prefix=f"objstore-{backend}-", suffix=".json")
        os.close(fd)
        cmd = [sys.executable, os.path.abspath(__file__), "--backend", backend, "--child", "--json-out", tmp,
               "--repeat", str(args.repeat), "--duration", str(args.duration), "--settle", str(args.settle),
               "--metric-timeout", str(args.metric_timeout), "--only", ",".join(remaining)]
        if args.quick:
            cmd.append("--quick")
        log(f"starting {backend} child: {' '.join(shlex.quote(c) for c in cmd)}")
        load_before = _loadavg()
        busy = _foreign_cpu_busy()
        if busy is not None and busy > 15:
            log(f"WARNING: CPU {busy:.0f}% busy with other work just before the {backend} run "
                f"(load average {load_before}); expect noisy numbers")
        t0 = perf()
        rc = None
        try:
            p = subprocess.run(cmd, stdout=sys.stderr, stderr=None, cwd=REPO_ROOT, timeout=args.child_timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
            log(f"{backend} child exceeded --child-timeout {args.child_timeout} s; killed")
        wall = perf() - t0
        try:
            with open(tmp) as f:
                data = json.load(f)
        except Exception:
            data = {"metrics": {}, "running": None}
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        log(f"{backend} child finished: rc={rc}, {wall:.1f} s")
        leftovers = bl.reap_leftovers(data.get("descendants", []), grace=3.0 if rc == 0 else 1.0)
        if leftovers:
            log(f"{backend}: {len(leftovers)} process(es) outlived the child (rc={rc}); killed: "
                + "; ".join(f"{d['pid']} {d['cmd'][:60]}" for d in leftovers))
        out["runs"].append({"cmd": cmd, "rc": rc, "wall_s": round(wall, 1), "pid": data.get("pid"),
                            "cpu_busy_before_pct": busy, "loadavg_before": load_before,
                            "loadavg_after": _loadavg(), "leftover_processes_killed": leftovers})
        if data.get("import_error"):
            out["state"] = "n/a" if data.get("module_missing") else "error"
            out["import_error"] = data["import_error"]
            return out
        out["version"] = out["version"] or data.get("version")
        out["python"] = data.get("python")
        out["module_file"] = data.get("module_file")
        for k, v in data.get("metrics", {}).items():
            if k not in METRIC_BY_KEY:
                continue
            prev = out["metrics"].get(k)
            if prev is None:
                out["metrics"][k] = v
            else:
                prev["samples"] += v.get("samples", [])
                prev["median"] = bl.median(prev["samples"])
                prev["error"] = prev.get("error") or v.get("error")
        running = data.get("running")
        if rc != 0 and running and running in out["metrics"]:
            m = out["metrics"][running]
            if not m.get("error"):
                m["error"] = f"child process died during this metric (rc={rc})"
        if rc == 0:
            break
        remaining = [g for g in remaining if not _group_done(out["metrics"], g)]
        if rc == 4:     # init failed cleanly: restarting won't help
            break
        if remaining and restarts < args.max_restarts:
            restarts += 1
            log(f"{backend}: restarting child for the remaining groups: {', '.join(remaining)}")
            time.sleep(2.0)
            continue
        break
    for g in wanted:
        for k in GROUP_KEYS[g]:
            if k not in out["metrics"] and k not in DERIVED and k not in ("init_s", "memcpy_2t"):
                out["metrics"][k] = {"samples": [], "median": None, "info": {},
                                     "error": "not run" if g in remaining or not out["runs"]
                                     or out["runs"][-1]["rc"] == 0 else
                                     f"not run (child rc={out['runs'][-1]['rc']})"}
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
    return out


def _loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _foreign_cpu_busy(interval=1.0):
    try:
        import psutil

        return psutil.cpu_percent(interval=interval)
    except Exception:
        return None


# ---------------------------------------------------------------------------
# Report rendering
# ---------------------------------------------------------------------------

def fmt(m: OMetric, v) -> str:
    if v is None:
        return "-"
    if m.fmt is not None and isinstance(v, (int, float)):
        return m.fmt(v)
    return bl.fmt_value(m, v)


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
    s = fmt(m, res["median"])
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


def render_text(report) -> str:
    rows = build_rows(report)
    widths = [max(len(HEADER[i]), *(len(r[i]) for r in rows)) if rows else len(HEADER[i])
              for i in range(len(HEADER))]
    align = ["<", ">", ">", ">", "<"]

    def line(cells):
        return " | ".join(f"{c:{a}{w}}" for c, a, w in zip(cells, align, widths, strict=True))

    out = [line(HEADER), "-+-".join("-" * w for w in widths)] + [line(r) for r in rows]
    mi, a = report["machine"], report["args"]
    out += ["", f"medians over {a['repeat']} repetition(s){' (quick mode)' if a['quick'] else ''}; "
            f"{mi['cores']} cores ({mi['cpu']}), Python {mi['python']}; {bl._versions(report)}; "
            f"CPU busy before: {bl._loads(report)}; {mi['date']}; total {report.get('total_wall_s')} s"]
    return "\n".join(out)


def render_markdown(report) -> str:
    mi, a = report["machine"], report["args"]
    rows = build_rows(report)
    out = [
        f"Command: `{report['command']}`",
        "",
        f"- Date: {mi['date']}",
        f"- Machine: {mi['cores']} cores ({mi['cpu']}), {mi['mem_gib']} GiB RAM, {mi['platform']}",
        f"- Python: {mi['python']}",
        f"- Libraries: {bl._versions(report)}" + (f", torch {a['torch']}" if a.get("torch") else "")
        + (f", numpy {a['numpy']}" if a.get("numpy") else ""),
        f"- Other work on the machine (CPU busy in the 1 s before each backend's run): {bl._loads(report)}",
        f"- Method: medians over {a['repeat']} repetition(s){' (quick mode)' if a['quick'] else ''}; "
        f"each backend in its own fresh process, `init(num_cpus=4, object_store_memory=4 << 30)` for both; "
        f"GB = 10^9 bytes; memcpy measured in each backend's process before `init` (machine reference); "
        f"ratio is meshrt's improvement factor over Ray (> 1 = meshrt better); absolute checks "
        f"(RSS growth, store usage, ÷ memcpy, zero-copy) are judged on meshrt's value. "
        f"Details: docstring of `benchmarks/objstore.py`.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join(["---", "--:", "--:", "--:", "---"]) + "|",
    ]
    for r in rows:
        r = [c.replace(">=", "≥").replace("<=", "≤").replace("[ok]", "✅").replace("[MISS]", "❌")
             .replace("[FAIL]", "❌").replace("|", "\\|") for c in r]
        out.append("| " + " | ".join(r) + " |")
    return "\n".join(out) + "\n"


def output_report(report, args):
    sys.stdout.write("\n" + render_text(report) + "\n")
    if args.markdown is not None:
        md = render_markdown(report)
        if args.markdown == "-":
            sys.stdout.write("\n" + md)
        else:
            os.makedirs(os.path.dirname(os.path.abspath(args.markdown)), exist_ok=True)
            with open(args.markdown, "w") as f:
                f.write(md)
            log(f"markdown written to {args.markdown}")
    sys.stdout.flush()


def _lib_version(name):
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


def parent_main(args):
    backends = ["meshrt", "ray"] if args.backend == "both" else [args.backend]
    report = {
        "command": "python " + " ".join(shlex.quote(a) for a in
                                        [os.path.relpath(os.path.abspath(sys.argv[0]), REPO_ROOT)] + sys.argv[1:]),
        "machine": bl.machine_info(),
        "args": {"backend": args.backend, "repeat": args.repeat, "quick": args.quick, "duration": args.duration,
                 "settle": args.settle, "only": args.only, "num_cpus": NUM_CPUS,
                 "object_store_memory": STORE_BYTES, "big_bytes": BIG_BYTES, "torch_bytes": TORCH_BYTES,
                 "cycles": CYCLES_QUICK if args.quick else CYCLES, "puts_per_repeat": PUTS_PER_REPEAT,
                 "numpy": _lib_version("numpy"), "torch": _lib_version("torch")},
        "backends": {},
    }
    t_all = perf()
    for b in backends:
        report["backends"][b] = run_backend(b, args)
        if b != backends[-1]:
            time.sleep(2.0)
    report["total_wall_s"] = round(perf() - t_all, 1)
    report["medians"] = {b: {k: v.get("median") for k, v in info.get("metrics", {}).items()}
                         for b, info in report["backends"].items()}
    report["ratios"] = compute_ratios(report)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1, default=str)
    log(f"total {report['total_wall_s']} s; raw results written to {args.json}")
    output_report(report, args)
    return 0


def parse_only(s):
    if not s:
        return None
    keys = [k.strip() for k in s.split(",") if k.strip()]
    bad = [k for k in keys if k not in RUN_ORDER]
    if bad:
        raise SystemExit(f"--only: unknown group(s) {bad}; choose from {RUN_ORDER}")
    return keys


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["meshrt", "ray", "both"], default="both")
    ap.add_argument("--repeat", type=int, default=None, help="repetitions per metric (default 3, --quick 1)")
    ap.add_argument("--quick", action="store_true",
                    help=f"fast smoke run: 1 repetition, 0.25 s loops, 1 s settle, {CYCLES_QUICK:,} cycles")
    ap.add_argument("--duration", type=float, default=None,
                    help="minimum timed seconds per repetition of a latency/throughput loop "
                         "(default 1.0, --quick 0.25)")
    ap.add_argument("--settle", type=float, default=None,
                    help="seconds to settle before reading RSS / store usage (default 2, --quick 1)")
    ap.add_argument("--only", type=str, default=None, help=f"comma-separated subset of: {','.join(RUN_ORDER)}")
    ap.add_argument("--json", default=os.path.join(HERE, "results", "objstore.json"),
                    help="where to write raw results")
    ap.add_argument("--markdown", nargs="?", const=os.path.join(HERE, "results", "objstore.md"), default=None,
                    metavar="PATH", help="also write the table as markdown (default PATH "
                                         "benchmarks/results/objstore.md; '-' = stdout)")
    ap.add_argument("--render", default=None, metavar="JSON", help="only re-print the table of an earlier run")
    ap.add_argument("--metric-timeout", type=float, default=180.0, help="watchdog per group, seconds")
    ap.add_argument("--child-timeout", type=float, default=900.0, help="hard limit per child process, seconds")
    ap.add_argument("--max-restarts", type=int, default=2, help="child restarts after a crash/hang")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json-out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--put-probe", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if args.duration is None:
        args.duration = 0.25 if args.quick else 1.0
    if args.settle is None:
        args.settle = 1.0 if args.quick else 2.0
    args.repeat = max(1, args.repeat)
    if isinstance(args.only, str):
        args.only = parse_only(args.only)

    if args.put_probe:
        probe_main(args.backend)
        return 0
    if args.child:
        if args.backend == "both":
            raise SystemExit("--child needs --backend meshrt|ray")
        return child_main(args)
    if args.render:
        with open(args.render) as f:
            report = json.load(f)
        output_report(report, args)
        return 0
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())

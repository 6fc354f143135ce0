#!/usr/bin/env python
"""Core micro-benchmarks: meshrt vs Ray, driven by the same code.

    python benchmarks/core.py                       # both backends, 5 repeats
    python benchmarks/core.py --backend ray --repeat 3
    python benchmarks/core.py --backend meshrt --quick
    python benchmarks/core.py --backend meshrt --ray-from benchmarks/results/core.json
    python benchmarks/core.py --render benchmarks/results/core.json --markdown

Each backend runs in its own fresh subprocess
(``<python> benchmarks/core.py --backend X --child --json-out TMP``) that does
``import meshrt as ray`` or ``import ray`` and then uses only the Ray API.
The parent collects the results and prints one table (stdout); progress and
the backends' own logs go to stderr.  Raw samples and medians are written to
``--json`` (default benchmarks/results/core.json).

Method:
  * ``init(num_cpus=4)`` for both backends, nothing else (no Ray-only kwargs).
  * "init until first result": wall time of ``init()`` + ``get(f.remote())``
    in a fresh process (module import excluded, reported separately).  With
    --repeat N, N-1 samples come from short-lived probe processes run before
    the child's own init, and the child's own init is the N-th sample.
  * Throughput metrics: warm-up first, then per repetition a loop timed with
    time.perf_counter that runs for at least --duration seconds (whole
    batches for the "N submitted" metrics, so Ray's slower batches simply run
    longer); the reported value is the median over the repetitions.
  * asyncio metric: one actor with ``async def m``; each repetition is its own
    ``asyncio.run`` that awaits ``asyncio.gather`` of 100 ``a.m.remote()``
    refs at a time (the sequential ``await a.m.remote()`` variant is an
    info row).  Small puts: ``put(b"x" * 100)``, the ref dropped at once.
  * "call to 8 actors, gathered": per repetition the median round latency of
    many rounds (>= 20, ~--duration s); reported: median over repetitions.
  * Idle RSS: the 4 actors of the last "create 4 actors" repetition, after
    they answered, 2 s settle, then sum of RSS of the driver process plus
    psutil children(recursive=True); median of 3 readings 0.25 s apart.
  * Every metric creates and kills its own actors (idle RSS reuses the last
    "create 4 actors" set, or makes its own when run alone) and
    runs under a watchdog (--metric-timeout); a metric that fails shows
    "error", a hung/crashed child is restarted for the remaining metrics.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import _benchlib as bl  # noqa: E402
import _harness as h  # noqa: E402
from _harness import kill_actors, log  # noqa: E402

perf = time.perf_counter

NUM_CPUS = 4
ASYNC_TASK_BATCH = 2000
ASYNC_ACTOR_BATCH = 5000
FOUR_ACTOR_BATCH = 4000      # round-robin over 4 actors -> 1000 calls each
ASYNCIO_CHUNK = 100          # refs per asyncio.gather in the asyncio metric
SMALL_OBJECT = b"x" * 100    # the "small object" for put()

Metric = bl.Metric

# Display order.  Metrics with target=None are informational.
METRICS: list[Metric] = [
    Metric("init_s", "init until first result (s)", "s", False, 10, ">= 10x faster", 2),
    Metric("create4_s", "create 4 actors, one result each (s)", "s", False, 20, ">= 20x faster", 3),
    Metric("sync_tasks", "sync task round trips/s", "/s", True, 4, ">= 4x"),
    Metric("async_tasks", "async tasks/s (2000 submitted)", "/s", True, 5, ">= 5x"),
    Metric("sync_actor", "sync actor calls/s", "/s", True, 3, ">= 3x"),
    Metric("async_actor", "async actor calls/s (5000 submitted)", "/s", True, 8, ">= 8x"),
    Metric("asyncio_actor", "async-actor calls/s awaited from driver asyncio", "/s", True, 5, ">= 5x"),
    Metric("four_actors", "1 driver -> 4 actors calls/s", "/s", True, 5, ">= 5x"),
    Metric("small_puts", "small puts/s", "/s", True, 20, ">= 20x"),
    Metric("gather8_ms", "call to 8 actors, gathered (ms)", "ms", False, 4, ">= 4x faster", 2),
    Metric("idle_rss_mib", "idle RSS of all runtime processes, 4 actors (MiB)", "MiB", False, 3,
           "<= 1/3 (>= 3x)", 0),
    # --- informational, no target -------------------------------------------
    Metric("import_s", "info: import of the module (s)", "s", False, None, "-", 3),
    Metric("asyncio_seq", "info: async-actor calls/s, sequential await from asyncio", "/s", True),
    Metric("idle_pss_mib", "info: idle PSS of all runtime processes, 4 actors (MiB)", "MiB", False, None,
           "-", 0),
    Metric("idle_procs", "info: runtime processes (driver + descendants), 4 actors", "procs", False, None,
           "-", 0),
    Metric("shutdown_s", "info: shutdown() (s)", "s", False, None, "-", 2),
    Metric("env_first_s", "info: task in a new runtime_env (env_vars), first result (s)", "s",
           False, None, "-", 3),
    Metric("env_tasks", "info: task round trips/s in a runtime_env (env_vars)", "/s", True),
]

# Order in which the child runs the metrics (init always first).
RUN_ORDER = [
    "init_s", "create4_s", "idle_rss_mib", "sync_tasks", "async_tasks", "sync_actor",
    "async_actor", "asyncio_actor", "asyncio_seq", "four_actors", "small_puts", "gather8_ms",
    "env_first_s", "env_tasks",
]


# ---------------------------------------------------------------------------
# Remote bodies.  Top-level in __main__ so that cloudpickle ships them by
# value; they must not reference anything else in this module.
# ---------------------------------------------------------------------------

def _noop():
    return 1


def _env_probe():
    import os

    return os.environ.get("BENCH_ENV")


class _Actor:
    def __init__(self):
        self.n = 0

    def m(self):
        self.n += 1
        return self.n


class _AsyncActor:
    def __init__(self):
        self.n = 0

    async def m(self):
        self.n += 1
        return self.n


def do_init(ray):
    # Same arguments for both backends.  No Ray-only kwargs are passed (Ray
    # keeps its defaults, dashboard included).
    ray.init(num_cpus=NUM_CPUS)


def init_until_first_result(ray):
    """Seconds for init() + get() of one trivial task."""
    noop = ray.remote(_noop)
    t0 = perf()
    do_init(ray)
    ray.get(noop.remote())
    return perf() - t0


def probe_main(backend):
    """Init probe: a fresh process that times init() + first trivial result."""
    t0 = perf()
    ray = h.import_backend(backend)
    import_s = perf() - t0
    init_s = init_until_first_result(ray)
    t0 = perf()
    ray.shutdown()
    shutdown_s = perf() - t0
    sys.stdout.write(json.dumps({"import_s": import_s, "init_s": init_s, "shutdown_s": shutdown_s}) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------------------
# Metrics.  Each takes a Ctx and records its samples via ctx.rec().
# ---------------------------------------------------------------------------

class Ctx(h.Ctx):
    def __init__(self, c):
        super().__init__(c)
        self.noop = c.ray.remote(_noop)
        self.Actor = c.ray.remote(_Actor)
        self.AsyncActor = c.ray.remote(_AsyncActor)
        self.live4 = None   # the last "create 4 actors" set, for idle RSS


def make_actors(ray, cls, n):
    actors = [cls.remote() for _ in range(n)]
    ray.get([a.m.remote() for a in actors])
    return actors


def m_create4(ctx):
    ray = ctx.ray
    for i in range(ctx.repeat):
        t0 = perf()
        actors = [ctx.Actor.remote() for _ in range(4)]
        ray.get([a.m.remote() for a in actors])
        ctx.rec("create4_s", perf() - t0)
        if i == ctx.repeat - 1:
            ctx.live4 = actors          # kept alive for the idle RSS metric
        else:
            kill_actors(ray, actors)
            time.sleep(1.0)             # let the killed actors go away


def m_idle_rss(ctx):
    ray = ctx.ray
    actors, ctx.live4 = ctx.live4, None
    if actors is None:
        actors = make_actors(ray, ctx.Actor, 4)
    try:
        ray.get([a.m.remote() for a in actors])     # all 4 have answered
        time.sleep(ctx.args.settle)
        readings = []
        for _ in range(3):
            readings.append(bl.process_tree_memory())
            time.sleep(0.25)
        rss = bl.median([r["rss_mib"] for r in readings])
        ctx.rec("idle_rss_mib", rss)
        pss = bl.median([r["pss_mib"] for r in readings if r["pss_mib"] is not None])
        if pss is not None:
            ctx.rec("idle_pss_mib", pss)
        ctx.rec("idle_procs", bl.median([r["nprocs"] for r in readings]))
        ctx.writer.info("idle_rss_mib", readings_mib=[round(r["rss_mib"], 1) for r in readings],
                        processes=readings[-1]["procs"])
        for line in readings[-1]["procs"]:
            log(f"    pid {line['pid']:>7} rss {line['rss_mib']:8.1f} MiB  pss {line['pss_mib']}  {line['cmd'][:90]}")
    finally:
        kill_actors(ray, actors)



def m_sync_tasks(ctx):
    ray, f = ctx.ray, ctx.noop
    ctx.rate("sync_tasks", lambda: ray.get(f.remote()))


def m_async_tasks(ctx):
    ray, f = ctx.ray, ctx.noop

    def batch(n=ASYNC_TASK_BATCH):
        ray.get([f.remote() for _ in range(n)])

    ctx.batch_rate("async_tasks", batch, ASYNC_TASK_BATCH, warmup=500)   # warm-up spins up task workers


def m_sync_actor(ctx):
    ray = ctx.ray
    actors = make_actors(ray, ctx.Actor, 1)
    a = actors[0]
    try:
        ctx.rate("sync_actor", lambda: ray.get(a.m.remote()))
    finally:
        kill_actors(ray, actors)


def m_async_actor(ctx):
    ray = ctx.ray
    actors = make_actors(ray, ctx.Actor, 1)
    a = actors[0]
    try:
        def batch(n=ASYNC_ACTOR_BATCH):
            ray.get([a.m.remote() for _ in range(n)])

        ctx.batch_rate("async_actor", batch, ASYNC_ACTOR_BATCH, warmup=500)
    finally:
        kill_actors(ray, actors)


def _asyncio_metric(ctx, key, gathered):
    ray = ctx.ray
    actors = make_actors(ray, ctx.AsyncActor, 1)
    a = actors[0]

    async def chunked(min_time):
        n = 0
        t0 = perf()
        while True:
            await asyncio.gather(*[a.m.remote() for _ in range(ASYNCIO_CHUNK)])
            n += ASYNCIO_CHUNK
            el = perf() - t0
            if el >= min_time:
                return n / el, n

    async def sequential(min_time):
        n = 0
        t0 = perf()
        while True:
            await a.m.remote()
            n += 1
            el = perf() - t0
            if el >= min_time:
                return n / el, n

    body = chunked if gathered else sequential
    try:
        asyncio.run(body(min(0.3, ctx.dur)))             # warm-up
        for _ in range(ctx.repeat):
            rate, n = asyncio.run(body(ctx.dur))        # fresh event loop per repetition
            ctx.rec(key, rate, n=n)
    finally:
        kill_actors(ray, actors)


def m_asyncio_actor(ctx):
    _asyncio_metric(ctx, "asyncio_actor", gathered=True)


def m_asyncio_seq(ctx):
    _asyncio_metric(ctx, "asyncio_seq", gathered=False)


def m_four_actors(ctx):
    ray = ctx.ray
    actors = make_actors(ray, ctx.Actor, 4)
    try:
        def batch(n=FOUR_ACTOR_BATCH):
            ray.get([actors[i % 4].m.remote() for i in range(n)])

        ctx.batch_rate("four_actors", batch, FOUR_ACTOR_BATCH, warmup=800)
    finally:
        kill_actors(ray, actors)


def m_small_puts(ctx):
    ray, obj = ctx.ray, SMALL_OBJECT
    ctx.rate("small_puts", lambda: ray.put(obj))    # ref dropped at once, as in a put-and-forget loop


def m_gather8(ctx):
    ray = ctx.ray
    actors = make_actors(ray, ctx.Actor, 8)
    try:
        ctx.latency("gather8_ms", lambda: ray.get([a.m.remote() for a in actors]), count="rounds", digits=3)
    finally:
        kill_actors(ray, actors)


def m_env_first(ctx):
    """Each repetition a new environment (its own variable's value): Ray starts a
    worker for it; meshrt applies it around the task in a pool worker. (Variables
    only: Ray takes a local working_dir only in init(), meshrt per task too.)"""
    ray = ctx.ray
    probe = ray.remote(_env_probe)
    for i in range(ctx.repeat):
        t0 = perf()
        assert ray.get(probe.options(runtime_env={"env_vars": {"BENCH_ENV": str(i)}}).remote()) == str(i)
        ctx.rec("env_first_s", perf() - t0)


def m_env_tasks(ctx):
    ray = ctx.ray
    task = ray.remote(_env_probe).options(runtime_env={"env_vars": {"BENCH_ENV": "steady"}})
    ray.get(task.remote())  # (set up once)
    ctx.rate("env_tasks", lambda: ray.get(task.remote()))


METRIC_FUNCS = {
    "create4_s": m_create4,
    "idle_rss_mib": m_idle_rss,
    "sync_tasks": m_sync_tasks,
    "async_tasks": m_async_tasks,
    "sync_actor": m_sync_actor,
    "async_actor": m_async_actor,
    "asyncio_actor": m_asyncio_actor,
    "asyncio_seq": m_asyncio_seq,
    "four_actors": m_four_actors,
    "small_puts": m_small_puts,
    "gather8_ms": m_gather8,
    "env_first_s": m_env_first,
    "env_tasks": m_env_tasks,
}


# ---------------------------------------------------------------------------
# Child: init probes, then init + first result, then the metrics.
# ---------------------------------------------------------------------------

def child_main(c):
    ray, writer = c.ray, c.writer

    def record_probe(r):
        writer.sample("import_s", r["import_s"])
        writer.sample("shutdown_s", r["shutdown_s"])
        log(f"  init_s: {r['init_s']:.3f} s (import {r['import_s']:.3f} s, "
            f"shutdown {r['shutdown_s']:.3f} s)")
        writer.sample("init_s", r["init_s"])

    # Init probes: fresh processes, run before this process starts anything.
    if "init_s" in c.items and not c.probes("init_s", record_probe):
        c.items.remove("init_s")    # a probe timed out: don't also time the in-process init
    measured = "init_s" in c.items

    def init():
        # init() + first trivial result (timed if init_s is wanted).
        init_s = init_until_first_result(ray)
        if measured:
            writer.sample("import_s", c.import_s)
            log(f"[{c.backend}] init (in child process)")
            writer.sample("init_s", init_s)
            log(f"  init_s: {init_s:.3f} s (import {c.import_s:.3f} s)")
        return Ctx(c)

    # When init_s isn't measured (a restarted child), init problems are
    # reported against the metrics instead, not against init_s.
    ctx = c.init("init_s", init, fail_keys=list(c.items))
    if ctx is None:
        return 4
    c.run(METRIC_FUNCS, ctx)
    c.shutdown("shutdown_s")
    return 0


# ---------------------------------------------------------------------------
# Table
# ---------------------------------------------------------------------------

HEADER = ["metric", "meshrt", "ray", "ratio (meshrt vs ray, >1 = meshrt better)", "target"]


def header(report):
    hdr = list(HEADER)
    if report["backends"].get("ray", {}).get("from_file"):
        hdr[2] = "ray (saved run)"
    return hdr


def _cell(metric, res, backend_state: str) -> str:
    """backend_state: 'ok' | 'n/a' (not importable) | 'error' (import failed) | 'skipped'."""
    if backend_state != "ok":
        return backend_state
    if res is None:
        return "not run"
    if res.get("median") is None:
        return "error" if res.get("error") else "not run"
    s = bl.fmt_value(metric, res["median"])
    if res.get("error"):
        s += " (partial)"
    return s


def build_rows(report) -> list[list[str]]:
    backends = report["backends"]
    rows = []
    for m in METRICS:
        cells = {}
        vals = {}
        for b in ("meshrt", "ray"):
            st = backends.get(b, {}).get("state", "skipped")
            res = backends.get(b, {}).get("metrics", {}).get(m.key)
            cells[b] = _cell(m, res, st)
            vals[b] = res.get("median") if (st == "ok" and res and not res.get("error")) else None
        if all(b not in backends or backends[b].get("state") == "skipped" for b in ("meshrt", "ray")):
            continue
        # Informational rows that no backend produced are left out.
        if m.target is None and all(vals[b] is None for b in vals):
            continue
        r = bl.improvement(m, vals["meshrt"], vals["ray"])
        ratio = "-" if r is None else bl.ratio_text(r)
        tgt = m.target_text
        if r is not None and m.target is not None:
            tgt += "  [ok]" if r >= m.target else "  [MISS]"
        rows.append([m.label, cells["meshrt"], cells["ray"], ratio, tgt])
    return rows


# ---------------------------------------------------------------------------
# The script, as the harness sees it
# ---------------------------------------------------------------------------

class CoreBench(h.Bench):
    name = "core"
    metrics = METRICS
    run_order = RUN_ORDER
    required_api = ("init", "remote", "get", "shutdown")
    probe_flag = "--init-probe"
    probe_what = "init"
    ratios_first = True
    default_repeat = 5
    metric_timeout = 120.0
    help_quick = "fast smoke run: 1 repetition, 0.25 s loops, 1 s settle"
    help_duration = ("minimum timed seconds per repetition of a throughput metric "
                     "(default 1.0, --quick 0.25)")
    help_settle = "seconds to settle before reading idle RSS (default 2)"
    markdown_const = "-"
    help_markdown = "also print the table as markdown (to stdout, or to PATH)"

    def add_arguments(self, ap):
        ap.add_argument("--ray-from", default=None, metavar="JSON",
                        help="with --backend meshrt: take the Ray column from an earlier results JSON "
                             "(clearly marked; for quick iteration, not for published numbers)")

    def child(self, c):
        return child_main(c)

    def probe(self, backend):
        probe_main(backend)

    def finish(self, out, wanted, remaining, rc):
        if rc == 4:     # init failed: the child gave every metric its error
            return
        for k in remaining:
            if k not in out["metrics"]:
                out["metrics"][k] = {"samples": [], "median": None,
                                     "error": "not run" if rc == 0 else f"not run (child rc={rc})", "info": {}}

    def report_args(self, args):
        return {"num_cpus": NUM_CPUS, "async_task_batch": ASYNC_TASK_BATCH, "async_actor_batch": ASYNC_ACTOR_BATCH,
                "four_actor_batch": FOUR_ACTOR_BATCH, "asyncio_chunk": ASYNCIO_CHUNK,
                "small_object_bytes": len(SMALL_OBJECT)}

    def after_runs(self, report, args):
        if args.ray_from and "ray" not in report["backends"]:
            with open(args.ray_from) as f:
                old = json.load(f)
            r = old["backends"]["ray"]
            r["from_file"] = os.path.abspath(args.ray_from)
            report["backends"]["ray"] = r

    def ratios(self, report):
        ratios = {}
        for m in METRICS:
            vals = {}
            for b in ("meshrt", "ray"):
                res = report["backends"].get(b, {}).get("metrics", {}).get(m.key)
                vals[b] = res.get("median") if res and not res.get("error") else None
            r = bl.improvement(m, vals["meshrt"], vals["ray"])
            if r is not None:
                ratios[m.key] = {"improvement": r, "target": m.target,
                                 "met": None if m.target is None else r >= m.target}
        return ratios

    def render_text(self, report):
        return bl.render_table(header(report), build_rows(report), bl.footer(report))

    def render_markdown(self, report):
        return bl.render_markdown(
            report, header(report), build_rows(report),
            method="each backend in its own fresh process, `init(num_cpus=4)` for both; "
                   "ratio is meshrt's improvement factor over Ray (> 1 = meshrt better).")


def main(argv=None):
    return h.main(CoreBench(), argv)


if __name__ == "__main__":
    sys.exit(main())

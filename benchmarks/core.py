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

import argparse
import asyncio
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import _benchlib as bl  # noqa: E402

perf = time.perf_counter

NUM_CPUS = 4
ASYNC_TASK_BATCH = 2000
ASYNC_ACTOR_BATCH = 5000
FOUR_ACTOR_BATCH = 4000      # round-robin over 4 actors -> 1000 calls each
ASYNCIO_CHUNK = 100          # refs per asyncio.gather in the asyncio metric
SMALL_OBJECT = b"x" * 100    # the "small object" for put()

# Order in which the child runs the metrics (init always first).
RUN_ORDER = [
    "init_s", "create4_s", "idle_rss_mib", "sync_tasks", "async_tasks", "sync_actor",
    "async_actor", "asyncio_actor", "asyncio_seq", "four_actors", "small_puts", "gather8_ms",
]
# A module without these is "not there yet" (n/a), not a failing backend.
REQUIRED_API = ("init", "remote", "get", "shutdown")


def log(msg):
    sys.stderr.write(f"[core {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


# ---------------------------------------------------------------------------
# Remote bodies.  Top-level in __main__ so that cloudpickle ships them by
# value; they must not reference anything else in this module.
# ---------------------------------------------------------------------------

def _noop():
    return 1


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


# ---------------------------------------------------------------------------
# Backend import
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
    # Same arguments for both backends.  No Ray-only kwargs are passed (Ray
    # keeps its defaults, dashboard included).
    ray.init(num_cpus=NUM_CPUS)


# ---------------------------------------------------------------------------
# Init probe: a fresh process that times init() + first trivial result.
# ---------------------------------------------------------------------------

def probe_main(backend):
    t0 = perf()
    ray = import_backend(backend)
    import_s = perf() - t0
    noop = ray.remote(_noop)
    t0 = perf()
    do_init(ray)
    ray.get(noop.remote())
    init_s = perf() - t0
    t0 = perf()
    ray.shutdown()
    shutdown_s = perf() - t0
    sys.stdout.write(json.dumps({"import_s": import_s, "init_s": init_s, "shutdown_s": shutdown_s}) + "\n")
    sys.stdout.flush()


def run_probe(backend, timeout):
    cmd = [sys.executable, os.path.abspath(__file__), "--backend", backend, "--init-probe"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=None, text=True, cwd=REPO_ROOT)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_tree(p.pid)
        p.communicate()
        raise
    if p.returncode != 0:
        raise RuntimeError(f"init probe exited with status {p.returncode}")
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
# Metric helpers
# ---------------------------------------------------------------------------

def timed_loop(fn, min_time):
    """Call fn() one at a time for at least min_time s; returns ops/s, n."""
    n = 0
    t0 = perf()
    while True:
        fn()
        n += 1
        el = perf() - t0
        if el >= min_time:
            return n / el, n


def timed_batches(batch_fn, batch_size, min_time):
    """Run whole batches for at least min_time s; returns ops/s, n."""
    n = 0
    t0 = perf()
    while True:
        batch_fn()
        n += batch_size
        el = perf() - t0
        if el >= min_time:
            return n / el, n


def kill_actors(ray, actors):
    kill = getattr(ray, "kill", None)
    for a in actors:
        if kill is None:
            break
        try:
            kill(a)
        except Exception as e:  # keep going; dropping the handle also ends it
            log(f"kill() failed: {type(e).__name__}: {e}")
    actors.clear()


def make_actors(ray, cls, n):
    actors = [cls.remote() for _ in range(n)]
    ray.get([a.m.remote() for a in actors])
    return actors


class Ctx:
    def __init__(self, ray, args, writer):
        self.ray = ray
        self.args = args
        self.writer = writer
        self.repeat = args.repeat
        self.dur = args.duration
        self.noop = ray.remote(_noop)
        self.Actor = ray.remote(_Actor)
        self.AsyncActor = ray.remote(_AsyncActor)
        self.live4 = None   # the last "create 4 actors" set, for idle RSS

    def rec(self, key, value, **info):
        self.writer.sample(key, value, **info)
        m = bl.METRIC_BY_KEY[key]
        log(f"  {key}: {bl.fmt_value(m, value)} {m.unit}"
            + (f"  ({', '.join(f'{k}={v}' for k, v in info.items())})" if info else ""))


# ---------------------------------------------------------------------------
# Metrics.  Each takes a Ctx and records its samples via ctx.rec().
# ---------------------------------------------------------------------------

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

    def one():
        ray.get(f.remote())

    timed_loop(one, min(0.3, ctx.dur))                 # warm-up
    for _ in range(ctx.repeat):
        rate, n = timed_loop(one, ctx.dur)
        ctx.rec("sync_tasks", rate, n=n)


def m_async_tasks(ctx):
    ray, f = ctx.ray, ctx.noop
    N = ASYNC_TASK_BATCH

    def batch(n=N):
        ray.get([f.remote() for _ in range(n)])

    batch(500)                                          # warm-up (spins up task workers)
    for _ in range(ctx.repeat):
        rate, n = timed_batches(batch, N, ctx.dur)
        ctx.rec("async_tasks", rate, n=n)


def m_sync_actor(ctx):
    ray = ctx.ray
    actors = make_actors(ray, ctx.Actor, 1)
    a = actors[0]
    try:
        def one():
            ray.get(a.m.remote())

        timed_loop(one, min(0.3, ctx.dur))
        for _ in range(ctx.repeat):
            rate, n = timed_loop(one, ctx.dur)
            ctx.rec("sync_actor", rate, n=n)
    finally:
        kill_actors(ray, actors)


def m_async_actor(ctx):
    ray = ctx.ray
    actors = make_actors(ray, ctx.Actor, 1)
    a = actors[0]
    N = ASYNC_ACTOR_BATCH
    try:
        def batch(n=N):
            ray.get([a.m.remote() for _ in range(n)])

        batch(500)
        for _ in range(ctx.repeat):
            rate, n = timed_batches(batch, N, ctx.dur)
            ctx.rec("async_actor", rate, n=n)
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
    N = FOUR_ACTOR_BATCH
    try:
        def batch(n=N):
            ray.get([actors[i % 4].m.remote() for i in range(n)])

        batch(800)
        for _ in range(ctx.repeat):
            rate, n = timed_batches(batch, N, ctx.dur)
            ctx.rec("four_actors", rate, n=n)
    finally:
        kill_actors(ray, actors)


def m_small_puts(ctx):
    ray = ctx.ray
    obj = SMALL_OBJECT

    def one():
        ray.put(obj)        # ref dropped at once, as in a put-and-forget loop

    timed_loop(one, min(0.3, ctx.dur))
    for _ in range(ctx.repeat):
        rate, n = timed_loop(one, ctx.dur)
        ctx.rec("small_puts", rate, n=n)


def m_gather8(ctx):
    ray = ctx.ray
    actors = make_actors(ray, ctx.Actor, 8)
    try:
        def rounds(min_time, min_rounds=20):
            lat = []
            t_end = perf() + min_time
            while len(lat) < min_rounds or perf() < t_end:
                t0 = perf()
                ray.get([a.m.remote() for a in actors])
                lat.append(perf() - t0)
            return lat

        rounds(min(0.3, ctx.dur))
        for _ in range(ctx.repeat):
            lat = sorted(rounds(ctx.dur))
            ms = bl.median(lat) * 1e3
            ctx.rec("gather8_ms", ms, rounds=len(lat),
                    p10_ms=round(lat[len(lat) // 10] * 1e3, 3), p90_ms=round(lat[(len(lat) * 9) // 10] * 1e3, 3))
    finally:
        kill_actors(ray, actors)


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
}


# ---------------------------------------------------------------------------
# Child: runs all (or --only) metrics against one backend.
# ---------------------------------------------------------------------------

def child_main(args):
    backend = args.backend
    writer = bl.ResultWriter(args.json_out, backend)
    writer.flush()
    keys = [k for k in RUN_ORDER if k in args.only] if args.only else list(RUN_ORDER)
    watchdog = bl.Watchdog(writer)

    # 1. Import the backend (starts nothing) and check that the API is there.
    t0 = perf()
    try:
        ray = import_backend(backend)
    except BaseException as e:
        log(f"[{backend}] cannot import: {type(e).__name__}: {e}")
        missing = isinstance(e, ModuleNotFoundError) and e.name == ("meshrt" if backend == "meshrt" else "ray")
        writer.set(import_error=f"{type(e).__name__}: {e}", module_missing=missing, running=None)
        return 3
    import_s = perf() - t0
    lacking = [n for n in REQUIRED_API if not callable(getattr(ray, n, None))]
    if lacking:
        # e.g. a namespace package / work in progress: treat as "not there yet".
        msg = f"module {ray.__name__} ({getattr(ray, '__file__', None) or 'namespace package'}) lacks " \
              + ", ".join(lacking)
        log(f"[{backend}] not usable yet: {msg}")
        writer.set(import_error=msg, module_missing=True, running=None)
        return 3
    writer.set(version=backend_version(ray), module_file=getattr(ray, "__file__", None))
    log(f"[{backend}] imported {ray.__name__} {backend_version(ray)} in {import_s:.3f} s")

    # 2. Init probes: fresh processes, run before this process starts anything.
    if "init_s" in keys:
        writer.start("init_s")
        for i in range(args.repeat - 1):
            log(f"[{backend}] init probe {i + 1}/{args.repeat - 1} (fresh process)")
            try:
                r = run_probe(backend, args.metric_timeout)
            except Exception as e:
                log(f"  init probe failed ({type(e).__name__}: {e}); no more probes")
                if isinstance(e, subprocess.TimeoutExpired):
                    writer.error("init_s", f"probe timeout after {args.metric_timeout} s")
                    keys.remove("init_s")   # don't also time the in-process init
                break
            writer.sample("import_s", r["import_s"])
            writer.sample("shutdown_s", r["shutdown_s"])
            log(f"  init_s: {r['init_s']:.3f} s (import {r['import_s']:.3f} s, "
                f"shutdown {r['shutdown_s']:.3f} s)")
            writer.sample("init_s", r["init_s"])

    # 3. init() + first trivial result (timed if init_s is wanted).
    ctx = None
    # When init_s isn't measured (a restarted child), init problems are
    # reported against the metrics instead, not against init_s.
    init_key = "init_s" if "init_s" in keys else "_init"
    watchdog.arm(init_key, args.metric_timeout)
    try:
        noop = ray.remote(_noop)
        t0 = perf()
        do_init(ray)
        ray.get(noop.remote())
        init_s = perf() - t0
        if "init_s" in keys:
            writer.sample("import_s", import_s)
            log(f"[{backend}] init (in child process)")
            writer.sample("init_s", init_s)
            log(f"  init_s: {init_s:.3f} s (import {import_s:.3f} s)")
        ctx = Ctx(ray, args, writer)
        writer.note_descendants()
    except Exception as e:
        traceback.print_exc()
        msg = f"{type(e).__name__}: {e}"
        for k in keys:
            writer.error(k, msg if k == "init_s" else "init failed: " + msg)
        writer.note_descendants()
        try:
            ray.shutdown()
        except Exception:
            pass
        return 4
    finally:
        watchdog.disarm()
        writer.done(init_key)

    # 4. The other metrics.
    for key in keys:
        if key == "init_s":
            continue
        log(f"[{backend}] {key}")
        writer.start(key)
        watchdog.arm(key, args.metric_timeout)
        try:
            METRIC_FUNCS[key](ctx)
        except Exception as e:
            log(f"[{backend}] {key} FAILED: {type(e).__name__}: {e}")
            traceback.print_exc()
            writer.error(key, f"{type(e).__name__}: {e}")
        finally:
            watchdog.disarm()
            writer.done(key)

    # 5. Shutdown.
    writer.start("shutdown_s")
    watchdog.arm("shutdown_s", args.metric_timeout)
    try:
        t0 = perf()
        ray.shutdown()
        writer.sample("shutdown_s", perf() - t0)
    except Exception as e:
        traceback.print_exc()
        writer.error("shutdown_s", f"{type(e).__name__}: {e}")
    finally:
        watchdog.disarm()
        writer.done("shutdown_s")
    return 0


# ---------------------------------------------------------------------------
# Parent: runs one child per backend, restarts it for the remaining metrics
# if it dies, collects, prints, writes JSON.
# ---------------------------------------------------------------------------

def run_backend(backend, args):
    """Returns {'state': 'ok'|'n/a', 'version':..., 'metrics': {...}, 'runs': [...]}."""
    wanted = [k for k in RUN_ORDER if not args.only or k in args.only]
    out = {"state": "ok", "version": None, "metrics": {}, "runs": []}
    remaining = list(wanted)
    restarts = 0
    while remaining:
        fd, tmp = tempfile.mkstemp(prefix=f"core-{backend}-", suffix=".json")
        os.close(fd)
        cmd = [sys.executable, os.path.abspath(__file__), "--backend", backend, "--child", "--json-out", tmp,
               "--repeat", str(args.repeat), "--duration", str(args.duration), "--settle", str(args.settle),
               "--metric-timeout", str(args.metric_timeout), "--only", ",".join(remaining)]
        log(f"starting {backend} child: {' '.join(shlex.quote(c) for c in cmd)}")
        load_before = _loadavg()
        busy = _foreign_cpu_busy()
        if busy is not None and busy > 15:
            log(f"WARNING: CPU {busy:.0f}% busy with other work just before the {backend} run "
                f"(load average {load_before}); expect noisy numbers")
        t0 = perf()
        rc = None
        try:
            # stdout of the child (and of the runtime it starts) goes to our
            # stderr, so that our stdout carries only the table.
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
        # Processes of the runtime that outlived the child (a clean shutdown()
        # leaves none): reported, then killed so they can't skew what follows.
        leftovers = bl.reap_leftovers(data.get("descendants", []), grace=3.0 if rc == 0 else 1.0)
        if leftovers:
            log(f"{backend}: {len(leftovers)} process(es) outlived the child (rc={rc}); killed: "
                + "; ".join(f"{d['pid']} {d['cmd'][:60]}" for d in leftovers))
        out["runs"].append({"cmd": cmd, "rc": rc, "wall_s": round(wall, 1), "pid": data.get("pid"),
                            "cpu_busy_before_pct": busy, "loadavg_before": load_before,
                            "loadavg_after": _loadavg(),
                            "leftover_processes_killed": leftovers})
        if data.get("import_error"):
            # Module absent -> "n/a"; module present but its import fails -> "error".
            out["state"] = "n/a" if data.get("module_missing") else "error"
            out["import_error"] = data["import_error"]
            return out
        out["version"] = out["version"] or data.get("version")
        out["python"] = data.get("python")
        out["module_file"] = data.get("module_file")
        for k, v in data.get("metrics", {}).items():
            if k not in bl.METRIC_BY_KEY:
                continue
            prev = out["metrics"].get(k)
            if prev is None:
                out["metrics"][k] = v
            else:   # e.g. import_s / shutdown_s from a restarted child: pool the samples
                prev["samples"] += v.get("samples", [])
                prev["median"] = bl.median(prev["samples"])
                prev["error"] = prev.get("error") or v.get("error")
        running = data.get("running")
        if rc != 0 and running and running in out["metrics"]:
            m = out["metrics"][running]
            if not m.get("error"):
                m["error"] = f"child process died during this metric (rc={rc})"
        done = set(out["metrics"])
        if rc == 0:
            for k in remaining:
                if k not in done:
                    out["metrics"][k] = {"samples": [], "median": None, "error": "not run", "info": {}}
            break
        remaining = [k for k in remaining if k not in done]
        if rc in (4,):  # init failed cleanly: restarting won't help
            break
        if remaining and restarts < args.max_restarts:
            restarts += 1
            log(f"{backend}: restarting child for the remaining metrics: {', '.join(remaining)}")
            time.sleep(2.0)
            continue
        for k in remaining:
            out["metrics"][k] = {"samples": [], "median": None, "error": f"not run (child rc={rc})", "info": {}}
        break
    return out


def _loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _foreign_cpu_busy(interval=1.0):
    """System-wide CPU busy % over `interval` s while no child of ours runs,
    i.e. work by other programs on the machine."""
    try:
        import psutil

        return psutil.cpu_percent(interval=interval)
    except Exception:
        return None


def parse_only(s):
    if not s:
        return None
    keys = [k.strip() for k in s.split(",") if k.strip()]
    bad = [k for k in keys if k not in RUN_ORDER]
    if bad:
        raise SystemExit(f"--only: unknown metric(s) {bad}; choose from {RUN_ORDER}")
    return keys


def output_report(report, args):
    text = bl.render_text(report)
    sys.stdout.write("\n" + text + "\n")
    if args.markdown is not None:
        md = bl.render_markdown(report)
        if args.markdown == "-":
            sys.stdout.write("\n" + md)
        else:
            os.makedirs(os.path.dirname(os.path.abspath(args.markdown)), exist_ok=True)
            with open(args.markdown, "w") as f:
                f.write(md)
            log(f"markdown written to {args.markdown}")
    sys.stdout.flush()


def parent_main(args):
    backends = ["meshrt", "ray"] if args.backend == "both" else [args.backend]
    report = {
        "command": "python " + " ".join(shlex.quote(a) for a in
                                        [os.path.relpath(os.path.abspath(sys.argv[0]), REPO_ROOT)] + sys.argv[1:]),
        "machine": bl.machine_info(),
        "args": {"backend": args.backend, "repeat": args.repeat, "quick": args.quick, "duration": args.duration,
                 "settle": args.settle, "only": args.only, "num_cpus": NUM_CPUS,
                 "async_task_batch": ASYNC_TASK_BATCH, "async_actor_batch": ASYNC_ACTOR_BATCH,
                 "four_actor_batch": FOUR_ACTOR_BATCH, "asyncio_chunk": ASYNCIO_CHUNK,
                 "small_object_bytes": len(SMALL_OBJECT)},
        "backends": {},
        "ratios": {},
    }
    t_all = perf()
    for b in backends:
        report["backends"][b] = run_backend(b, args)
        if b != backends[-1]:
            time.sleep(2.0)     # let the first runtime's processes disappear
    if args.ray_from and "ray" not in report["backends"]:
        with open(args.ray_from) as f:
            old = json.load(f)
        r = old["backends"]["ray"]
        r["from_file"] = os.path.abspath(args.ray_from)
        report["backends"]["ray"] = r
    report["total_wall_s"] = round(perf() - t_all, 1)
    report["medians"] = {b: {k: v.get("median") for k, v in info.get("metrics", {}).items()}
                         for b, info in report["backends"].items()}
    for m in bl.METRICS:
        vals = {}
        for b in ("meshrt", "ray"):
            res = report["backends"].get(b, {}).get("metrics", {}).get(m.key)
            vals[b] = res.get("median") if res and not res.get("error") else None
        r = bl.improvement(m, vals["meshrt"], vals["ray"])
        if r is not None:
            report["ratios"][m.key] = {"improvement": r, "target": m.target,
                                       "met": None if m.target is None else r >= m.target}
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1, default=str)
    log(f"total {report['total_wall_s']} s; raw results written to {args.json}")
    output_report(report, args)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["meshrt", "ray", "both"], default="both")
    ap.add_argument("--repeat", type=int, default=None, help="repetitions per metric (default 5, --quick 1)")
    ap.add_argument("--quick", action="store_true", help="fast smoke run: 1 repetition, 0.25 s loops, 1 s settle")
    ap.add_argument("--duration", type=float, default=None,
                    help="minimum timed seconds per repetition of a throughput metric (default 1.0, --quick 0.25)")
    ap.add_argument("--settle", type=float, default=None, help="seconds to settle before reading idle RSS (default 2)")
    ap.add_argument("--only", type=str, default=None, help=f"comma-separated subset of: {','.join(RUN_ORDER)}")
    ap.add_argument("--json", default=os.path.join(HERE, "results", "core.json"), help="where to write raw results")
    ap.add_argument("--markdown", nargs="?", const="-", default=None, metavar="PATH",
                    help="also print the table as markdown (to stdout, or to PATH)")
    ap.add_argument("--ray-from", default=None, metavar="JSON",
                    help="with --backend meshrt: take the Ray column from an earlier results JSON "
                         "(clearly marked; for quick iteration, not for published numbers)")
    ap.add_argument("--render", default=None, metavar="JSON", help="only re-print the table of an earlier run")
    ap.add_argument("--metric-timeout", type=float, default=120.0, help="watchdog per metric, seconds")
    ap.add_argument("--child-timeout", type=float, default=900.0, help="hard limit per child process, seconds")
    ap.add_argument("--max-restarts", type=int, default=2, help="child restarts after a crash/hang")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json-out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--init-probe", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.repeat is None:
        args.repeat = 1 if args.quick else 5
    if args.duration is None:
        args.duration = 0.25 if args.quick else 1.0
    if args.settle is None:
        args.settle = 1.0 if args.quick else 2.0
    args.repeat = max(1, args.repeat)
    if isinstance(args.only, str):
        args.only = parse_only(args.only)

    if args.init_probe:
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

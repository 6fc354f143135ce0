"""Process flow shared by the benchmark scripts (benchmarks/core.py,
benchmarks/objstore.py): command line, parent, child and probe processes.

A script describes itself with a Bench subclass -- its metrics, the items
(metrics or groups of metrics) that its child runs in order, the bodies of
its child and probe processes, its table -- and calls main(bench).

  parent  runs one child process per backend
          (``<python> <script> --backend X --child --json-out TMP``), restarts
          it for the items it did not finish after a crash or a hang, kills
          what the runtime left behind, writes the report (--json) and prints
          the table on stdout (progress and the backends' logs go to stderr).
  child   imports the backend (``import meshrt as ray`` or ``import ray``),
          checks its API and hands a Child to Bench.child(), which measures
          through Child's helpers: watchdog per item, probe processes, init,
          the metric loop, shutdown.  Results go to the child's result file
          after every sample (bl.ResultWriter), so they survive a crash.
  probe   ``<script> --backend X <probe flag>``: Bench.probe() times one thing
          in a fresh process and prints one JSON line.

Only the child and probe processes import the backend under test.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import _benchlib as bl  # noqa: E402

perf = time.perf_counter
_log_name = "bench"     # set by main(): the log prefix of the running script


def log(msg):
    sys.stderr.write(f"[{_log_name} {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


# ---------------------------------------------------------------------------
# What a script tells the harness
# ---------------------------------------------------------------------------

class Bench:
    """Subclasses set the attributes and override the hooks they need;
    child, probe, ratios, render_text and render_markdown are required.
    The module that defines the subclass is the script: it is re-run as
    child and probe, and its docstring is the --help text."""

    name = "bench"              # log prefix, temp-file prefix, default results/<name>.json
    metrics: list = []          # metric catalogue (bl.Metric or alike), display order
    run_order: list[str] = []   # the --only items, in the child's order
    unit = "metric"             # what an item is called in messages
    required_api = ("init", "remote", "get", "shutdown")   # lacking these: "n/a", not "error"
    probe_flag = "--probe"      # hidden flag that makes the script a probe process
    probe_what = "probe"        # its name in messages ("init" -> "init probe 1/4")
    pass_quick = False          # hand --quick on to the child
    gc_between_items = False    # gc.collect() after each item in the child
    ratios_first = False        # "ratios" before "total_wall_s" in the report (JSON key order)
    # command line
    default_repeat = 5
    metric_timeout = 120.0
    help_quick = ""
    help_duration = ""
    help_settle = ""
    markdown_const = "-"        # --markdown without PATH
    help_markdown = ""

    def __init__(self):
        module = sys.modules[type(self).__module__]
        self.script = os.path.abspath(module.__file__)
        self.doc = module.__doc__
        self.metric_by_key = {m.key: m for m in self.metrics}

    def add_arguments(self, ap: argparse.ArgumentParser):
        """Script-only flags (listed after --markdown)."""

    # -- child and probe processes -------------------------------------------
    def child(self, c: Child) -> int:
        raise NotImplementedError

    def probe(self, backend: str):
        raise NotImplementedError

    # -- parent ---------------------------------------------------------------
    def item_done(self, metrics: dict[str, Any], item: str) -> bool:
        """Whether a crashed child got through item (else a restart redoes it)."""
        return item in metrics

    def finish(self, out: dict[str, Any], wanted: list[str], remaining: list[str], rc):
        """After the last child: fill in what never ran, add derived metrics."""

    def report_args(self, args) -> dict[str, Any]:
        return {}

    def after_runs(self, report: dict[str, Any], args):
        """After all children, before totals and ratios."""

    def ratios(self, report: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    # -- report ---------------------------------------------------------------
    def render_text(self, report: dict[str, Any]) -> str:
        raise NotImplementedError

    def render_markdown(self, report: dict[str, Any]) -> str:
        raise NotImplementedError


def selected(bench: Bench, args) -> list[str]:
    return [k for k in bench.run_order if not args.only or k in args.only]


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


# ---------------------------------------------------------------------------
# Child side: what the metric functions get, and the child's steps
# ---------------------------------------------------------------------------

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


class Ctx:
    """Handed to every metric function; scripts subclass it for their state."""

    def __init__(self, c: Child):
        self.bench = c.bench
        self.backend = c.backend
        self.ray = c.ray
        self.args = c.args
        self.writer = c.writer
        self.repeat, self.dur = c.args.repeat, c.args.duration

    def rec(self, key, value, **info):
        self.writer.sample(key, value, **info)
        m = self.bench.metric_by_key[key]
        log(f"  {key}: {bl.fmt_value(m, value)} {m.unit}"
            + (f"  ({', '.join(f'{k}={v}' for k, v in info.items())})" if info else ""))

    def rate(self, key, one: Callable[[], Any]):
        """one() in a loop: warm-up, then per repetition >= --duration s; ops/s."""
        bl.timed_loop(one, min(0.3, self.dur))
        for _ in range(self.repeat):
            rate, n = bl.timed_loop(one, self.dur)
            self.rec(key, rate, n=n)

    def batch_rate(self, key, batch: Callable[..., Any], size: int, warmup: int):
        """batch(n=size) as whole batches: batch(warmup) first, then per
        repetition >= --duration s; ops/s."""
        batch(warmup)
        for _ in range(self.repeat):
            rate, n = bl.timed_batches(batch, size, self.dur)
            self.rec(key, rate, n=n)

    def latency(self, key, one: Callable[[], Any], min_rounds=20, count="n", digits=4):
        """Per repetition the median latency (ms) of one() over >= --duration s
        and >= min_rounds calls (after a warm-up), with p10/p90 as info."""
        bl.latency_rounds(one, min(0.3, self.dur))
        for _ in range(self.repeat):
            lat = bl.latency_rounds(one, self.dur, min_rounds)
            self.rec(key, bl.median(lat) * 1e3, **{count: len(lat)},
                     p10_ms=round(lat[len(lat) // 10] * 1e3, digits),
                     p90_ms=round(lat[(len(lat) * 9) // 10] * 1e3, digits))


class Child:
    """The child process's state and steps, for Bench.child()."""

    def __init__(self, bench: Bench, args, writer: bl.ResultWriter, ray, import_s: float):
        self.bench = bench
        self.args = args
        self.backend = args.backend
        self.writer = writer
        self.ray = ray
        self.import_s = import_s
        self.items = selected(bench, args)
        self.watchdog = bl.Watchdog(writer)

    def guard(self, key: str, body: Callable[[], Any], label: str | None = None):
        """Run body() as metric key: marked running, under the watchdog; an
        exception becomes the metric's error."""
        self.writer.start(key)
        self.watchdog.arm(key, self.args.metric_timeout)
        try:
            body()
        except Exception as e:
            log(f"[{self.backend}] {label or key} FAILED: {type(e).__name__}: {e}")
            traceback.print_exc()
            self.writer.error(key, f"{type(e).__name__}: {e}")
        finally:
            self.watchdog.disarm()
            self.writer.done(key)

    def probes(self, key: str, record: Callable[[dict[str, Any]], Any]) -> bool:
        """Marks key running and calls record(result) for each of --repeat - 1
        probe processes (fresh sessions).  False if one timed out (its
        timeout is then key's error)."""
        self.writer.start(key)
        n = self.args.repeat - 1
        what = self.bench.probe_what
        for i in range(n):
            log(f"[{self.backend}] {what} probe {i + 1}/{n} (fresh process)")
            try:
                r = self._run_probe()
            except Exception as e:
                log(f"  {what} probe failed ({type(e).__name__}: {e}); no more probes")
                if isinstance(e, subprocess.TimeoutExpired):
                    self.writer.error(key, f"probe timeout after {self.args.metric_timeout} s")
                    return False
                break
            record(r)
        return True

    def _run_probe(self):
        cmd = [sys.executable, self.bench.script, "--backend", self.backend, self.bench.probe_flag]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=None, text=True, cwd=REPO_ROOT)
        try:
            out, _ = p.communicate(timeout=self.args.metric_timeout)
        except subprocess.TimeoutExpired:
            bl.kill_tree(p.pid)
            p.communicate()
            raise
        if p.returncode != 0:
            raise RuntimeError(f"{self.bench.probe_what} probe exited with status {p.returncode}")
        return json.loads(out.strip().splitlines()[-1])

    def init(self, key: str, body: Callable[[], Any], fail_keys: list[str]):
        """body() starts the runtime and returns the Ctx, under the watchdog
        (as metric key when key is an item, else as "_init").  On an exception
        every fail_keys metric gets it as its error (key itself verbatim, the
        others as "init failed: ..."), the runtime is shut down and None is
        returned (the child then exits with status 4)."""
        init_key = key if key in self.items else "_init"
        self.watchdog.arm(init_key, self.args.metric_timeout)
        try:
            ctx = body()
            self.writer.note_descendants()
            return ctx
        except Exception as e:
            traceback.print_exc()
            msg = f"{type(e).__name__}: {e}"
            for k in fail_keys:
                self.writer.error(k, msg if k == key else "init failed: " + msg)
            self.writer.note_descendants()
            try:
                self.ray.shutdown()
            except Exception:
                pass
            return None
        finally:
            self.watchdog.disarm()
            self.writer.done(init_key)

    def run(self, funcs: dict[str, Callable[[Any], Any]], ctx, key_of=lambda item: item):
        """funcs[item](ctx) for each selected item that has one, in order,
        guarded as metric key_of(item)."""
        for item in self.items:
            if item not in funcs:
                continue
            log(f"[{self.backend}] {item}")
            self.guard(key_of(item), lambda f=funcs[item]: f(ctx), label=item)
            if self.bench.gc_between_items:
                gc.collect()

    def shutdown(self, key: str | None = None):
        """ray.shutdown() under the watchdog; timed as metric key if given."""
        if key is not None:
            def timed():
                t0 = perf()
                self.ray.shutdown()
                self.writer.sample(key, perf() - t0)
            self.guard(key, timed)
            return
        self.watchdog.arm("_shutdown", self.args.metric_timeout)
        try:
            self.ray.shutdown()
        except Exception:
            traceback.print_exc()
        finally:
            self.watchdog.disarm()


def child_main(bench: Bench, args) -> int:
    backend = args.backend
    writer = bl.ResultWriter(args.json_out, backend)
    writer.flush()
    # Import the backend (starts nothing) and check that the API is there.
    t0 = perf()
    try:
        ray = import_backend(backend)
    except BaseException as e:
        log(f"[{backend}] cannot import: {type(e).__name__}: {e}")
        missing = isinstance(e, ModuleNotFoundError) and e.name == ("meshrt" if backend == "meshrt" else "ray")
        writer.set(import_error=f"{type(e).__name__}: {e}", module_missing=missing, running=None)
        return 3
    import_s = perf() - t0
    lacking = [n for n in bench.required_api if not callable(getattr(ray, n, None))]
    if lacking:
        # e.g. a namespace package / work in progress: treat as "not there yet".
        msg = f"module {ray.__name__} ({getattr(ray, '__file__', None) or 'namespace package'}) lacks " \
              + ", ".join(lacking)
        log(f"[{backend}] not usable yet: {msg}")
        writer.set(import_error=msg, module_missing=True, running=None)
        return 3
    writer.set(version=backend_version(ray), module_file=getattr(ray, "__file__", None))
    log(f"[{backend}] imported {ray.__name__} {backend_version(ray)} in {import_s:.3f} s")
    return bench.child(Child(bench, args, writer, ray, import_s))


# ---------------------------------------------------------------------------
# Parent: one child per backend, restarted for the remaining items if it
# dies; collects, prints, writes JSON.
# ---------------------------------------------------------------------------

def run_backend(bench: Bench, backend: str, args) -> dict[str, Any]:
    """Returns {'state': 'ok'|'n/a'|'error', 'version':..., 'metrics': {...}, 'runs': [...]}."""
    wanted = selected(bench, args)
    out = {"state": "ok", "version": None, "metrics": {}, "runs": []}
    remaining = list(wanted)
    restarts = 0
    rc = None
    while remaining:
        fd, tmp = tempfile.mkstemp(prefix=f"{bench.name}-{backend}-", suffix=".json")
        os.close(fd)
        cmd = [sys.executable, bench.script, "--backend", backend, "--child", "--json-out", tmp,
               "--repeat", str(args.repeat), "--duration", str(args.duration), "--settle", str(args.settle),
               "--metric-timeout", str(args.metric_timeout), "--only", ",".join(remaining)]
        if bench.pass_quick and args.quick:
            cmd.append("--quick")
        log(f"starting {backend} child: {' '.join(shlex.quote(c) for c in cmd)}")
        load_before = bl.loadavg()
        busy = bl.foreign_cpu_busy()
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
                            "loadavg_after": bl.loadavg(), "leftover_processes_killed": leftovers})
        if data.get("import_error"):
            # Module absent -> "n/a"; module present but its import fails -> "error".
            out["state"] = "n/a" if data.get("module_missing") else "error"
            out["import_error"] = data["import_error"]
            return out
        out["version"] = out["version"] or data.get("version")
        out["python"] = data.get("python")
        out["module_file"] = data.get("module_file")
        _merge(bench, out["metrics"], data.get("metrics", {}))
        running = data.get("running")
        if rc != 0 and running and running in out["metrics"]:
            m = out["metrics"][running]
            if not m.get("error"):
                m["error"] = f"child process died during this metric (rc={rc})"
        if rc == 0:
            break
        remaining = [i for i in remaining if not bench.item_done(out["metrics"], i)]
        if rc == 4:     # init failed cleanly: restarting won't help
            break
        if remaining and restarts < args.max_restarts:
            restarts += 1
            log(f"{backend}: restarting child for the remaining {bench.unit}s: {', '.join(remaining)}")
            time.sleep(2.0)
            continue
        break
    bench.finish(out, wanted, remaining, rc)
    return out


def _merge(bench: Bench, into: dict[str, Any], metrics: dict[str, Any]):
    for k, v in metrics.items():
        if k not in bench.metric_by_key:
            continue
        prev = into.get(k)
        if prev is None:
            into[k] = v
        else:   # e.g. import_s / shutdown_s from a restarted child: pool the samples
            prev["samples"] += v.get("samples", [])
            prev["median"] = bl.median(prev["samples"])
            prev["error"] = prev.get("error") or v.get("error")


def parent_main(bench: Bench, args) -> int:
    backends = ["meshrt", "ray"] if args.backend == "both" else [args.backend]
    report = {
        "command": "python " + " ".join(shlex.quote(a) for a in
                                        [os.path.relpath(os.path.abspath(sys.argv[0]), REPO_ROOT)] + sys.argv[1:]),
        "machine": bl.machine_info(),
        "args": {"backend": args.backend, "repeat": args.repeat, "quick": args.quick, "duration": args.duration,
                 "settle": args.settle, "only": args.only, **bench.report_args(args)},
        "backends": {},
    }
    if bench.ratios_first:
        report["ratios"] = {}
    t_all = perf()
    for b in backends:
        report["backends"][b] = run_backend(bench, b, args)
        if b != backends[-1]:
            time.sleep(2.0)     # let the first runtime's processes disappear
    bench.after_runs(report, args)
    report["total_wall_s"] = round(perf() - t_all, 1)
    report["medians"] = {b: {k: v.get("median") for k, v in info.get("metrics", {}).items()}
                         for b, info in report["backends"].items()}
    report["ratios"] = bench.ratios(report)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1, default=str)
    log(f"total {report['total_wall_s']} s; raw results written to {args.json}")
    output_report(bench, report, args)
    return 0


def output_report(bench: Bench, report, args):
    sys.stdout.write("\n" + bench.render_text(report) + "\n")
    if args.markdown is not None:
        md = bench.render_markdown(report)
        if args.markdown == "-":
            sys.stdout.write("\n" + md)
        else:
            os.makedirs(os.path.dirname(os.path.abspath(args.markdown)), exist_ok=True)
            with open(args.markdown, "w") as f:
                f.write(md)
            log(f"markdown written to {args.markdown}")
    sys.stdout.flush()


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------

def parse_args(bench: Bench, argv=None):
    ap = argparse.ArgumentParser(description=bench.doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["meshrt", "ray", "both"], default="both")
    ap.add_argument("--repeat", type=int, default=None,
                    help=f"repetitions per metric (default {bench.default_repeat}, --quick 1)")
    ap.add_argument("--quick", action="store_true", help=bench.help_quick)
    ap.add_argument("--duration", type=float, default=None, help=bench.help_duration)
    ap.add_argument("--settle", type=float, default=None, help=bench.help_settle)
    ap.add_argument("--only", type=str, default=None, help=f"comma-separated subset of: {','.join(bench.run_order)}")
    ap.add_argument("--json", default=os.path.join(HERE, "results", f"{bench.name}.json"),
                    help="where to write raw results")
    ap.add_argument("--markdown", nargs="?", const=bench.markdown_const, default=None, metavar="PATH",
                    help=bench.help_markdown)
    bench.add_arguments(ap)
    ap.add_argument("--render", default=None, metavar="JSON", help="only re-print the table of an earlier run")
    ap.add_argument("--metric-timeout", type=float, default=bench.metric_timeout,
                    help=f"watchdog per {bench.unit}, seconds")
    ap.add_argument("--child-timeout", type=float, default=900.0, help="hard limit per child process, seconds")
    ap.add_argument("--max-restarts", type=int, default=2, help="child restarts after a crash/hang")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json-out", default=None, help=argparse.SUPPRESS)
    ap.add_argument(bench.probe_flag, dest="probe", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.repeat is None:
        args.repeat = 1 if args.quick else bench.default_repeat
    if args.duration is None:
        args.duration = 0.25 if args.quick else 1.0
    if args.settle is None:
        args.settle = 1.0 if args.quick else 2.0
    args.repeat = max(1, args.repeat)
    if isinstance(args.only, str):
        args.only = _parse_only(bench, args.only)
    return args


def _parse_only(bench: Bench, s):
    if not s:
        return None
    keys = [k.strip() for k in s.split(",") if k.strip()]
    bad = [k for k in keys if k not in bench.run_order]
    if bad:
        raise SystemExit(f"--only: unknown {bench.unit}(s) {bad}; choose from {bench.run_order}")
    return keys


def main(bench: Bench, argv=None) -> int:
    global _log_name
    _log_name = bench.name
    args = parse_args(bench, argv)
    if args.probe:
        bench.probe(args.backend)
        return 0
    if args.child:
        if args.backend == "both":
            raise SystemExit("--child needs --backend meshrt|ray")
        return child_main(bench, args)
    if args.render:
        with open(args.render) as f:
            report = json.load(f)
        output_report(bench, report, args)
        return 0
    return parent_main(bench, args)

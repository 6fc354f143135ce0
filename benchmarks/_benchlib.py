"""Library for the benchmark scripts (benchmarks/core.py, benchmarks/objstore.py):
metric type, statistics and formatting, timing loops, process memory, the
child's result file and watchdog, leftover-process cleanup, machine
description and the table / markdown layout of a report.

Nothing in here imports the backend under test (meshrt or ray).  The process
flow that uses these pieces (parent, child, probes) is in _harness.py.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

perf = time.perf_counter


# ---------------------------------------------------------------------------
# Metric type
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Metric:
    key: str
    label: str            # shown in the table (includes the unit)
    unit: str
    higher_is_better: bool
    target: float | None = None   # required improvement factor (meshrt vs ray)
    target_text: str = "-"
    digits: int | None = None     # fixed decimals; None = automatic


# ---------------------------------------------------------------------------
# Statistics / formatting
# ---------------------------------------------------------------------------

def median(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return statistics.median(xs) if xs else None


def fmt_value(metric, v) -> str:
    """metric: a Metric or anything with .digits (and optionally .fmt, a
    callable that formats a number its own way)."""
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    own = getattr(metric, "fmt", None)
    if own is not None:
        return own(v)
    if metric.digits is not None:
        return f"{v:,.{metric.digits}f}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:,.1f}"
    return f"{v:,.2f}"


def improvement(metric, meshrt, ray) -> float | None:
    """meshrt vs ray as an improvement factor (> 1 means meshrt is better)."""
    if not isinstance(meshrt, (int, float)) or not isinstance(ray, (int, float)):
        return None
    if meshrt <= 0 or ray <= 0:
        return None
    return meshrt / ray if metric.higher_is_better else ray / meshrt


def ratio_text(r: float) -> str:
    return f"{r:.2f}x" if r < 10 else f"{r:.1f}x"


# ---------------------------------------------------------------------------
# Timing loops
# ---------------------------------------------------------------------------

def timed_loop(fn: Callable[[], Any], min_time: float):
    """Call fn() one at a time for at least min_time s; returns ops/s, n."""
    n = 0
    t0 = perf()
    while True:
        fn()
        n += 1
        el = perf() - t0
        if el >= min_time:
            return n / el, n


def timed_batches(batch_fn: Callable[[], Any], batch_size: int, min_time: float):
    """Run whole batches for at least min_time s; returns ops/s, n."""
    n = 0
    t0 = perf()
    while True:
        batch_fn()
        n += batch_size
        el = perf() - t0
        if el >= min_time:
            return n / el, n


def latency_rounds(fn: Callable[[], Any], min_time: float, min_rounds: int = 20) -> list[float]:
    """Time fn() for at least min_rounds calls and min_time s; sorted latencies (s)."""
    lat = []
    t_end = perf() + min_time
    while len(lat) < min_rounds or perf() < t_end:
        t0 = perf()
        fn()
        lat.append(perf() - t0)
    return sorted(lat)


# ---------------------------------------------------------------------------
# Process-tree memory
# ---------------------------------------------------------------------------

def process_tree_memory(with_pss: bool = True) -> dict[str, Any]:
    """Sum RSS (and PSS where readable) of this process plus all its
    descendants (psutil, recursive children)."""
    import psutil

    me = psutil.Process()
    procs = [me]
    try:
        procs += me.children(recursive=True)
    except psutil.Error:
        pass
    rss = 0
    pss = 0
    pss_ok = with_pss
    detail = []
    for p in procs:
        try:
            with p.oneshot():
                r = p.memory_info().rss
                name = p.name()
                try:
                    cmd = " ".join(p.cmdline()).strip()[:160]
                except psutil.Error:
                    cmd = name
            ps = None
            if pss_ok:
                try:
                    ps = p.memory_full_info().pss
                except (psutil.Error, AttributeError):
                    pss_ok = False
        except psutil.NoSuchProcess:
            continue
        except psutil.Error:
            continue
        rss += r
        if ps is not None:
            pss += ps
        detail.append({"pid": p.pid, "name": name, "rss_mib": round(r / 2**20, 1),
                       "pss_mib": None if ps is None else round(ps / 2**20, 1), "cmd": cmd})
    detail.sort(key=lambda d: -d["rss_mib"])
    return {
        "rss_mib": rss / 2**20,
        "pss_mib": pss / 2**20 if pss_ok else None,
        "nprocs": len(detail),
        "procs": detail,
    }


# ---------------------------------------------------------------------------
# Child result file (rewritten atomically after every sample so that partial
# results survive a crash or a watchdog kill)
# ---------------------------------------------------------------------------

class ResultWriter:
    def __init__(self, path: str, backend: str):
        self.path = path
        self.lock = threading.RLock()
        self.data: dict[str, Any] = {
            "backend": backend,
            "version": None,
            "python": sys.version.split()[0],
            "pid": os.getpid(),
            "import_error": None,
            "running": None,
            "metrics": {},
            "descendants": [],
        }
        self._seen = set()

    def _metric(self, key):
        return self.data["metrics"].setdefault(key, {"samples": [], "median": None, "error": None, "info": {}})

    def set(self, **kw):
        with self.lock:
            self.data.update(kw)
            self.flush()

    def start(self, key):
        with self.lock:
            self._metric(key)
            self.data["running"] = key
            self.note_descendants()
            self.flush()

    def note_descendants(self):
        """Remember (pid, create_time) of every process this one has started,
        so that the parent can clean up after a crashed or hung child."""
        try:
            import psutil

            for p in psutil.Process().children(recursive=True):
                try:
                    ident = (p.pid, p.create_time())
                except psutil.Error:
                    continue
                if ident not in self._seen:
                    self._seen.add(ident)
                    self.data["descendants"].append(list(ident))
        except Exception:
            pass

    def sample(self, key, value, **info):
        with self.lock:
            m = self._metric(key)
            m["samples"].append(value)
            m["median"] = median(m["samples"])
            for k, v in info.items():
                m["info"].setdefault(k, []).append(v)
            self.flush()

    def info(self, key, **info):
        with self.lock:
            self._metric(key)["info"].update(info)
            self.flush()

    def error(self, key, msg):
        with self.lock:
            m = self._metric(key)
            m["error"] = msg
            self.flush()

    def done(self, key):
        with self.lock:
            if self.data["running"] == key:
                self.data["running"] = None
            self.flush()

    def flush(self):
        if not self.path:
            return
        with self.lock:
            d = os.path.dirname(os.path.abspath(self.path))
            fd, tmp = tempfile.mkstemp(dir=d, prefix=".core-", suffix=".json")
            with os.fdopen(fd, "w") as f:
                json.dump(self.data, f, indent=1, default=str)
            os.replace(tmp, self.path)


class Watchdog:
    """Kills the child if one metric hangs: records the timeout in the result
    file, dumps all thread stacks to stderr and exits with status 5.
    faulthandler is armed as a backup in case the GIL is never released."""

    def __init__(self, writer: ResultWriter):
        self.writer = writer
        self.timer: threading.Timer | None = None

    def arm(self, key: str, seconds: float):
        import faulthandler

        self.disarm()

        def fire():
            try:
                self.writer.error(key, f"timeout: metric did not finish within {seconds:.0f} s")
                sys.stderr.write(f"\n[watchdog] {key} exceeded {seconds:.0f} s, dumping stacks and exiting\n")
                sys.stderr.flush()
                faulthandler.dump_traceback(all_threads=True)
                kill_descendants()
            finally:
                os._exit(5)

        self.timer = threading.Timer(seconds, fire)
        self.timer.daemon = True
        self.timer.start()
        faulthandler.dump_traceback_later(seconds + 30, exit=True)

    def disarm(self):
        import faulthandler

        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        faulthandler.cancel_dump_traceback_later()


def kill_descendants():
    """Kill every process this one started (directly or not); used only when
    giving up on a hung child so that its runtime does not linger."""
    try:
        import psutil

        for p in psutil.Process().children(recursive=True):
            try:
                p.kill()
            except psutil.Error:
                pass
    except Exception:
        pass


def kill_tree(pid):
    """Kill process pid and everything it started."""
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


def reap_leftovers(idents, grace: float = 3.0) -> list[dict[str, Any]]:
    """Wait up to `grace` s for the processes in idents [(pid, create_time)]
    to exit, then kill the survivors.  Returns what had to be killed."""

    try:
        import psutil
    except ImportError:
        return []

    def alive():
        out = []
        for pid, ctime in idents:
            try:
                p = psutil.Process(pid)
                if abs(p.create_time() - ctime) < 0.01 and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.Error:
                pass
        return out

    deadline = time.monotonic() + grace
    procs = alive()
    while procs and time.monotonic() < deadline:
        time.sleep(0.2)
        procs = alive()
    killed = []
    for p in procs:
        try:
            killed.append({"pid": p.pid, "cmd": " ".join(p.cmdline()).strip()[:120]})
            p.kill()
        except psutil.Error:
            pass
    return killed


# ---------------------------------------------------------------------------
# Machine description and load
# ---------------------------------------------------------------------------

def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = None
    try:
        import psutil

        mem_gib = round(psutil.virtual_memory().total / 2**30, 1)
    except Exception:
        pass
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "mem_gib": mem_gib,
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
    }


def lib_version(name):
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


def loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def foreign_cpu_busy(interval=1.0):
    """System-wide CPU busy % over `interval` s while no child of ours runs,
    i.e. work by other programs on the machine."""
    try:
        import psutil

        return psutil.cpu_percent(interval=interval)
    except Exception:
        return None


def wait_until_idle(limit_pct: float = 15.0, max_wait: float = 30.0) -> float | None:
    """Wait (at most ``max_wait`` s) until the machine's CPU is mostly idle: a runtime
    that just shut down (Ray's raylet and GCS, say) can keep a core busy for seconds
    and slow whatever runs next. Returns the last busy % seen."""
    end = time.monotonic() + max_wait
    while True:
        busy = foreign_cpu_busy(0.5)
        if busy is None or busy < limit_pct or time.monotonic() > end:
            return busy


# ---------------------------------------------------------------------------
# Report layout: the text table, its footer, the markdown page
# ---------------------------------------------------------------------------

ALIGN = ["<", ">", ">", ">", "<"]   # metric | meshrt | ray | ratio | target


def render_table(header: list[str], rows: list[list[str]], foot: str) -> str:
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i])
              for i in range(len(header))]

    def line(cells):
        return " | ".join(f"{c:{a}{w}}" for c, a, w in zip(cells, ALIGN, widths, strict=True))

    out = [line(header), "-+-".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    out.append("")
    out.append(foot)
    return "\n".join(out)


def _versions(report):
    vs = []
    for b in ("meshrt", "ray"):
        info = report["backends"].get(b)
        if not info:
            continue
        if info.get("state") == "n/a":
            vs.append(f"{b} n/a ({info.get('import_error') or 'not installed'})")
        elif info.get("state") == "error":
            vs.append(f"{b} (import failed: {info.get('import_error')})")
        elif info.get("version"):
            vs.append(f"{b} {info['version']}" + (" (saved result)" if info.get("from_file") else ""))
        else:
            vs.append(f"{b} ?")
    return ", ".join(vs)


def _loads(report):
    parts = []
    for b in ("meshrt", "ray"):
        runs = report["backends"].get(b, {}).get("runs") or []
        if runs and runs[0].get("cpu_busy_before_pct") is not None:
            parts.append(f"{b} {runs[0]['cpu_busy_before_pct']:.0f}%")
    return ", ".join(parts) or "-"


def _medians_over(report):
    a = report["args"]
    return f"medians over {a['repeat']} repetition(s){' (quick mode)' if a['quick'] else ''}; "


def footer(report):
    mi = report["machine"]
    return (f"{_medians_over(report)}{mi['cores']} cores ({mi['cpu']}), Python {mi['python']}; "
            f"{_versions(report)}; CPU busy before: {_loads(report)}; {mi['date']}")


def render_markdown(report: dict[str, Any], header: list[str], rows: list[list[str]],
                    method: str, libraries_extra: str = "") -> str:
    """method: the part of the "Method" line after the repetition count."""
    mi = report["machine"]
    out = [
        f"Command: `{report['command']}`",
        "",
        f"- Date: {mi['date']}",
        f"- Machine: {mi['cores']} cores ({mi['cpu']}), {mi['mem_gib']} GiB RAM, {mi['platform']}",
        f"- Python: {mi['python']}",
        f"- Libraries: {_versions(report)}{libraries_extra}",
        f"- Other work on the machine (CPU busy in the 1 s before each backend's run): {_loads(report)}",
        f"- Method: {_medians_over(report)}{method}",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---", "--:", "--:", "--:", "---"]) + "|",
    ]
    for r in rows:
        r = [c.replace(">=", "≥").replace("<=", "≤").replace("[ok]", "✅").replace("[MISS]", "❌")
             .replace("[FAIL]", "❌").replace("|", "\\|") for c in r]
        out.append("| " + " | ".join(r) + " |")
    return "\n".join(out) + "\n"

"""Helpers for benchmarks/core.py: metric table, statistics, process memory,
result files and report rendering.

Nothing in here imports the backend under test (meshrt or ray); the backend
is only ever imported by the child process in core.py.
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
from dataclasses import dataclass
from typing import Any, Dict, List, Optional


# ---------------------------------------------------------------------------
# Metric catalogue
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Metric:
    key: str
    label: str            # shown in the table (includes the unit)
    unit: str
    higher_is_better: bool
    target: Optional[float] = None   # required improvement factor (meshrt vs ray)
    target_text: str = "-"
    digits: Optional[int] = None     # fixed decimals; None = automatic


# Display order.  Metrics with target=None are informational.
METRICS: List[Metric] = [
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
]
METRIC_BY_KEY = {m.key: m for m in METRICS}


# ---------------------------------------------------------------------------
# Statistics / formatting
# ---------------------------------------------------------------------------

def median(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return statistics.median(xs) if xs else None


def fmt_value(metric: Metric, v) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if metric.digits is not None:
        return f"{v:,.{metric.digits}f}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:,.1f}"
    return f"{v:,.2f}"


def improvement(metric: Metric, meshrt, ray) -> Optional[float]:
    """meshrt vs ray as an improvement factor (> 1 means meshrt is better)."""
    if not isinstance(meshrt, (int, float)) or not isinstance(ray, (int, float)):
        return None
    if meshrt <= 0 or ray <= 0:
        return None
    return meshrt / ray if metric.higher_is_better else ray / meshrt


# ---------------------------------------------------------------------------
# Process-tree memory
# ---------------------------------------------------------------------------

def process_tree_memory(with_pss: bool = True) -> Dict[str, Any]:
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
        self.data: Dict[str, Any] = {
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
        self.timer: Optional[threading.Timer] = None

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


def reap_leftovers(idents, grace: float = 3.0) -> List[Dict[str, Any]]:
    """Wait up to `grace` s for the processes in idents [(pid, create_time)]
    to exit, then kill the survivors.  Returns what had to be killed."""
    import time

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
# Machine description / report rendering
# ---------------------------------------------------------------------------

def machine_info() -> Dict[str, Any]:
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


def _cell(metric: Metric, res: Optional[Dict[str, Any]], backend_state: str) -> str:
    """backend_state: 'ok' | 'n/a' (not importable) | 'error' (import failed) | 'skipped'."""
    if backend_state != "ok":
        return backend_state
    if res is None:
        return "not run"
    if res.get("median") is None:
        return "error" if res.get("error") else "not run"
    s = fmt_value(metric, res["median"])
    if res.get("error"):
        s += " (partial)"
    return s


def build_rows(report: Dict[str, Any]) -> List[List[str]]:
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
        r = improvement(m, vals["meshrt"], vals["ray"])
        if r is None:
            ratio = "-"
            tgt = m.target_text
        else:
            ratio = f"{r:.2f}x" if r < 10 else f"{r:.1f}x"
            tgt = m.target_text
            if m.target is not None:
                tgt += "  [ok]" if r >= m.target else "  [MISS]"
        rows.append([m.label, cells["meshrt"], cells["ray"], ratio, tgt])
    return rows


HEADER = ["metric", "meshrt", "ray", "ratio (meshrt vs ray, >1 = meshrt better)", "target"]


def header(report):
    h = list(HEADER)
    if report["backends"].get("ray", {}).get("from_file"):
        h[2] = "ray (saved run)"
    return h


def render_text(report: Dict[str, Any]) -> str:
    rows = build_rows(report)
    hdr = header(report)
    widths = [max(len(hdr[i]), *(len(r[i]) for r in rows)) if rows else len(hdr[i])
              for i in range(len(hdr))]
    align = ["<", ">", ">", ">", "<"]

    def line(cells):
        return " | ".join(f"{c:{a}{w}}" for c, a, w in zip(cells, align, widths))

    out = [line(hdr), "-+-".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    out.append("")
    out.append(_footer(report))
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


def _footer(report):
    mi = report["machine"]
    a = report["args"]
    return (f"medians over {a['repeat']} repetition(s){' (quick mode)' if a['quick'] else ''}; "
            f"{mi['cores']} cores ({mi['cpu']}), Python {mi['python']}; {_versions(report)}; "
            f"CPU busy before: {_loads(report)}; {mi['date']}")


def render_markdown(report: Dict[str, Any]) -> str:
    mi = report["machine"]
    a = report["args"]
    rows = build_rows(report)
    out = [
        f"Command: `{report['command']}`",
        "",
        f"- Date: {mi['date']}",
        f"- Machine: {mi['cores']} cores ({mi['cpu']}), {mi['mem_gib']} GiB RAM, {mi['platform']}",
        f"- Python: {mi['python']}",
        f"- Libraries: {_versions(report)}",
        f"- Other work on the machine (CPU busy in the 1 s before each backend's run): {_loads(report)}",
        f"- Method: medians over {a['repeat']} repetition(s){' (quick mode)' if a['quick'] else ''}; "
        f"each backend in its own fresh process, `init(num_cpus=4)` for both; "
        f"ratio is meshrt's improvement factor over Ray (> 1 = meshrt better).",
        "",
        "| " + " | ".join(header(report)) + " |",
        "|" + "|".join(["---", "--:", "--:", "--:", "---"]) + "|",
    ]
    for r in rows:
        r = [c.replace(">=", "≥").replace("<=", "≤").replace("[ok]", "✅").replace("[MISS]", "❌")
             .replace("|", "\\|") for c in r]
        out.append("| " + " | ".join(r) + " |")
    return "\n".join(out) + "\n"

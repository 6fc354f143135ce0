"""This process's application metrics (meshrt.util.metrics), sent to the controller.

Each process keeps the running totals of its own series: a counter's sum, a gauge's
last value, a histogram's bucket counts, sum and count. A record marks them changed;
the core loop sends the whole table (totals, not deltas: a report lost or repeated
changes nothing) to the controller at most every ``_SEND_EVERY_S``, which adds up the
processes' reports (metrics_table.py). Recording costs a dict update under a lock.
"""

from __future__ import annotations

import bisect
import logging
import threading

from . import state

log = logging.getLogger("meshrt")

_SEND_EVERY_S = 0.1


class LocalMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._metrics: dict[str, dict] = {}  # name -> {"kind", "description", "boundaries", "series": {...}}
        self._send_pending = False

    def declare(self, kind: str, name: str, description: str, boundaries: tuple | None) -> None:
        with self._lock:
            self._declared(kind, name, description, boundaries)

    def _declared(self, kind: str, name: str, description: str, boundaries: tuple | None) -> dict:
        known = self._metrics.get(name)
        if known is None:
            known = self._metrics[name] = {"kind": kind, "description": description, "boundaries": boundaries,
                                           "series": {}}
        elif known["kind"] != kind or known["boundaries"] != boundaries:
            raise ValueError(f"metric {name!r} is a {known['kind']} here already (boundaries "
                             f"{known['boundaries']}); give this {kind} another name")
        return known

    def reset(self) -> None:
        """The runtime shut down: the next one starts from nothing (the metrics made
        before declare themselves again at their next record)."""
        with self._lock:
            self._metrics.clear()
            self._send_pending = False  # (a send the old runtime's loop never ran)

    def record(self, kind: str, name: str, description: str, boundaries: tuple | None, tags: tuple,
               value: float) -> None:
        with self._lock:
            metric = self._declared(kind, name, description, boundaries)
            series = metric["series"]
            kind = metric["kind"]
            if kind == "counter":
                series[tags] = series.get(tags, 0.0) + value
            elif kind == "gauge":
                series[tags] = value
            else:
                buckets, total, count = series.get(tags) or ([0] * (len(metric["boundaries"]) + 1), 0.0, 0)
                buckets[bisect.bisect_left(metric["boundaries"], value)] += 1
                series[tags] = (buckets, total + value, count + 1)
            core = state.core_or_none()
            if self._send_pending or core is None:  # (no runtime yet: the first record after init sends)
                return
            self._send_pending = True
        core.io.post(self._send_soon, core)

    def _send_soon(self, core) -> None:  # (core loop)
        core.io.loop.call_later(_SEND_EVERY_S, self._send, core)

    def _send(self, core) -> None:  # (core loop)
        with self._lock:
            self._send_pending = False
            table = {name: {**m, "series": {tags: _copy(v) for tags, v in m["series"].items()}}
                     for name, m in self._metrics.items()}
        if core.closing or core.closed:
            return
        task = core.io.loop.create_task(core.request("metrics_report", table))
        task.add_done_callback(_report_failure)


def _copy(value):
    return (list(value[0]), value[1], value[2]) if isinstance(value, tuple) else value


def _report_failure(task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("meshrt: a metrics report did not reach the controller: %r", task.exception())


_local = LocalMetrics()


def local() -> LocalMetrics:
    return _local

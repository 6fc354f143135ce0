"""The cluster's application metrics: every process's last report, added up.

Mixed into the Controller. Each process reports its running totals (metrics_local.py);
the controller keeps the last report of each, dead processes' included, so a counter
never goes down. ``collect`` adds them up: counters and histograms summed over
processes, a gauge's value the one reported last. ``prometheus_text`` writes that in
Prometheus' text format (meshrt.util.metrics.start_http_server serves it).
"""

from __future__ import annotations

import itertools


class MetricsTable:
    def rpc_metrics_report(self, caller: int, table: dict) -> None:
        reports = self.__dict__.setdefault("metric_reports", {})
        order = self.__dict__.setdefault("metric_order", itertools.count())
        reports[caller] = (next(order), table)

    def rpc_metrics_collect(self, caller: int) -> list:
        return collect(self.__dict__.get("metric_reports", {}))


def collect(reports: dict) -> list:
    """One dict per metric: name, kind, description, boundaries, and its series as
    (tags, value) pairs (a histogram's value: (bucket counts, sum, count))."""
    merged: dict[str, dict] = {}
    for _order, table in sorted(reports.values(), key=lambda entry: entry[0]):  # (oldest first: last wins)
        for name, metric in table.items():
            into = merged.setdefault(name, {"name": name, "kind": metric["kind"],
                                            "description": metric["description"],
                                            "boundaries": metric["boundaries"], "series": {}})
            if into["kind"] != metric["kind"] or into["boundaries"] != metric["boundaries"]:
                continue  # (declared otherwise by another process: its first kind stands)
            for tags, value in metric["series"].items():
                into["series"][tags] = _merged(metric["kind"], into["series"].get(tags), value)
    return [{**m, "series": sorted(m["series"].items())} for _, m in sorted(merged.items())]


def _merged(kind: str, before, value):
    if before is None or kind == "gauge":
        return value
    if kind == "counter":
        return before + value
    buckets = [a + b for a, b in zip(before[0], value[0], strict=True)]
    return (buckets, before[1] + value[1], before[2] + value[2])


def prometheus_text(metrics: list) -> str:
    lines = []
    for m in metrics:
        name = m["name"]
        if m["description"]:
            lines.append(f"# HELP {name} {_escape_help(m['description'])}")
        lines.append(f"# TYPE {name} {m['kind']}")
        for tags, value in m["series"]:
            if m["kind"] != "histogram":
                lines.append(f"{name}{_labels(tags)} {_number(value)}")
                continue
            buckets, total, count = value
            running = 0
            for bound, n in zip([*m["boundaries"], float("inf")], buckets, strict=True):
                running += n
                le = "+Inf" if bound == float("inf") else _number(bound)
                lines.append(f"{name}_bucket{_labels(tags + (('le', le),))} {running}")
            lines.append(f"{name}_sum{_labels(tags)} {_number(total)}")
            lines.append(f"{name}_count{_labels(tags)} {count}")
    return "\n".join(lines) + "\n"


def _labels(tags: tuple) -> str:
    if not tags:
        return ""
    inner = ",".join(f'{key}="{_escape_value(str(val))}"' for key, val in tags)
    return "{" + inner + "}"


def _escape_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    value = float(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)

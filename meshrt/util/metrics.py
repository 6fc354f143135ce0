"""Application metrics (Ray's ``ray.util.metrics``): Counter, Gauge and Histogram, from
any task, actor or the driver, added up across the cluster.

Each process keeps its own totals and reports them to the controller (a tenth of a
second after a change at most); ``collect()`` reads the cluster's sums, and
``start_http_server(port)`` serves them to Prometheus from the driver.
"""

from __future__ import annotations

import re
import threading
import warnings
from typing import Any

from .._private.metrics_local import local
from .debug import log_once

__all__ = ["Counter", "Gauge", "Histogram", "collect", "start_http_server"]

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")  # (Prometheus' rule for metric names)
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class Metric:
    """What Counter, Gauge and Histogram share: a name, a description, the tag keys
    every record names (its own ``tags=`` or the defaults), and default tags."""

    _kind = ""

    def __init__(self, name: str, description: str = "", tag_keys: tuple | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"metric name {name!r}: give a non-empty str")
        if not _NAME.match(name):  # (Ray takes such names too: exported under Prometheus' rule, as Ray's are)
            exported = re.sub(r"[^a-zA-Z0-9_:]", "_", name)
            exported = "_" + exported if exported[0].isdigit() else exported
            warnings.warn(f"metric name {name!r} is not a Prometheus name (letters, digits, _ and :, not starting "
                          f"with a digit): exported as {exported!r}", stacklevel=3)
            name = exported
        if tag_keys is None:
            tag_keys = ()
        if not isinstance(tag_keys, (tuple, list)) or not all(isinstance(k, str) for k in tag_keys):
            raise TypeError(f"{type(self).__name__}({name!r}, tag_keys=...): give a tuple of str; got {tag_keys!r}")
        bad = [k for k in tag_keys if not _LABEL.match(k) or k == "le"]
        if bad:
            raise ValueError(f"{type(self).__name__}({name!r}): tag key(s) {bad} are not valid label names")
        self._name = name
        self._description = description
        self._tag_keys = tuple(tag_keys)
        self._default_tags: dict[str, str] = {}
        local().declare(self._kind, name, description, self._boundaries())

    def _boundaries(self) -> tuple | None:
        return None

    def set_default_tags(self, default_tags: dict) -> Metric:
        for key, value in default_tags.items():
            if key not in self._tag_keys:
                raise ValueError(f"{self._name}: tag key {key!r} is not one of its tag_keys {self._tag_keys}")
            if not isinstance(value, str):
                raise TypeError(f"{self._name}: tag values are str; {key}={value!r}")
        self._default_tags = dict(default_tags)
        return self

    @property
    def info(self) -> dict:
        return {"name": self._name, "description": self._description, "tag_keys": self._tag_keys,
                "default_tags": dict(self._default_tags)}

    def _record(self, value: Any, tags: dict | None) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{self._name}: value must be int or float, got {type(value).__name__}")
        final = {**self._default_tags, **(tags or {})}
        for key, val in list(final.items()):
            if not isinstance(val, str):
                raise TypeError(f"{self._name}: tag values are str; {key}={val!r}")
            if key not in self._tag_keys:  # (Ray records it without; say so once)
                del final[key]
                _warn_once(f"{self._name}: tag key {key!r} is not one of its tag_keys {self._tag_keys}: recorded "
                           f"without it (declare it in tag_keys= to keep it)")
        missing = [k for k in self._tag_keys if k not in final]
        if missing:
            raise ValueError(f"{self._name}: missing value for tag key(s) {missing}: pass tags= or "
                             f"set_default_tags()")
        local().record(self._kind, self._name, self._description, self._boundaries(), tuple(sorted(final.items())),
                       float(value))

    def __reduce__(self):
        return (_rebuilt, (type(self), self._name, self._description, self._tag_keys, self._boundaries(),
                           self._default_tags))


def _warn_once(text: str) -> None:
    if log_once(text):
        warnings.warn(text, stacklevel=4)


class Counter(Metric):
    """A running total: ``inc(value=1.0, tags=None)`` adds a positive amount."""

    _kind = "counter"

    def inc(self, value: float = 1.0, tags: dict | None = None) -> None:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
            raise ValueError(f"{self._name}.inc({value}): a counter only grows; give a value > 0")
        self._record(value, tags)


class Gauge(Metric):
    """A value that goes up and down: ``set(value, tags=None)`` (None does nothing)."""

    _kind = "gauge"

    def set(self, value: float | None, tags: dict | None = None) -> None:
        if value is None:
            return
        self._record(value, tags)


class Histogram(Metric):
    """Observations counted in buckets: ``observe(value, tags=None)``; ``boundaries``
    are the buckets' upper bounds (positive, increasing)."""

    _kind = "histogram"

    def __init__(self, name: str, description: str = "", boundaries: list | None = None,
                 tag_keys: tuple | None = None) -> None:
        if not boundaries:
            raise ValueError(f"Histogram({name!r}): give boundaries=, the buckets' upper bounds, e.g. [0.1, 1, 10]")
        bounds = tuple(float(b) for b in boundaries)
        if any(b <= 0 for b in bounds) or list(bounds) != sorted(set(bounds)):
            raise ValueError(f"Histogram({name!r}, boundaries={list(boundaries)}): give positive, increasing "
                             f"upper bounds")
        self.boundaries = bounds
        super().__init__(name, description, tag_keys)

    def _boundaries(self) -> tuple | None:
        return self.boundaries

    def observe(self, value: float, tags: dict | None = None) -> None:
        self._record(value, tags)

    @property
    def info(self) -> dict:
        return {**super().info, "boundaries": list(self.boundaries)}


def _rebuilt(cls, name, description, tag_keys, boundaries, default_tags):
    if cls is Histogram:
        metric = cls(name, description, list(boundaries), tag_keys)
    else:
        metric = cls(name, description, tag_keys)
    metric._default_tags = dict(default_tags)
    return metric


def collect(timeout: float = 30) -> list:
    """The cluster's metrics now, as reported so far: one dict per metric with
    ``name``, ``kind``, ``description``, ``boundaries`` and ``series``, a list of
    (tags, value) pairs; a histogram's value is (bucket counts, sum, count)."""
    from .._private import state

    return state.core().request_sync("metrics_collect", timeout=timeout)


def start_http_server(port: int = 0, host: str = "127.0.0.1") -> int:
    """Serve the cluster's metrics to Prometheus at ``http://host:port/metrics``, from
    this driver, on a thread, until the runtime shuts down; returns the port (0: any
    free one)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from .._private import state
    from .._private.metrics_table import prometheus_text

    core = state.core()
    if not core.is_driver:
        raise RuntimeError("start_http_server() serves the cluster's metrics from the driver; call it there")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404, "metrics are at /metrics")
                return
            try:
                body = prometheus_text(collect(timeout=10)).encode()
            except Exception as err:  # noqa: BLE001 - the scraper gets the reason
                self.send_error(503, f"meshrt could not collect its metrics: {err}")
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:  # (quiet: a scrape every few seconds is no news)
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="meshrt-metrics", daemon=True).start()
    core.on_shutdown(server.shutdown, server.server_close)
    return server.server_address[1]

"""Progress bars from tasks and actors, drawn by the driver: Ray's ``tqdm_ray``.

    from meshrt.experimental import tqdm_ray

    @meshrt.remote
    def work(n):
        for _ in tqdm_ray.tqdm(range(n), desc="work"):
            ...

A bar in a worker prints its state (at most once per ``flush_interval_s``, and when
it ends) as one line of its output; the driver takes those lines out and draws the
bars of every process together, one row each (``tqdm`` where it is installed), so
they neither overwrite one another nor the log lines printed meanwhile. In the driver
itself a bar is drawn at once. ``safe_print`` prints without garbling the bars.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable
from typing import Any

from .._private import progress_bars, state

__all__ = ["tqdm", "safe_print", "instance"]


def _in_driver() -> bool:
    core = state.core_or_none()
    return core is None or core.is_driver or getattr(core, "is_client", False)  # (an attached driver's too)


class tqdm:
    """A tqdm-like bar for code in a task or actor (or the driver): ``update(n)``,
    iteration, ``set_description``, ``n``, ``total``, ``close``. Ray's subset of tqdm's
    arguments."""

    DEFAULT_FLUSH_INTERVAL_SECONDS = 1.0

    def __init__(self, iterable: Iterable | None = None, desc: str | None = None, total: int | None = None,
                 unit: str | None = None, position: int | None = None, flush_interval_s: float | None = None):
        if total is None and iterable is not None:
            try:
                total = len(iterable)  # type: ignore[arg-type]
            except (TypeError, AttributeError):
                total = None
        if flush_interval_s is not None and (not isinstance(flush_interval_s, (int, float)) or flush_interval_s < 0):
            raise ValueError(f"tqdm(flush_interval_s={flush_interval_s!r}): give seconds between updates, >= 0")
        self._iterable = iterable
        self._desc = desc or ""
        self._total = total
        self._unit = unit or "it"
        self._pos = position or 0
        self._uuid = uuid.uuid4().hex
        self._x = 0
        self._closed = False
        self._interval = self.DEFAULT_FLUSH_INTERVAL_SECONDS if flush_interval_s is None else float(flush_interval_s)
        self._last_flush = 0.0
        self._pid = os.getpid()
        self._dump(force=True)

    # -- tqdm's surface ------------------------------------------------------------------------

    def set_description(self, desc: str) -> None:
        self._desc = desc
        self._dump()

    def update(self, n: int = 1) -> None:
        self._x += n
        self._dump()

    def refresh(self) -> None:
        self._dump(force=True)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._dump(force=True)

    @property
    def total(self) -> int | None:
        return self._total

    @total.setter
    def total(self, total: int | None) -> None:
        self._total = total

    @property
    def n(self) -> int:
        return self._x

    @n.setter
    def n(self, n: int) -> None:
        self._x = n

    def __iter__(self):
        if self._iterable is None:
            raise TypeError("tqdm(...) was given no iterable to go through; call update(n) instead")
        try:
            for item in self._iterable:
                yield item
                self.update(1)
        finally:
            self.close()

    def __enter__(self) -> tqdm:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- to the driver ---------------------------------------------------------------------------

    def _state(self) -> dict:
        return {"uuid": self._uuid, "desc": self._desc, "x": self._x, "total": self._total, "unit": self._unit,
                "pos": self._pos, "closed": self._closed}

    def _dump(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_flush < self._interval:
            return
        self._last_flush = now
        if _in_driver():
            progress_bars.bars().update("", self._state())
        else:
            print(progress_bars.state_line(self._state()), flush=True)


def safe_print(*args: Any, **kwargs: Any) -> None:
    """print(), without garbling the progress bars the driver shows."""
    import sys

    if not _in_driver():
        print(*args, **kwargs)
        return
    with progress_bars.writing(kwargs.get("file") or sys.stdout):
        print(*args, **kwargs)


def instance() -> progress_bars.ProgressBars:
    """The driver's bars (Ray's ``tqdm_ray.instance()``)."""
    return progress_bars.bars()

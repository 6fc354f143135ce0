"""The runtime of this process: the driver's (after ``init``) or a worker's."""

from __future__ import annotations

import threading

_core = None
lock = threading.RLock()
generation = 0  # counts the runtimes this process has had (handles made in an older one are stale)


def core():
    """This process's core; in a driver, ``init()`` runs first if nobody called it (as Ray does)."""
    c = _core
    if c is not None:
        return c
    from . import driver

    driver.auto_init()
    return _core


def core_or_none():
    return _core


def deltas():
    c = _core
    return c.table.deltas if c is not None else None


def set_core(c) -> None:
    global _core, generation
    _core = c
    generation += 1

"""Monarch's ``shutdown_context()``: the controller program is done with its meshes."""

from __future__ import annotations

import math
import threading

from .._private import state
from .future import Future, ready

_DEFAULT_HOST_TIMEOUT_S = 10.0
_claim = threading.Lock()  # (the first call shuts the runtime down; later ones find it claimed)


def shutdown_context(host_timeout: float | None = None) -> Future:
    """Stop the process meshes this program spawned (each process first finishes the
    calls it was given; one still busy after ``host_timeout`` seconds, 10 by default, is
    killed), then end this driver's runtime as ``meshrt.shutdown()`` does. Returns a
    Future that is already done. In an actor's process, or when already shut down, it
    does nothing. Monarch shuts its client down at exit by itself; meshrt does too."""
    if host_timeout is not None and (isinstance(host_timeout, bool) or not isinstance(host_timeout, (int, float))
                                     or not math.isfinite(host_timeout) or host_timeout < 0):
        raise ValueError(f"shutdown_context(host_timeout={host_timeout!r}): give finite, non-negative seconds, "
                         f"or None for {_DEFAULT_HOST_TIMEOUT_S:g}")
    core = state.core_or_none()
    if core is None or not core.is_driver:
        return ready(None)
    with _claim:
        if core.__dict__.get("_context_shut_down"):
            return ready(None)
        core._context_shut_down = True
    timeout = _DEFAULT_HOST_TIMEOUT_S if host_timeout is None else float(host_timeout)
    from .meshes import stop_spawned

    try:
        stop_spawned(core, timeout)
    finally:
        from .._private.driver import shutdown

        shutdown()
    return ready(None)

"""OMP_NUM_THREADS for Ray-style tasks and actors, as Ray sets it: the CPUs they asked
for (at least 1), where nobody set it. Without it, each of a host's workers that
imports numpy or torch starts a thread per core, and N such processes run N x cores
threads on the host's cores (Ray's issue 6998: many times slower).

Set in the worker's environment before the task or the actor's constructor runs, so a
library imported there reads it. Where torch was imported already (a worker forked
from a driver that imported it: its OpenMP read the environment then), its thread count
is set too, unless user code set one. A value the user gave (in the driver's
environment, or a task's ``runtime_env={"env_vars": ...}``) wins. Mesh processes keep
the default, as Monarch's do (meshrt.parallel sizes its own: parallel/worker.py).
A BLAS that numpy loaded before the fork keeps its thread count (changing it needs
threadpoolctl, which meshrt does not depend on).
"""

from __future__ import annotations

import functools
import math
import os
import sys

from ..scheduler.bundles import base_request
from ..scheduler.resources import from_units

_VAR = "OMP_NUM_THREADS"
_ours: str | None = None  # the value set here last (another value was set by someone else)
_torch_ours: int | None = None  # torch's thread count as set here last
_torch_before: int | None = None  # ... and as it was before (for undo)


def for_call(resources: tuple) -> None:
    """Before a task runs (or an actor is built) with ``resources`` (units, as specs carry)."""
    global _ours
    current = os.environ.get(_VAR)
    if current is not None and current != _ours:
        return
    wanted = _threads(resources)
    if wanted == current:  # (as for the last call here: torch follows already, or user code set its own)
        return
    os.environ[_VAR] = wanted
    _ours = wanted
    _torch_threads(int(wanted))


def _torch_threads(wanted: int) -> None:
    global _torch_ours, _torch_before
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "set_num_threads"):
        return
    now = torch.get_num_threads()
    if now == wanted or (_torch_ours is not None and now != _torch_ours):  # (user code set its own)
        return
    if _torch_before is None:
        _torch_before = now
    torch.set_num_threads(wanted)
    _torch_ours = wanted


@functools.lru_cache(maxsize=64)
def _threads(resources: tuple) -> str:
    cpus = next((from_units(amount) for name, amount in base_request(resources) if name == "CPU"), 0)
    return str(max(1, math.floor(cpus)))


def undo() -> None:
    """A mesh process: keep the default thread count (unless the user set one)."""
    global _ours, _torch_ours, _torch_before
    if _ours is not None and os.environ.get(_VAR) == _ours:
        del os.environ[_VAR]
    _ours = None
    torch = sys.modules.get("torch")
    if torch is not None and _torch_before is not None and torch.get_num_threads() == _torch_ours:
        torch.set_num_threads(_torch_before)
    _torch_ours = _torch_before = None

"""What ``list_runtime_envs`` shows: each runtime environment that something ran with
(or failed to set up) on each node, as Ray's runtime-env agent lists them.

Mixed into the Controller (which provides tasks, actors, workers, config and
node_id_of_host). A task's or actor's environment is the one its worker gets: its own
(merged with the job's where it was submitted) or else the job's; an empty one is not
listed (Ray's agent never sees those). A row appears once the first task or actor with
that environment ran on that node, or failed to set it up there; ``creation_time_ms``
is the time from when that first one was placed there until then (a package install
and the worker's start, for ``pip`` or ``uv``). ``ref_cnt`` counts the tasks waiting or
running with it on that node now and its live actors there. The last ``_KEPT``
environments are kept (one per task, say by a rank in its ``env_vars``, would otherwise
grow the controller without end; Ray drops unused ones too).
"""

from __future__ import annotations

import json
import time

from ..scheduler.policy import split_pool_key
from . import runtime_env

_KEPT = 1000
_SETUP_FAILED = "RUNTIME_ENV_SETUP_FAILED"  # (exceptions.ray_error_type of a RuntimeEnvSetupError)


class _EnvState:
    __slots__ = ("shown", "created_ms", "error")

    def __init__(self, shown: dict) -> None:
        self.shown = shown
        self.created_ms: float | None = None
        self.error: str | None = None


class RuntimeEnvStates:
    def env_of(self, env: dict | None) -> dict | None:
        """The environment a worker runs a task or actor with (``env``: its spec's)."""
        return env if env is not None else self.config.get("runtime_env")

    def note_env_ran(self, host: int, env: dict | None, since_ms: float) -> None:
        """Something ran on ``host`` with ``env``: the first time, the environment is set
        up there, ``since_ms`` (``time.time()`` ms) after it was first asked for."""
        state = self._env_state(host, env)
        if state is not None and state.created_ms is None:
            state.created_ms = _ms_since(since_ms)

    def note_env_failed(self, host: int, env: dict | None, since_ms: float, error: str) -> None:
        state = self._env_state(host, env)
        if state is not None and state.error is None:
            state.error = error or "its runtime_env could not be set up"
            if state.created_ms is None:
                state.created_ms = _ms_since(since_ms)

    def note_worker_env(self, w) -> None:
        """A pool worker of the job's environment is up (workers start in it: listed before
        any task runs, as Ray's prestarted workers list it)."""
        if not split_pool_key(w.pool_key)[1]:  # (one of a pip/uv pool: its task's environment says more)
            self.note_env_ran(w.host, None, w.spawned_ms)

    def note_task_env_ran(self, host: int, spec, events: list) -> None:
        """A task is handed to a worker (every dispatch: only the first per environment and host counts)."""
        state = self._env_state(host, spec.runtime_env)
        if state is not None and state.created_ms is None:
            state.created_ms = _ms_since(_placed_ms(events))

    def note_task_env_end(self, host: int, spec, events: list, error_type: str, error_message: str) -> None:
        """A task ended on ``host``: one that could not set up its environment marks it failed."""
        if error_type == _SETUP_FAILED:
            self.note_env_failed(host, spec.runtime_env, _placed_ms(events), error_message)

    def _env_state(self, host: int, env: dict | None) -> _EnvState | None:
        if env is None:  # (most tasks: the job's, keyed once, not on each dispatch)
            job = self.__dict__.get("_job_env_key")
            if job is None:
                job = self.__dict__["_job_env_key"] = _keyed(self.config.get("runtime_env"))
            shown, key = job
        else:
            shown, key = _keyed(env)
        if not shown:
            return None
        states = self.__dict__.setdefault("env_states", {})
        state = states.get((host, key))
        if state is None:
            state = states[(host, key)] = _EnvState(shown)
            if len(states) > _KEPT:
                del states[next(iter(states))]  # (the first listed: a dict keeps insertion order)
        return state

    def rpc_state_runtime_envs(self, caller: int, detail: bool = False) -> list:
        users: dict = {}
        if detail:
            for rec in list(self.tasks.values()):
                w = self.workers.get(rec.worker) if rec.worker is not None else None
                _count(users, w.host if w is not None else rec.host, self.env_of(rec.spec.runtime_env))
            for rec in list(self.actors.values()):
                w = self.workers.get(rec.worker) if rec.worker is not None else None
                if rec.state != "dead" and w is not None:
                    _count(users, w.host, self.env_of(rec.spec.runtime_env))
        rows = []
        for (host, key), state in list(self.__dict__.get("env_states", {}).items()):
            if state.created_ms is None and state.error is None:
                continue  # (not set up yet)
            rows.append({
                "runtime_env": state.shown, "success": state.error is None,
                "creation_time_ms": state.created_ms, "node_id": self.node_id_of_host(host),
                "ref_cnt": users.get((host, key), 0) if detail else None,
                "error": state.error if detail else None,
            })
        return rows


def _count(users: dict, host: int, env: dict | None) -> None:
    shown, key = _keyed(env)
    if shown:
        users[(host, key)] = users.get((host, key), 0) + 1


def _keyed(env: dict | None) -> tuple[dict, str]:
    """(the environment as Ray shows it, a key naming it: the same one keys the same)."""
    shown = runtime_env.shown(env)
    return shown, json.dumps(shown, sort_keys=True, default=repr) if shown else ""


def _ms_since(since_ms: float) -> float:
    return max(0.0, time.time() * 1000 - since_ms)


def _placed_ms(events: list) -> float:
    """When a task was placed on its node (its events: (state, ms))."""
    for state, ms in events:
        if state == "PENDING_NODE_ASSIGNMENT":
            return ms
    return time.time() * 1000

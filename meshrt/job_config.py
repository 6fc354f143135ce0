"""Ray's ``JobConfig``: settings of a driver's job, given as ``init(job_config=...)``.

A field of init's own (``runtime_env=``, ``namespace=``, ``logging_config=``) wins
over the same field here, as in Ray. ``metadata`` shows in ``list_jobs``;
``default_actor_lifetime="detached"`` makes the actors this job creates detached
unless they say ``lifetime=``. meshrt runs Python only, so ``jvm_options`` are refused,
and so is ``code_search_path`` (directories for workers' imports): give them as
``runtime_env={"py_modules": [...]}`` or ``working_dir``, which reach every host.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["JobConfig"]

_LIFETIMES = ("detached", "non_detached")


class JobConfig:
    def __init__(self, jvm_options: list | None = None, code_search_path: list | None = None,
                 runtime_env: dict | None = None, _client_job: bool = False, metadata: dict | None = None,
                 ray_namespace: str | None = None, default_actor_lifetime: str = "non_detached",
                 _py_driver_sys_path: list | None = None) -> None:
        self.jvm_options = list(jvm_options or [])
        self.code_search_path = list(code_search_path or [])
        self.runtime_env: dict = {}
        self.set_runtime_env(runtime_env)
        self.client_job = _client_job
        self.metadata: dict = {}
        for key, value in (metadata or {}).items():
            self.set_metadata(key, value)
        self.ray_namespace: str | None = None
        self.set_ray_namespace(ray_namespace)
        self.default_actor_lifetime = "non_detached"
        self.set_default_actor_lifetime(default_actor_lifetime)
        self.py_driver_sys_path = list(_py_driver_sys_path or [])
        self.py_logging_config = None

    def set_metadata(self, key: str, value: str) -> None:
        """A string shown with the job (``list_jobs``'s ``metadata``)."""
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"JobConfig metadata takes str keys and values, got {key!r}: {value!r}")
        self.metadata[key] = value

    def set_ray_namespace(self, ray_namespace: str | None) -> None:
        if ray_namespace is not None and not isinstance(ray_namespace, str):
            raise TypeError(f"JobConfig(ray_namespace={ray_namespace!r}): give a str")
        self.ray_namespace = ray_namespace

    def set_runtime_env(self, runtime_env: dict | None, validate: bool = False) -> None:
        if runtime_env is not None and not isinstance(runtime_env, dict):
            raise TypeError(f"JobConfig(runtime_env={runtime_env!r}): give a dict, as for init(runtime_env=...)")
        self.runtime_env = dict(runtime_env or {})
        if validate:
            from ._private import runtime_env as env

            env.check(self.runtime_env, "JobConfig.set_runtime_env()", job=True)

    def set_default_actor_lifetime(self, default_actor_lifetime: str) -> None:
        if default_actor_lifetime not in _LIFETIMES:
            raise ValueError(f"JobConfig(default_actor_lifetime={default_actor_lifetime!r}): give 'detached' or "
                             "'non_detached'")
        self.default_actor_lifetime = default_actor_lifetime

    def set_py_logging_config(self, logging_config) -> None:
        self.py_logging_config = logging_config

    def _check(self, what: str) -> None:
        """At init: what meshrt cannot apply is refused, naming what to use instead."""
        if self.jvm_options:
            raise ValueError(f"{what}: jvm_options are for Java workers; meshrt runs Python only")
        if self.code_search_path:
            raise ValueError(f"{what}: code_search_path={self.code_search_path!r} is not supported; give the "
                             "directories as runtime_env={'py_modules': [...]} (or 'working_dir'), which reach "
                             "every host's workers")

    @classmethod
    def from_json(cls, job_config_json: str | dict) -> JobConfig:
        """From Ray's JSON form (``runtime_env``, ``metadata``, ``ray_namespace``...)."""
        data: dict[str, Any] = json.loads(job_config_json) if isinstance(job_config_json, str) else job_config_json
        return cls(jvm_options=data.get("jvm_options"), code_search_path=data.get("code_search_path"),
                   runtime_env=data.get("runtime_env"), _client_job=data.get("client_job", False),
                   metadata=data.get("metadata"), ray_namespace=data.get("ray_namespace"),
                   default_actor_lifetime=data.get("default_actor_lifetime", "non_detached"),
                   _py_driver_sys_path=data.get("py_driver_sys_path"))

    def __repr__(self) -> str:
        return (f"JobConfig(runtime_env={self.runtime_env!r}, metadata={self.metadata!r}, "
                f"ray_namespace={self.ray_namespace!r}, default_actor_lifetime={self.default_actor_lifetime!r})")


def merged(job_config, runtime_env, namespace, logging_config) -> tuple:
    """init's (runtime_env, namespace, logging_config, job details) with ``job_config``'s
    filled in where init's own were not given (as Ray's init does)."""
    if job_config is None:
        return runtime_env, namespace, logging_config, {}
    if not isinstance(job_config, JobConfig):
        raise TypeError(f"init(job_config={job_config!r}): give a meshrt.job_config.JobConfig")
    job_config._check("meshrt.init(job_config=...)")
    details = {"metadata": dict(job_config.metadata), "default_actor_lifetime": job_config.default_actor_lifetime}
    return (runtime_env if runtime_env is not None else (job_config.runtime_env or None),
            namespace if namespace is not None else job_config.ray_namespace,
            logging_config if logging_config is not None else job_config.py_logging_config, details)

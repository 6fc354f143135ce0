"""Ray's ``ray.runtime_env``: ``RuntimeEnv`` and ``RuntimeEnvConfig``, plain dicts as in Ray.

A plain dict works wherever these do (``runtime_env={"env_vars": {...}}``); what
meshrt applies and how is in ``meshrt/_private/runtime_env.py``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RuntimeEnv", "RuntimeEnvConfig"]


class RuntimeEnvConfig(dict):
    """Ray's setup options (``setup_timeout_seconds``, ``eager_install``): accepted; meshrt
    sets up an environment as a task or actor starts, with the call's own timeout."""

    def __init__(self, setup_timeout_seconds: int = 600, eager_install: bool = True, **kwargs: Any) -> None:
        super().__init__(setup_timeout_seconds=setup_timeout_seconds, eager_install=eager_install, **kwargs)


class RuntimeEnv(dict):
    """A runtime_env as keyword arguments; fields left None are left out. The fields are
    checked where the environment is used (``.options()``, ``@remote``, ``init``), which
    names a bad one."""

    def __init__(self, *, py_modules: list | None = None, working_dir: str | None = None,
                 env_vars: dict | None = None, excludes: list | None = None, pip: Any = None,
                 conda: Any = None, config: dict | None = None, **kwargs: Any) -> None:
        given = dict(py_modules=py_modules, working_dir=working_dir, env_vars=env_vars, excludes=excludes,
                     pip=pip, conda=conda, config=config, **kwargs)
        super().__init__({k: v for k, v in given.items() if v is not None})

    def env_vars(self) -> dict:
        return dict(self.get("env_vars") or {})

    def working_dir(self) -> str:
        return self.get("working_dir", "")

    def py_modules(self) -> list:
        return list(self.get("py_modules") or [])

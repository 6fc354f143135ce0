"""Ray's ``runtime_env``: environment variables, a working directory and Python modules
for the job (``meshrt.init(runtime_env=...)``), an actor or a task.

Where it is applied:

* the job's: in every worker process as it starts (before any user code is loaded);
* an actor's: in its own process, before its class is loaded;
* a task's: around that task in the pool worker that runs it (environment variables,
  current directory and ``sys.path`` are put back afterwards). Ray starts a worker
  process per environment instead; the difference shows only for variables read once
  at process start (by a library already imported in the worker) and for modules a
  task's working_dir shadows after an earlier task imported the same name.

Inheritance is Ray's: tasks and actors submitted from a task or actor get its
environment; one that names its own overrides the parent's fields, except
``env_vars``, which are merged (the child's win). Local directories travel as
packages (env_packages.py).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import warnings
from contextlib import contextmanager
from typing import Any

import cloudpickle

from ..exceptions import RuntimeEnvSetupError
from . import env_packages, job_context, pip_envs

APPLIED = ("env_vars", "working_dir", "py_modules", "pip", "uv", "worker_process_setup_hook", "excludes", "config")
NOT_APPLIED = ("conda", "container", "image_uri", "py_executable", "java_jars", "nsight",
               "rocprof_sys", "_inject_current_ray", "_ray_release", "_ray_commit")
_TAKES_EFFECT = ("env_vars", "working_dir", "py_modules", "pip", "uv", "worker_process_setup_hook")

_job: dict | None = None  # the job's resolved environment (every worker starts in it)
_job_paths: list = []  # what the job's environment put on sys.path (a task naming its own takes them off)
_current: dict | None = None  # the resolved environment of the running task or actor
setup_error: BaseException | None = None  # the job's environment failed in this worker: its calls fail with it


def check(runtime_env: Any, what: str, job: bool = False) -> dict | None:
    """The runtime_env as given, checked (paths made absolute); None when it asks for nothing.
    Fields meshrt does not apply (``pip``...) are warned about at the user's line."""
    if runtime_env is None:
        return None
    if not isinstance(runtime_env, dict):
        raise TypeError(f"{what}: runtime_env must be a dict (or meshrt.runtime_env.RuntimeEnv), "
                        f"got {type(runtime_env).__name__}")
    out: dict = {}
    for key, value in runtime_env.items():
        if key in NOT_APPLIED:
            if value:
                _warn(f"{what}: runtime_env[{key!r}] is not supported by meshrt yet and is ignored; install "
                      "what it names in the Python environment meshrt runs from, on every host")
            continue
        if key not in APPLIED:
            raise ValueError(f"{what}: runtime_env has no field {key!r}; meshrt applies "
                             f"{', '.join(APPLIED[:6])} (and reads 'excludes' and 'config')")
        if value is None:
            continue
        if key == "env_vars":
            out[key] = _env_vars(value, what)
        elif key == "working_dir":
            out[key] = _local_dir(value, what)
        elif key == "py_modules":
            out[key] = _py_modules(value, what)
        elif key in pip_envs.FIELDS:
            if "pip" in runtime_env and "uv" in runtime_env and runtime_env["pip"] and runtime_env["uv"]:
                raise ValueError(f"{what}: runtime_env names both 'pip' and 'uv'; give the packages to one of them")
            out[key] = pip_envs.check(key, value, what)
            timeout = (runtime_env.get("config") or {}).get("setup_timeout_seconds")
            if timeout is not None:
                out[key]["timeout"] = None if timeout == -1 else float(timeout)  # (Ray's -1: no limit)
        elif key == "worker_process_setup_hook":
            out[key] = _setup_hook(value, what, job)
        elif key == "excludes":
            if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) for p in value):
                raise TypeError(f"{what}: runtime_env['excludes'] must be a list of patterns (strings), "
                                f"got {value!r}")
            out[key] = tuple(value)
    return out if any(k in out for k in _TAKES_EFFECT) else None


def _setup_hook(value: Any, what: str, job: bool) -> Any:
    if not job:
        raise ValueError(f"{what}: runtime_env['worker_process_setup_hook'] is applied only to the whole job, "
                         "as in Ray: give it to meshrt.init(runtime_env=...)")
    if callable(value):
        return value
    if isinstance(value, str) and "." in value.strip("."):
        return value
    raise TypeError(f"{what}: runtime_env['worker_process_setup_hook'] must be a callable or a "
                    f"'module.function' string, got {value!r}")


def _warn(text: str) -> None:
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    warnings.warn(text, RuntimeWarning, stacklevel=level)


def _env_vars(value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise TypeError(f"{what}: runtime_env['env_vars'] must be a dict of str to str, got {value!r}")
    for name, text in value.items():
        if not isinstance(name, str) or not name or "=" in name:
            raise ValueError(f"{what}: runtime_env['env_vars'] has a bad variable name {name!r}")
        if not isinstance(text, str):
            raise TypeError(f"{what}: runtime_env['env_vars'][{name!r}] must be a str, got {text!r} "
                            f"(write str({text!r}))")
    return dict(value)


def _local_dir(value: Any, what: str) -> str:
    path = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if path is None:
        raise TypeError(f"{what}: runtime_env['working_dir'] must be a local directory's path, got {value!r}")
    if "://" in path:
        raise ValueError(f"{what}: runtime_env['working_dir']={path!r}: remote URIs are not supported "
                         "by meshrt; give a local directory (it is sent to every host that needs it)")
    if not os.path.isdir(path):
        raise ValueError(f"{what}: runtime_env['working_dir']={path!r} is not a directory")
    return os.path.abspath(path)


def _py_modules(value: Any, what: str) -> tuple:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{what}: runtime_env['py_modules'] must be a list of module directories, "
                        f".py files or imported modules, got {value!r}")
    paths = []
    for item in value:
        if hasattr(item, "__file__") and getattr(item, "__spec__", None) is not None:
            origin = item.__file__ or ""
            path = os.path.dirname(origin) if hasattr(item, "__path__") else origin
        elif isinstance(item, (str, os.PathLike)):
            path = os.fspath(item)
        else:
            raise TypeError(f"{what}: runtime_env['py_modules'] entry {item!r} is not a path or a module")
        if "://" in path or path.endswith(".whl"):
            raise ValueError(f"{what}: runtime_env['py_modules'] entry {path!r}: only local directories and "
                             ".py files are supported by meshrt (install wheels on every host)")
        if not (os.path.isdir(path) or (os.path.isfile(path) and path.endswith(".py"))):
            raise ValueError(f"{what}: runtime_env['py_modules'] entry {path!r} is not a directory or a .py file")
        paths.append(os.path.abspath(path))
    return tuple(paths)


# -- the owner's side: packed and handed to the controller ---------------------------------------


def resolve(checked: dict, what: str) -> tuple[dict, dict]:
    """(the environment as tasks receive it, {uri: zip bytes}): local paths become
    package URIs, as Ray's ``gcs://_ray_pkg_...`` ones."""
    excludes = checked.get("excludes", ())
    resolved: dict = {}
    blobs: dict = {}
    if "env_vars" in checked:
        resolved["env_vars"] = dict(checked["env_vars"])
    for key in pip_envs.FIELDS:  # (installed where a worker starts in it: pip_envs.py)
        if key in checked:
            resolved[key] = checked[key]
    hook = checked.get("worker_process_setup_hook")
    if isinstance(hook, str):  # (run by every worker as it starts: imported by name...)
        resolved["worker_process_setup_hook"] = hook
    elif hook is not None:  # (... or a function sent by value)
        resolved["worker_process_setup_hook"] = f"{getattr(hook, '__module__', '')}.{getattr(hook, '__qualname__', '')}"
        resolved["_setup_hook"] = cloudpickle.dumps(hook)
    if "working_dir" in checked:
        uri, data = env_packages.pack(checked["working_dir"], excludes, what=what)
        resolved["working_dir"] = uri
        blobs[uri] = data
    if "py_modules" in checked:
        uris = []
        for path in checked["py_modules"]:
            name = os.path.basename(path)
            uri, data = env_packages.pack(path, excludes, prefix="" if os.path.isfile(path) else name + "/",
                                          what=what)
            uris.append(uri)
            blobs[uri] = data
        resolved["py_modules"] = uris
    return resolved, blobs


_JOB_ONLY = ("worker_process_setup_hook", "_setup_hook")  # (run as workers start: never a task's to carry)


def merge(parent: dict | None, child: dict | None) -> dict | None:
    """Ray's inheritance: the child's fields win, ``env_vars`` are merged."""
    if not parent:
        return child
    if not child:
        return parent
    merged = {k: v for k, v in {**parent, **child}.items() if k not in _JOB_ONLY}
    if any(k in child for k in pip_envs.FIELDS):  # (the child's packages replace the parent's, pip or uv)
        for key in pip_envs.FIELDS:
            if key not in child:
                merged.pop(key, None)
    if "env_vars" in parent and "env_vars" in child:
        merged["env_vars"] = {**parent["env_vars"], **child["env_vars"]}
    return merged


class Requested:
    """A ``runtime_env`` option: checked where it is given, packed at the first submit
    (the runtime may not be up at decoration time), handed to the controller once."""

    __slots__ = ("checked", "what", "_resolved", "_sent")

    def __init__(self, checked: dict, what: str, sent: dict | None = None) -> None:
        self.checked = checked
        self.what = what
        self._resolved: tuple | None = None  # (core, resolved)
        self._sent = sent  # resolved where it was packed (its packages are the driver's): used as is

    def __reduce__(self):
        # (A remote function travels with its options: not checked or packed again where
        # it lands, where the directories may not exist; packed already, it is used as is.)
        sent = self._resolved[1] if self._resolved is not None else self._sent
        return Requested, (self.checked, self.what, sent)

    def resolved(self, core) -> dict:
        if self._sent is not None:
            return self._sent
        if self._resolved is None or self._resolved[0] is not core:
            resolved, blobs = resolve(self.checked, self.what)
            upload(core, blobs)
            self._resolved = (core, resolved)
        return self._resolved[1]


def option(runtime_env: Any, what: str) -> Requested | None:
    if isinstance(runtime_env, Requested):  # (options of a remote function that travelled here)
        return runtime_env
    checked = check(runtime_env, what)
    return Requested(checked, what) if checked is not None else None


def upload(core, blobs: dict) -> None:
    sent = core.__dict__.setdefault("_sent_packages", set())
    for uri, data in blobs.items():
        if uri not in sent:
            if not core.request_sync("keep_package", uri):  # (the same files, packed by another process)
                core.request_sync("put_package", uri, data)
            sent.add(uri)


def for_submit(core, requested: Requested | None) -> dict | None:
    """The environment a task or actor submitted here runs in, or None for the job's."""
    if requested is None:
        return _current
    return merge(_current if _current is not None else _job, requested.resolved(core))


# -- the worker's side -------------------------------------------------------------------------


def current() -> dict:
    """What ``get_runtime_context().runtime_env`` shows: the running task's or actor's
    environment, else the job's."""
    return shown(_current if _current is not None else _job)


def shown(env: dict | None) -> dict:
    """A resolved environment as Ray shows it (also list_runtime_envs: runtime_env_states.py)."""
    if not env:
        return {}
    return {k: pip_envs.as_ray(v) if k in pip_envs.FIELDS else v for k, v in env.items() if not k.startswith("_")}


def set_job(env: dict | None) -> None:
    global _job
    _job = env or None


def set_current(env: dict | None) -> None:
    """An attached driver's: every task and actor it submits carries its job (and the
    runtime_env it gave init), as a task's own submissions carry the task's."""
    global _current
    _current = env or None


def start_worker(core, env: dict | None) -> None:
    """A worker starts in the job's environment (for good: it is every task's baseline),
    then runs the job's setup hook. Should that fail, every task and actor this worker
    is given fails with the error (as Ray's do), rather than run without it."""
    global setup_error
    set_job(env)
    if not env:
        return
    before = list(sys.path)
    try:
        _enter(core, env)
        _run_hook(env)
    except Exception as err:  # noqa: BLE001 - (given to each call; Ray's error type)
        setup_error = err if isinstance(err, RuntimeEnvSetupError) else RuntimeEnvSetupError(
            f"the job's runtime_env could not be set up in this worker: {err!r}")
        raise setup_error from err
    _job_paths[:] = [p for p in sys.path if p not in before]


def _run_hook(env: dict) -> None:
    hook = env.get("worker_process_setup_hook")
    if "_setup_hook" in env:
        cloudpickle.loads(env["_setup_hook"])()
    elif hook is not None:
        module, _, name = hook.rpartition(".")
        getattr(importlib.import_module(module), name)()


def start_actor(core, env: dict | None) -> None:
    """An actor's process takes its environment for good."""
    global _current
    if env:
        _enter(core, env)
        _current = env


@contextmanager
def around_task(core, env: dict):
    """A task's environment, put back as it was when the task ends."""
    global _current
    saved_vars = {name: os.environ.get(name) for name in env.get("env_vars", ())}
    saved_current = _current
    dirs = "working_dir" in env or "py_modules" in env or "_job" in env  # (else they stay as they are)
    saved_path, saved_cwd = (list(sys.path), os.getcwd()) if dirs else (None, None)
    saved_job = job_context.saved()
    try:
        _enter(core, env)
        _current = env
        yield
    finally:
        _current = saved_current
        if "_job" in env:
            job_context.leave(saved_job)
        for name, value in saved_vars.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if dirs:
            sys.path[:] = saved_path
            try:
                os.chdir(saved_cwd)
            except OSError:
                pass


_REFERENCE = re.compile(r"\$(\w+|\{([^}]*)\})")  # ($NAME or ${NAME}, as os.path.expandvars reads them)
_base_env: dict | None = None  # the process's own variables, before any runtime_env's


def expanded(env_vars: dict) -> dict:
    """``env_vars`` with ``${NAME}`` (and ``$NAME``) replaced by that variable as the
    process had it before any runtime_env (an unset ``${NAME}`` is empty), as Ray does:
    ``{"PATH": "/opt/bin:${PATH}"}`` adds to the worker's own PATH, once, whether the
    job's variables were applied already or not."""
    global _base_env
    if _base_env is None:
        _base_env = dict(os.environ)
    base = _base_env

    def value_of(match) -> str:
        name = match.group(2) if match.group(2) is not None else match.group(1)
        return base.get(name, "" if match.group(2) is not None else match.group(0))

    return {name: _REFERENCE.sub(value_of, value) for name, value in env_vars.items()}


def _enter(core, env: dict) -> None:
    job = _job or {}
    if _job_paths and ("working_dir" in env or "py_modules" in env) and \
            any(env.get(k) != job.get(k) for k in ("working_dir", "py_modules")):
        # (what names its own directories does not import the job's, as in Ray, where
        # its worker would not have them; around_task puts them back; the env's own,
        # the job's where it kept them, go on again below)
        sys.path[:] = [p for p in sys.path if p not in _job_paths]
    try:
        modules = [env_packages.local_copy(core, uri) for uri in env.get("py_modules", ())]
        working_dir = env_packages.local_copy(core, env["working_dir"]) if "working_dir" in env else None
    except RuntimeEnvSetupError:
        raise
    except Exception as err:  # noqa: BLE001 - (the caller sees what broke, as Ray's setup error)
        raise RuntimeEnvSetupError(f"runtime_env could not be set up on this host: {err!r}") from err
    os.environ.update(expanded(env.get("env_vars", {})))
    for path in reversed(modules):
        if path not in sys.path:
            sys.path.insert(0, path)
    if "_job" in env:  # (an attached driver's task or actor: job_context.py; its working_dir wins)
        job_context.enter(env["_job"])
    if working_dir is not None:
        os.chdir(working_dir)
        if working_dir in sys.path:
            sys.path.remove(working_dir)
        sys.path.insert(0, working_dir)

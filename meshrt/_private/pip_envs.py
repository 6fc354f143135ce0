"""runtime_env ``pip`` and ``uv``: a virtual environment per package list, on each host.

As Ray does, the packages are installed into an environment of their own, made once per
list (and per interpreter) and reused, and the workers of a task or actor that asks for
it run that environment's Python. It sees its own packages first, then everything of the
environment meshrt runs from (a ``.pth`` file adds that one's site directories, their own
``.pth`` files and editable installs included), so pip does not install again a package
already there (uv may) and meshrt itself is importable. The installer runs on the host
that starts the worker (the head's controller or an agent: EnvMaker), off its event loop,
once per list however many workers wait for it; a failure reaches every call given to
those workers as ``RuntimeEnvSetupError`` with the installer's last lines.

The environments live under ``$MESHRT_RUNTIME_ENV_DIR`` (default
``~/.cache/meshrt/runtime_envs``), one directory per list, made under a file lock (two
processes asking at once install once), and kept for later runs within a size bound
(env_cache.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import functools
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
from typing import Any

from ..exceptions import RuntimeEnvSetupError
from . import env_cache

FIELDS = ("pip", "uv")
ERROR_ENV = "MESHRT_RUNTIME_ENV_ERROR"  # (a worker whose environment failed: worker.py)
SPEC_ENV = "MESHRT_PIP_ENV"  # (the head asks an agent to start a worker in one: agent.py)
_TAIL = 20  # installer output lines kept in an error
log = logging.getLogger("meshrt")


def check(field: str, value: Any, what: str) -> dict:
    """Ray's forms, at the call site: a list of requirements, a requirements file's path,
    or ``{"packages": ..., "pip_check": ..., "pip_version": ..., "pip_install_options":
    ...}`` (``uv_check``, ``uv_version``, ``uv_pip_install_options`` for uv). Returns
    ``{"installer", "packages", "options", "check", "version"}``."""
    name = f"{what}: runtime_env[{field!r}]"
    spec = {"installer": field, "packages": [], "options": [], "check": False, "version": ""}
    if isinstance(value, (str, os.PathLike)):
        spec["packages"] = _requirements_file(os.fspath(value), name)
    elif isinstance(value, (list, tuple)):
        spec["packages"] = _requirements(value, name)
    elif isinstance(value, dict):
        known = {"packages", f"{field}_check", f"{field}_version", f"{field}_install_options"
                 if field == "pip" else "uv_pip_install_options"}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"{name}: no field {unknown[0]!r}; it takes {sorted(known)}")
        packages = value.get("packages")
        spec["packages"] = (_requirements_file(os.fspath(packages), name) if isinstance(packages, (str, os.PathLike))
                            else _requirements(packages or [], name))
        spec["check"] = bool(value.get(f"{field}_check", False))
        version = value.get(f"{field}_version") or ""
        if not isinstance(version, str):
            raise TypeError(f"{name}: {field}_version is a version specifier such as '==23.2.1', got {version!r}")
        if version and field == "uv":
            raise ValueError(f"{name}: uv_version is not supported by meshrt (it runs the uv installed where it "
                             f"runs); leave it out")
        spec["version"] = version
        options = value.get("pip_install_options" if field == "pip" else "uv_pip_install_options") or []
        spec["options"] = _requirements(options, f"{name} install options")
    else:
        raise TypeError(f"{name}: give a list of requirements (['requests==2.31']), a requirements file's path, "
                        f"or a dict with 'packages'; got {type(value).__name__}")
    if not spec["packages"]:
        raise ValueError(f"{name}: names no package; give at least one requirement, or leave the field out")
    return spec


def _requirements(items: Any, name: str) -> list:
    if not isinstance(items, (list, tuple)) or not all(isinstance(i, str) and i.strip() for i in items):
        raise TypeError(f"{name}: give a list of non-empty strings, got {items!r}")
    return [i.strip() for i in items]


def _requirements_file(path: str, name: str) -> list:
    """The file's requirements, read here (the hosts that install them may not have it)."""
    try:
        with open(path) as f:
            lines = [line.strip() for line in f]
    except OSError as err:
        raise ValueError(f"{name}={path!r}: cannot read that requirements file ({err.strerror})") from None
    return [line for line in lines if line and not line.startswith("#")]  # (pip reads the rest)


def as_ray(spec: dict) -> dict:
    """The packages as Ray shows them (``get_runtime_context().runtime_env``)."""
    field = spec["installer"]
    shown = {"packages": list(spec["packages"]), f"{field}_check": spec["check"]}
    if spec["version"]:
        shown[f"{field}_version"] = spec["version"]
    if spec["options"]:
        shown["pip_install_options" if field == "pip" else "uv_pip_install_options"] = list(spec["options"])
    return shown


def spec_in(env: dict | None) -> dict | None:
    """The packages a resolved runtime_env asks for (its ``pip`` or ``uv``), or None."""
    if not env:
        return None
    return env.get("pip") or env.get("uv")


def key_of(spec: dict) -> str:
    """A short name for the environment: the same packages on the same interpreter and
    base environment share one."""
    wanted = json.dumps({k: v for k, v in spec.items() if k != "timeout"}, sort_keys=True)
    key = _keys.get(wanted)
    if key is None:
        text = json.dumps([wanted, sys.version, sys.prefix, _parent_sites()])
        key = _keys[wanted] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return key


_keys: dict[str, str] = {}  # (key_of runs for every task that names packages: on the controller's loop)


class EnvMaker:
    """The environments of one host (the head's controller or an agent makes one): one
    install per list at a time, shared by every worker waiting for it, on threads of its
    own (the loop's default executor serves other work); an install that failed stays
    failed until close(), which kills an installer still running."""

    def __init__(self) -> None:
        self._threads = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="meshrt-pip")
        self._made: dict[str, concurrent.futures.Future] = {}
        self.running: set = set()  # installer processes now (subprocess.Popen)
        self.held: list = []  # a shared lock on each environment handed out: kept while it runs (env_cache.py)
        self._holding = threading.Lock()  # (held and closed: an installer thread and close() race at shutdown)
        self.closed = False

    def python(self, spec: dict) -> concurrent.futures.Future:
        """A Future of the environment's Python (RuntimeEnvSetupError when it cannot be made)."""
        key = key_of(spec)
        made = self._made.get(key)
        if made is None:
            made = self._made[key] = self._threads.submit(python_for, spec, self)
        return made

    def keep(self, fd: int) -> None:
        """Hold an environment's lock (``fd``) until close(); closed already: let it go."""
        with self._holding:
            if not self.closed:
                self.held.append(fd)
                return
        os.close(fd)

    def close(self) -> None:
        with self._holding:
            self.closed = True
            held, self.held = self.held, []
        for proc in list(self.running):
            _kill(proc)
        self._threads.shutdown(wait=False, cancel_futures=True)
        for fd in held:  # (its workers are gone: the environments may be trimmed)
            os.close(fd)


async def worker_env(maker: EnvMaker, spec: dict) -> dict | None:
    """What a worker in this environment starts with (the head's controller and agents
    alike): its Python, or the error every call given to it fails with; None when the
    maker closed meanwhile (shutting down)."""
    try:
        return {"MESHRT_PYTHON": await asyncio.wrap_future(maker.python(spec))}
    except RuntimeEnvSetupError as err:  # (it starts all the same, and fails what it is given)
        return {ERROR_ENV: str(err)}
    except (asyncio.CancelledError, concurrent.futures.CancelledError):
        return None


def python_for(spec: dict, maker: EnvMaker | None = None) -> str:
    """The Python of the environment for ``spec``, made first if need be (blocking: run it
    off any event loop). RuntimeEnvSetupError when it cannot be made."""
    what = f"runtime_env[{spec['installer']!r}] {spec['packages']}"
    root = os.environ.get("MESHRT_RUNTIME_ENV_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "meshrt",
                                                                     "runtime_envs")
    try:
        return _python_in(spec, root, what, maker)
    except RuntimeEnvSetupError:
        raise
    except Exception as err:  # noqa: BLE001 - (a directory that cannot be made, a full disk...: said as Ray's error)
        raise RuntimeEnvSetupError(f"{what}: its environment could not be made under {root}: {err!r}") from err


def _python_in(spec: dict, root: str, what: str, maker: EnvMaker | None) -> str:
    os.makedirs(root, exist_ok=True)
    home = os.path.join(root, f"{spec['installer']}-{key_of(spec)}")
    python = os.path.join(home, "bin", "python")
    limit = env_cache.limit_bytes()  # (a bad bound: said before anything is installed)
    with open(home + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # (released when the file closes)
        made = not os.path.exists(os.path.join(home, env_cache.READY))
        if made:
            shutil.rmtree(home, ignore_errors=True)  # (a try that failed or was cut short)
            try:
                _make(spec, home, python, what, _Runner(what, spec.get("timeout", 600.0), maker))
            except BaseException:
                shutil.rmtree(home, ignore_errors=True)
                raise
            env_cache.mark_ready(home, spec)
        else:
            env_cache.touch(home)
        if maker is not None:
            maker.keep(env_cache.hold(home))
    if made:  # (the others, least recently used first, while all of them take more than the bound)
        try:
            deleted = env_cache.trim(root, home)
        except OSError as err:  # (the environment made is fine: only the bound is not kept)
            log.warning("meshrt: could not trim the runtime_env environments in %s: %s", root, err)
            deleted = []
        if deleted:
            log.info("meshrt: deleted %d runtime_env environment(s) least recently used, to keep %s under "
                     "%.3g GB ($%s)", len(deleted), root, limit / (1 << 30), env_cache.CACHE_ENV)
    return python


def _make(spec: dict, home: str, python: str, what: str, run: _Runner) -> None:
    run([sys.executable, "-m", "venv", "--without-pip", home])
    site_dir = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip()
    with open(os.path.join(site_dir, "_meshrt_base_env.pth"), "w") as f:  # (this environment's packages come first)
        f.write("import site; " + "; ".join(f"site.addsitedir({d!r})" for d in _parent_sites()) + "\n")
    requirements = os.path.join(home, "requirements.txt")  # (as Ray does: pip reads its own syntax)
    with open(requirements, "w") as f:
        f.write("\n".join(spec["packages"]) + "\n")
    if spec["installer"] == "uv":
        uv = _uv(what)
        run([*uv, "pip", "install", "--python", python, *spec["options"], "-r", requirements])
        if spec["check"]:
            run([*uv, "pip", "check", "--python", python])
        return
    pip = [sys.executable, "-m", "pip", "--python", python, "--disable-pip-version-check"]
    if spec["version"]:  # (that pip, in the environment, installs the packages)
        run([*pip, "install", "--quiet", f"pip{spec['version']}"])
        pip = [python, "-m", "pip", "--disable-pip-version-check"]
    run([*pip, "install", *spec["options"], "-r", requirements])
    if spec["check"]:
        run([*pip, "check"])


class _Runner:
    """Runs the installer's commands, each in a process group of its own (``pip --python``
    starts a second pip: a timeout or close() ends both)."""

    def __init__(self, what: str, timeout: float | None, maker: EnvMaker | None) -> None:
        self.what, self.timeout, self.maker = what, timeout, maker

    def __call__(self, argv: list) -> str:
        if self.maker is not None and self.maker.closed:
            raise RuntimeEnvSetupError(f"{self.what}: the runtime is shutting down")
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    text=True, start_new_session=True)
        except OSError as err:
            raise RuntimeEnvSetupError(f"{self.what}: cannot run {argv[0]}: {err}") from None
        running = self.maker.running if self.maker is not None else set()
        running.add(proc)
        try:
            out, _ = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            raise RuntimeEnvSetupError(f"{self.what}: {' '.join(argv[:4])} ... did not finish within "
                                       f"{self.timeout:g} s (runtime_env config setup_timeout_seconds)") from None
        finally:
            running.discard(proc)
        if proc.returncode != 0:
            lines = out.strip().splitlines()[-_TAIL:]
            cut = " (stopped: the runtime is shutting down)" if self.maker is not None and self.maker.closed else ""
            raise RuntimeEnvSetupError(f"{self.what}: {' '.join(argv[:6])} ... failed (exit code "
                                       f"{proc.returncode}){cut}:\n" + "\n".join(lines))
        return out


def _kill(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _uv(what: str) -> list:
    found = shutil.which("uv")
    if found:
        return [found]
    try:
        import uv  # type: ignore[import-not-found]  (the uv package ships its binary)

        return [uv.find_uv_bin()]
    except (ImportError, FileNotFoundError):
        raise RuntimeEnvSetupError(f"{what}: uv is not installed where meshrt runs; `pip install uv` "
                                   f"(or use runtime_env['pip'])") from None


@functools.lru_cache(maxsize=1)
def _parent_sites() -> list:
    """The site directories of the environment meshrt runs from, in its order."""
    paths = sysconfig.get_paths()
    sites = [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]
    for extra in (paths.get("purelib"), paths.get("platlib")):
        if extra and extra not in sites and os.path.isdir(extra):
            sites.append(extra)
    return sites

"""runtime_env ``pip``: packages installed into an environment of their own (made once per
list, on the host that starts the worker), for a task, an actor or the whole job."""

from __future__ import annotations

import os
import sys

import pytest

import meshrt
from meshrt.exceptions import RuntimeEnvSetupError

from .test_multihost import head_with_one_agent

# A small pure-Python package that the test environment does not have (installed from the
# package registry, as a user's pip runtime_env is).
PACKAGE = "tomli-w==1.0.0"

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def env_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MESHRT_RUNTIME_ENV_DIR", str(tmp_path / "envs"))
    return tmp_path / "envs"


def _has_package() -> tuple:
    try:
        import tomli_w
    except ImportError:
        return False, sys.executable
    return tomli_w.dumps({"a": 1}), sys.executable


@meshrt.remote
def shown_env():
    return meshrt.get_runtime_context().runtime_env


@meshrt.remote
def has_package():
    return _has_package()


@meshrt.remote
class Holder:
    def has_package(self):
        return _has_package()

    def numpy_is_the_base_environments(self):
        import numpy

        return numpy.__file__


def test_a_task_and_an_actor_run_in_their_packages_environment(env_dir):
    meshrt.init(num_cpus=2)
    env = {"pip": [PACKAGE]}
    dumped, task_python = meshrt.get(has_package.options(runtime_env=env).remote(), timeout=150)
    assert dumped == "a = 1\n" and task_python.startswith(str(env_dir))
    holder = Holder.options(runtime_env=env).remote()
    dumped, actor_python = meshrt.get(holder.has_package.remote(), timeout=150)
    assert (dumped, actor_python) == ("a = 1\n", task_python)  # (one environment for the one list)
    import numpy

    assert meshrt.get(holder.numpy_is_the_base_environments.remote()) == numpy.__file__  # (not installed again)
    assert meshrt.get(has_package.remote()) == (False, sys.executable)  # (the others run as before)
    assert meshrt.get(shown_env.options(runtime_env=env).remote(), timeout=60) == {
        "pip": {"packages": [PACKAGE], "pip_check": False}}  # (as Ray shows it)
    assert len(os.listdir(env_dir)) == 3  # (the environment and its two lock files)


def test_the_jobs_packages_are_every_workers(env_dir):
    meshrt.init(num_cpus=1, runtime_env={"pip": {"packages": [PACKAGE], "pip_check": False}})
    assert meshrt.get(has_package.remote(), timeout=150)[0] == "a = 1\n"
    assert meshrt.get(Holder.remote().has_package.remote(), timeout=150)[0] == "a = 1\n"


def test_a_requirements_file_is_read_where_it_is_given(env_dir, tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"# what the task needs\n{PACKAGE}\n")
    meshrt.init(num_cpus=1)
    task = has_package.options(runtime_env={"pip": str(requirements)})
    requirements.unlink()  # (read at .options(): the hosts that install it need not have it)
    assert meshrt.get(task.remote(), timeout=150)[0] == "a = 1\n"


def test_packages_that_cannot_be_installed_fail_the_calls_saying_why(env_dir):
    meshrt.init(num_cpus=1)
    broken = has_package.options(runtime_env={"pip": ["surely-no-such-package-meshrt==9.9.9"]})
    with pytest.raises(RuntimeEnvSetupError, match="surely-no-such-package-meshrt") as info:
        meshrt.get(broken.remote(), timeout=150)
    assert "No matching distribution" in str(info.value)  # (pip's own words)
    assert meshrt.get(has_package.remote(), timeout=60)[0] is False  # (the job goes on)
    holder = Holder.options(runtime_env={"pip": ["surely-no-such-package-meshrt==9.9.9"]}).remote()
    with pytest.raises(RuntimeEnvSetupError, match="runtime_env could not be set up"):  # (Ray's error, too)
        meshrt.get(holder.has_package.remote(), timeout=150)
    assert not [d for d in os.listdir(env_dir) if not d.endswith(".lock")]  # (no half-made environment kept)


def test_bad_packages_are_named_where_they_are_given(tmp_path, monkeypatch):
    with pytest.raises(TypeError, match=r"runtime_env\['pip'\]: give a list of requirements"):
        has_package.options(runtime_env={"pip": 5})
    with pytest.raises(ValueError, match="names no package"):
        has_package.options(runtime_env={"pip": []})
    with pytest.raises(ValueError, match="cannot read that requirements file"):
        has_package.options(runtime_env={"pip": str(tmp_path / "missing.txt")})
    with pytest.raises(ValueError, match="no field 'pakages'"):
        has_package.options(runtime_env={"pip": {"pakages": [PACKAGE]}})
    with pytest.raises(ValueError, match="names both 'pip' and 'uv'"):
        has_package.options(runtime_env={"pip": [PACKAGE], "uv": [PACKAGE]})


def test_uv_installs_them_too_and_says_when_it_is_missing(env_dir, monkeypatch):
    pytest.importorskip("uv")  # (the test extras install it)
    meshrt.init(num_cpus=1)
    task = has_package.options(runtime_env={"uv": {"packages": [PACKAGE], "uv_check": True}})
    dumped, python = meshrt.get(task.remote(), timeout=150)
    assert dumped == "a = 1\n" and os.path.basename(os.path.dirname(os.path.dirname(python))).startswith("uv-")
    from meshrt._private import pip_envs

    monkeypatch.setattr(pip_envs.shutil, "which", lambda _name: None)  # (no uv on PATH...)
    monkeypatch.setitem(sys.modules, "uv", None)  # (... nor the package)
    with pytest.raises(RuntimeEnvSetupError, match="pip install uv"):
        meshrt.get(has_package.options(runtime_env={"uv": ["tomli-w==1.0.1"]}).remote(), timeout=60)


def _homes(env_dir) -> list:
    return sorted(p.name for p in env_dir.iterdir() if p.is_dir())


def _home_of(python: str) -> str:
    return os.path.basename(os.path.dirname(os.path.dirname(python)))


def test_kept_environments_stay_within_their_bound_but_one_in_use_stays(env_dir, monkeypatch):
    from meshrt._private import pip_envs

    first, second, third = (pip_envs.check("pip", {"packages": [PACKAGE], **extra}, "test")
                            for extra in ({}, {"pip_check": True}, {"pip_install_options": ["--no-compile"]}))
    earlier_run = pip_envs.EnvMaker()
    try:
        kept = _home_of(earlier_run.python(first).result(timeout=150))
    finally:
        earlier_run.close()  # (that runtime ended: its environment is kept, used by nobody)
    assert _homes(env_dir) == [kept]
    monkeypatch.setenv("MESHRT_RUNTIME_ENV_CACHE_GB", "0")  # (nothing fits: whatever may go, goes)
    this_run, another_run = pip_envs.EnvMaker(), pip_envs.EnvMaker()
    try:
        in_use = _home_of(this_run.python(second).result(timeout=150))
        assert _homes(env_dir) == [in_use]  # (the unused one went)
        newest = _home_of(another_run.python(third).result(timeout=150))
        assert _homes(env_dir) == sorted([in_use, newest])  # (one in use by a running runtime stays)
    finally:
        this_run.close()
        another_run.close()
    monkeypatch.setenv("MESHRT_RUNTIME_ENV_CACHE_GB", "lots")
    bad_bound = pip_envs.EnvMaker()
    try:
        with pytest.raises(RuntimeEnvSetupError, match="MESHRT_RUNTIME_ENV_CACHE_GB='lots': give the gigabytes"):
            bad_bound.python(first).result(timeout=60)
    finally:
        bad_bound.close()


@pytest.fixture
def head_and_agent(monkeypatch, env_dir):
    with head_with_one_agent(monkeypatch, MESHRT_RUNTIME_ENV_DIR=str(env_dir / "agent")) as remember:
        yield remember


def test_another_host_makes_the_environment_itself(head_and_agent, env_dir):
    from meshrt.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    head = meshrt.get_runtime_context().get_node_id()
    other = next(n["NodeID"] for n in meshrt.nodes() if n["NodeID"] != head)
    there = has_package.options(runtime_env={"pip": [PACKAGE]},
                                scheduling_strategy=NodeAffinitySchedulingStrategy(other, soft=False))
    dumped, python = meshrt.get(there.remote(), timeout=150)
    assert dumped == "a = 1\n" and python.startswith(str(env_dir / "agent"))
    head_and_agent()


@pytest.fixture
def stuck_index():
    """A package index that accepts connections and never answers: an install that hangs."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    accepted: list = []
    stop = threading.Event()

    def serve():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield {"packages": ["tomli-w==1.0.1"], "pip_install_options": [
        "--index-url", f"http://127.0.0.1:{server.getsockname()[1]}/simple", "--timeout", "120", "--retries", "0",
        "--no-cache-dir"]}, accepted
    stop.set()
    thread.join(5)
    for conn in accepted:
        conn.close()
    server.close()


def _installers() -> list:
    import psutil

    return [p for p in psutil.process_iter(["cmdline"]) if "install" in (p.info["cmdline"] or [])
            and any("pip" in part for part in p.info["cmdline"])]


def test_an_actor_killed_while_its_packages_install_ends_at_once_and_shutdown_stops_the_install(
        env_dir, stuck_index):
    from .helpers import wait_until

    pip, accepted = stuck_index
    meshrt.init(num_cpus=1)
    holder = Holder.options(runtime_env={"pip": pip}).remote()
    call = holder.has_package.remote()
    assert wait_until(lambda: accepted, timeout=60)  # (pip is waiting on the index now)
    meshrt.kill(holder)
    with pytest.raises(meshrt.exceptions.ActorDiedError):
        meshrt.get(call, timeout=30)  # (not after pip's 120 s)
    waiting = has_package.options(runtime_env={"pip": pip}).remote()  # (the same list: the same install)
    assert not meshrt.wait([waiting], timeout=0.5)[0]
    assert _installers()
    meshrt.shutdown()
    assert wait_until(lambda: not _installers(), timeout=30)  # (killed, not left to run)

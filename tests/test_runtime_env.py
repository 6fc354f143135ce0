"""Ray's runtime_env: env_vars, working_dir and py_modules for the job, an actor or a task,
inherited by what they submit, sent to hosts that do not share the driver's files."""

from __future__ import annotations

import os
import shutil

import pytest

import meshrt

from .test_multihost import head_with_one_agent


@pytest.fixture
def project(tmp_path):
    """A working directory with a module, a data file and a large file to leave out, and
    a package to ship as a py_module."""
    work = tmp_path / "project"
    (work / "checkpoints").mkdir(parents=True)
    (work / "shipped_mod.py").write_text("WHERE = __file__\n")
    (work / "data.txt").write_text("the data\n")
    (work / "checkpoints" / "big.ckpt").write_bytes(b"\0" * 1024)
    (work / ".gitignore").write_text("*.log\n")  # (honoured, as Ray does)
    (work / "run.log").write_text("left out\n")
    package = tmp_path / "libs" / "shipped_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("def twice(x):\n    return 2 * x\n")
    return work, package


@meshrt.remote
def environment(*names):
    return {name: os.environ.get(name) for name in names}


@meshrt.remote
def in_working_dir():
    import shipped_mod

    with open("data.txt") as f:
        data = f.read().strip()
    with open("written.txt", "w") as f:  # (lands in the copy, not the user's directory)
        f.write("x")
    return os.getcwd(), shipped_mod.WHERE, data, os.path.exists("checkpoints/big.ckpt") or os.path.exists("run.log")


@meshrt.remote
def uses_package(x):
    import shipped_pkg

    return shipped_pkg.twice(x), meshrt.get_runtime_context().runtime_env


@meshrt.remote
def child_environment(override=None):
    task = environment.options(runtime_env=override) if override else environment
    return meshrt.get(task.remote("JOB", "PARENT", "CHILD"), timeout=60)


@meshrt.remote
class Configured:
    def environment(self, *names):
        return {name: os.environ.get(name) for name in names}, os.getcwd()

    def submit_child(self):
        return meshrt.get(environment.remote("JOB", "PARENT"), timeout=60)


@pytest.mark.timeout(60)
def test_env_vars_of_the_job_and_of_a_task_are_merged_and_put_back(monkeypatch):
    monkeypatch.delenv("TASK_ONLY", raising=False)
    meshrt.init(num_cpus=1, runtime_env={"env_vars": {"JOB": "job", "BOTH": "job"}})
    names = ("JOB", "BOTH", "TASK_ONLY")
    env = {"env_vars": {"BOTH": "task", "TASK_ONLY": "yes"}}
    assert meshrt.get(environment.options(runtime_env=env).remote(*names)) == {
        "JOB": "job", "BOTH": "task", "TASK_ONLY": "yes"}
    # (one CPU: the same worker runs the next task, in the job's environment again)
    assert meshrt.get(environment.remote(*names)) == {"JOB": "job", "BOTH": "job", "TASK_ONLY": None}
    assert "JOB" not in os.environ  # (the driver itself is not changed, as in Ray)


def _mark_worker():
    os.environ["SETUP_HOOK_RAN_IN"] = str(os.getpid())


@meshrt.remote
def hooked():
    return os.environ.get("SETUP_HOOK_RAN_IN") == str(os.getpid()), meshrt.get_runtime_context().runtime_env


@pytest.mark.timeout(60)
def test_the_jobs_setup_hook_runs_in_every_worker():
    meshrt.init(num_cpus=2, runtime_env={"worker_process_setup_hook": _mark_worker})
    results = meshrt.get([hooked.remote() for _ in range(4)])
    assert all(ran for ran, _shown in results)
    assert results[0][1] == {"worker_process_setup_hook": f"{__name__}._mark_worker"}


@pytest.mark.timeout(60)
def test_a_working_dir_is_a_copy_with_its_modules_and_files(project):
    work, _package = project
    meshrt.init(num_cpus=1)
    env = {"working_dir": str(work), "excludes": ["checkpoints/"]}
    cwd, module_file, data, has_checkpoint = meshrt.get(in_working_dir.options(runtime_env=env).remote())
    assert cwd != str(work) and os.path.basename(cwd) in module_file
    assert os.path.dirname(module_file) == cwd
    assert data == "the data"
    assert not has_checkpoint  # (excluded, and ignored by the directory's .gitignore)
    assert not (work / "written.txt").exists()
    assert os.path.exists(os.path.join(cwd, "written.txt"))
    meshrt.shutdown()
    assert not os.path.exists(cwd)  # (the host's directory goes with the runtime)


@pytest.mark.timeout(60)
def test_py_modules_are_importable_and_the_context_shows_the_packages(project):
    _work, package = project
    meshrt.init(num_cpus=1)
    value, shown = meshrt.get(uses_package.options(runtime_env={"py_modules": [str(package)]}).remote(21))
    assert value == 42
    assert len(shown["py_modules"]) == 1 and shown["py_modules"][0].startswith("meshrt-pkg://")


@pytest.mark.timeout(60)
def test_an_actor_keeps_its_environment_and_its_children_inherit_it(project):
    work, _package = project
    meshrt.init(num_cpus=2, runtime_env={"env_vars": {"JOB": "job"}})
    actor = Configured.options(runtime_env={"env_vars": {"PARENT": "actor"}, "working_dir": str(work)}).remote()
    seen, cwd = meshrt.get(actor.environment.remote("JOB", "PARENT"))
    assert seen == {"JOB": "job", "PARENT": "actor"}
    assert os.path.isfile(os.path.join(cwd, "shipped_mod.py"))
    assert meshrt.get(actor.submit_child.remote()) == {"JOB": "job", "PARENT": "actor"}


@pytest.mark.timeout(60)
def test_a_child_naming_its_own_env_vars_merges_them_with_its_parents():
    meshrt.init(num_cpus=2, runtime_env={"env_vars": {"JOB": "job"}})
    parent = child_environment.options(runtime_env={"env_vars": {"PARENT": "p"}})
    assert meshrt.get(parent.remote()) == {"JOB": "job", "PARENT": "p", "CHILD": None}
    assert meshrt.get(parent.remote({"env_vars": {"CHILD": "c", "PARENT": "mine"}})) == {
        "JOB": "job", "PARENT": "mine", "CHILD": "c"}


@pytest.mark.timeout(60)
def test_a_bad_runtime_env_is_named_where_it_is_given(tmp_path):
    with pytest.raises(TypeError, match=r"runtime_env\['env_vars'\]\['N'\] must be a str"):
        environment.options(runtime_env={"env_vars": {"N": 1}})
    with pytest.raises(ValueError, match="has no field 'workdir'"):
        environment.options(runtime_env={"workdir": "."})
    with pytest.raises(ValueError, match="is not a directory"):
        Configured.options(runtime_env={"working_dir": str(tmp_path / "missing")})
    with pytest.raises(ValueError, match="remote URIs are not supported"):
        environment.options(runtime_env={"working_dir": "s3://bucket/code.zip"})
    with pytest.warns(RuntimeWarning, match=r"runtime_env\['conda'\] is not supported"):
        environment.options(runtime_env={"conda": {"dependencies": ["requests"]}})
    with pytest.raises(ValueError, match="applied only to the whole job"):
        environment.options(runtime_env={"worker_process_setup_hook": _mark_worker})
    with pytest.raises(TypeError, match="runtime_env must be a dict"):
        meshrt.init(num_cpus=1, runtime_env=["env_vars"])
    assert not meshrt.is_initialized()


@meshrt.remote
def submit_there(task):
    return meshrt.get(task.remote(), timeout=60)


@pytest.mark.timeout(60)
def test_a_function_with_a_working_dir_travels_as_packed(project):
    work, _package = project
    meshrt.init(num_cpus=2)

    @meshrt.remote(runtime_env={"working_dir": str(work)})
    def read_data():
        with open("data.txt") as f:
            return f.read().strip()

    assert meshrt.get(read_data.remote()) == "the data"  # (packed and sent here)
    shutil.rmtree(work)  # (the function travels with its package, not its path)
    assert meshrt.get(submit_there.remote(read_data)) == "the data"


def _fail_setup():
    raise RuntimeError("no GPU driver here")


@pytest.mark.timeout(60)
def test_a_job_environment_that_fails_fails_the_calls_of_its_workers():
    meshrt.init(num_cpus=1, runtime_env={"worker_process_setup_hook": _fail_setup})
    with pytest.raises(meshrt.exceptions.RuntimeEnvSetupError, match="no GPU driver here"):
        meshrt.get(environment.remote("JOB"))
    with pytest.raises(meshrt.exceptions.RayActorError, match="no GPU driver here"):
        meshrt.get(Configured.remote().environment.remote())


@meshrt.remote
def importable(name):
    import importlib

    try:
        importlib.import_module(name)
        return True
    except ImportError:
        return False


@pytest.mark.timeout(60)
def test_a_task_naming_its_own_working_dir_does_not_import_the_jobs(project, tmp_path):
    work, _package = project
    own = tmp_path / "own"
    own.mkdir()
    (own / "own_mod.py").write_text("")
    (work / "job_only.py").write_text("")
    meshrt.init(num_cpus=1, runtime_env={"working_dir": str(work)})
    assert meshrt.get(importable.remote("shipped_mod"))
    # (one CPU: the same worker; a module it imported already stays imported, as any module does)
    assert meshrt.get(importable.options(runtime_env={"working_dir": str(own)}).remote("own_mod"))
    assert not meshrt.get(importable.options(runtime_env={"working_dir": str(own)}).remote("job_only"))
    assert meshrt.get(importable.remote("job_only"))  # (the job's again, after it)


@pytest.fixture
def head_and_agent(monkeypatch, project):
    """A job whose working_dir every host gets: the head (1 CPU) and one agent's host."""
    work, _package = project
    with head_with_one_agent(monkeypatch, {"working_dir": str(work), "env_vars": {"JOB": "job"}}) as remember:
        yield remember


@pytest.mark.timeout(90)
def test_the_jobs_working_dir_reaches_another_host(head_and_agent):
    from meshrt.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    head = meshrt.get_runtime_context().get_node_id()
    other = next(n["NodeID"] for n in meshrt.nodes() if n["NodeID"] != head)
    there = in_working_dir.options(scheduling_strategy=NodeAffinitySchedulingStrategy(other, soft=False))
    here = in_working_dir.options(scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False))
    far_cwd, far_module, far_data, _ = meshrt.get(there.remote(), timeout=60)
    near_cwd, _near_module, _near_data, _ = meshrt.get(here.remote(), timeout=60)
    assert far_data == "the data" and os.path.dirname(far_module) == far_cwd
    assert os.path.dirname(far_cwd) != os.path.dirname(near_cwd)  # (each host unpacked its own copy)
    assert os.path.basename(far_cwd) == os.path.basename(near_cwd)  # (the same package)
    assert meshrt.get(environment.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        other, soft=False)).remote("JOB"), timeout=60) == {"JOB": "job"}
    head_and_agent()
    meshrt.shutdown()
    assert not os.path.exists(os.path.dirname(near_cwd))

"""Runtime environments, as Ray programs use them.

* The job's ``working_dir`` (a project with a module and a data file) and
  ``env_vars``, given to ``ray.init``: tasks and actors import the module, read
  the file by a relative path and see the variables.
* A task's own ``env_vars``, merged with the job's (its own win), and inherited
  by the task it submits; ``${PATH}`` in a value is the worker's own PATH.
* An actor's ``env_vars`` for the actor's whole life.
* ``get_runtime_context().runtime_env`` inside a task.
* ``pip`` packages for a task and an actor (installed from the package registry).
"""
import os

import pytest

import meshrt as ray

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "helpers_mod.py").write_text("def scale(x):\n    return 10 * x\n")
    (tmp_path / "config.txt").write_text("learning_rate=0.1\n")
    return str(tmp_path)


@ray.remote
def use_project(x):
    import helpers_mod

    with open("config.txt") as f:
        config = f.read().strip()
    return helpers_mod.scale(x), config, os.environ.get("STAGE")


@ray.remote
def variables(*names):
    return {name: os.environ.get(name) for name in names}


@ray.remote
def parent_and_child():
    mine = {name: os.environ.get(name) for name in ("STAGE", "LEVEL")}
    return mine, ray.get(variables.remote("STAGE", "LEVEL"))


@ray.remote
class Configured:
    def level(self):
        return os.environ.get("LEVEL"), os.environ.get("STAGE")


@ray.remote
def shown_env():
    return ray.get_runtime_context().runtime_env["env_vars"]


def test_the_jobs_working_dir_and_variables(project):
    ray.init(num_cpus=2, runtime_env={"working_dir": project, "env_vars": {"STAGE": "train"}})
    assert ray.get([use_project.remote(i) for i in range(3)]) == [
        (10 * i, "learning_rate=0.1", "train") for i in range(3)]
    assert ray.get(shown_env.remote()) == {"STAGE": "train"}


def test_a_tasks_variables_merge_with_the_jobs_and_reach_its_children():
    ray.init(num_cpus=2, runtime_env={"env_vars": {"STAGE": "train", "LEVEL": "job"}})
    own = parent_and_child.options(runtime_env={"env_vars": {"LEVEL": "task"}})
    mine, child = ray.get(own.remote())
    assert mine == {"STAGE": "train", "LEVEL": "task"}
    assert child == {"STAGE": "train", "LEVEL": "task"}
    assert ray.get(variables.remote("STAGE", "LEVEL")) == {"STAGE": "train", "LEVEL": "job"}


def test_an_actor_keeps_its_variables():
    ray.init(num_cpus=2, runtime_env={"env_vars": {"STAGE": "train"}})
    actor = Configured.options(runtime_env={"env_vars": {"LEVEL": "actor"}}).remote()
    assert ray.get([actor.level.remote() for _ in range(3)]) == [("actor", "train")] * 3


def test_variables_refer_to_the_workers_own_with_dollar_braces():
    ray.init(num_cpus=1)
    tools = variables.options(runtime_env={"env_vars": {
        "PATH": "/opt/mytools/bin:${PATH}", "NOTHING": "[${SURELY_NOT_SET_ANYWHERE_42}]"}})
    for _ in range(2):  # (the same worker again: its own PATH, not the one the last task had)
        got = ray.get(tools.remote("PATH", "NOTHING"))
        assert got["NOTHING"] == "[]"
        assert got["PATH"].startswith("/opt/mytools/bin:") and "${" not in got["PATH"]
        assert got["PATH"].count("/opt/mytools/bin") == 1
    plain = ray.get(variables.remote("PATH"))["PATH"]
    assert "/opt/mytools/bin" not in plain and got["PATH"] == "/opt/mytools/bin:" + plain


def test_the_jobs_variables_refer_to_the_workers_own_once():
    ray.init(num_cpus=1, runtime_env={"env_vars": {"JOB_PATH": "/job/bin:${PATH}"}})
    plain = ray.get(variables.remote("JOB_PATH", "PATH"))
    assert plain["JOB_PATH"].startswith("/job/bin:") and plain["JOB_PATH"].count("/job/bin") == 1
    own = ray.get(variables.options(runtime_env={"env_vars": {"TASK": "1"}}).remote("JOB_PATH", "TASK"))
    assert own == {"JOB_PATH": plain["JOB_PATH"], "TASK": "1"}  # (merged with the job's, not expanded twice)


@ray.remote
def toml_of(data):
    try:
        import tomli_w
    except ImportError:
        return None
    return tomli_w.dumps(data)


@ray.remote
class TomlWriter:
    def write(self, data):
        import tomli_w

        return tomli_w.dumps(data)


@pytest.mark.timeout(300)
def test_pip_packages_for_a_task_and_an_actor(tmp_path, monkeypatch):
    # (a small package the test environment lacks, from the package registry)
    monkeypatch.setenv("MESHRT_RUNTIME_ENV_DIR", str(tmp_path / "envs"))  # (where environments are kept; Ray ignores it)
    ray.init(num_cpus=2)
    env = {"pip": ["tomli-w==1.0.0"]}
    assert ray.get(toml_of.options(runtime_env=env).remote({"lr": 1}), timeout=240) == "lr = 1\n"
    writer = TomlWriter.options(runtime_env=env).remote()
    assert ray.get(writer.write.remote({"k": "v"}), timeout=240) == 'k = "v"\n'
    assert ray.get(toml_of.remote({"lr": 1})) is None  # (the job's own workers do not have it)


@pytest.mark.timeout(300)
def test_the_environments_set_up_are_listed_with_how_it_went(tmp_path, monkeypatch):
    from meshrt.exceptions import RuntimeEnvSetupError
    from meshrt.util.state import list_runtime_envs

    monkeypatch.setenv("MESHRT_RUNTIME_ENV_DIR", str(tmp_path / "envs"))  # (Ray ignores it)
    ray.init(num_cpus=1)
    with pytest.raises(RuntimeEnvSetupError):  # (Ray's own error, not the task's)
        ray.get(variables.options(runtime_env={"pip": ["surely-no-such-package-zq==9.9.9"]}).remote("X"),
                timeout=240)
    listed = {"env_vars": {"LISTED": "yes"}}  # (after: Ray forgets an environment once no worker uses it)
    assert ray.get(variables.options(runtime_env=listed).remote("LISTED")) == {"LISTED": "yes"}
    rows = list_runtime_envs(detail=True)
    (ok,) = [row for row in rows if row.runtime_env == listed]
    assert ok.success and ok.error is None and ok.creation_time_ms >= 0 and ok.ref_cnt >= 0
    (bad,) = [row for row in rows if "pip" in row.runtime_env]
    assert not bad.success and "surely-no-such-package-zq" in bad.error
    assert bad.runtime_env["pip"]["packages"] == ["surely-no-such-package-zq==9.9.9"]
    failed = list_runtime_envs(filters=[("success", "=", "False")])
    assert [row.runtime_env for row in failed] == [bad.runtime_env] and failed[0].error is None  # (detail only)

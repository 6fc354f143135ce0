"""init(job_config=JobConfig(...)): its runtime_env, namespace and metadata apply (init's
own arguments win over them), and default_actor_lifetime="detached" makes actors detached."""
import os

import pytest

import meshrt as ray
from meshrt.job_config import JobConfig
from meshrt.util.state import list_actors, list_jobs

pytestmark = pytest.mark.timeout(120)


@ray.remote
def read_env(name):
    return os.environ.get(name)


@ray.remote
class Probe:
    def namespace(self):
        return ray.get_runtime_context().namespace


@ray.remote
def make_probe():
    return Probe.options(name="made-by-a-task").remote()


def test_a_job_config_sets_the_jobs_environment_namespace_metadata_and_actor_lifetime():
    config = JobConfig(runtime_env={"env_vars": {"JOB_CONFIG_PROBE": "from-job-config"}}, metadata={"team": "ml"},
                       ray_namespace="job-config-ns", default_actor_lifetime="detached")
    ray.init(num_cpus=2, job_config=config)
    assert ray.get(read_env.remote("JOB_CONFIG_PROBE")) == "from-job-config"
    assert ray.get_runtime_context().namespace == "job-config-ns"
    probe = Probe.options(name="probe").remote()
    assert ray.get(probe.namespace.remote()) == "job-config-ns"
    (row,) = [a for a in list_actors(detail=True) if a.name == "probe"]
    assert row.is_detached is True
    short_lived = Probe.options(name="short", lifetime="non_detached").remote()
    ray.get(short_lived.namespace.remote())
    (row,) = [a for a in list_actors(detail=True) if a.name == "short"]
    assert row.is_detached is False
    made_by_a_task = ray.get(make_probe.remote())
    ray.get(made_by_a_task.namespace.remote())
    (row,) = [a for a in list_actors(detail=True) if a.name == "made-by-a-task"]
    assert row.is_detached is True
    jobs = [job for job in list_jobs(detail=True) if job.job_id == ray.get_runtime_context().get_job_id()]
    assert jobs and jobs[0].metadata.get("team") == "ml"
    ray.kill(probe)
    ray.kill(made_by_a_task)


def test_inits_own_runtime_env_and_namespace_win_over_the_job_configs():
    config = JobConfig(runtime_env={"env_vars": {"JOB_CONFIG_PROBE": "from-job-config"}}, ray_namespace="theirs")
    ray.init(num_cpus=2, job_config=config, runtime_env={"env_vars": {"JOB_CONFIG_PROBE": "own"}}, namespace="own")
    assert ray.get(read_env.remote("JOB_CONFIG_PROBE")) == "own"
    assert ray.get_runtime_context().namespace == "own"


def test_job_config_setters_check_what_they_are_given():
    config = JobConfig()
    config.set_metadata("k", "v")
    config.set_ray_namespace("n")
    config.set_runtime_env({"env_vars": {"A": "1"}})
    assert config.metadata == {"k": "v"} and config.ray_namespace == "n"
    assert config.runtime_env["env_vars"] == {"A": "1"}
    with pytest.raises(ValueError):
        JobConfig(default_actor_lifetime="forever")

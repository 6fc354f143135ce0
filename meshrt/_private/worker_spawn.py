"""Starting worker processes: which interpreter, which GPUs, on which host.

Mixed into the Controller (which provides workers, zygote, loop, config, _ids,
scheduler_of, spawn_on_host, spawn_background, log_keeper, job_output, _maybe_finalize).
A worker whose runtime_env names packages (``pip``/``uv``, the task's, the actor's or
the job's) runs the Python of their environment (pip_envs.py): on the head, the
controller makes it off its loop, then forks the worker; another host's agent does the
same on its own host. Until then the worker counts as starting.
"""

from __future__ import annotations

import json

from ..scheduler.policy import split_pool_key
from . import gpus, pip_envs
from .spawn import attach_pipes, worker_output


class WorkerSpawn:
    def _start_workers(self, pool_key: tuple, count: int, host: int = 0) -> None:
        gpu_ids, env_key = split_pool_key(pool_key)
        pip = self.pip_specs.get(env_key) if env_key else None
        for _ in range(count):
            if self.spawn_worker("task", pool_key, gpu_ids, host=host, pip=pip) is not None:
                self.scheduler_of(host).worker_starting(pool_key)

    def spawn_worker(self, kind: str, pool_key: tuple, gpu_ids: tuple, label: str = "worker",
                     host: int = 0, python: str = "", pip: dict | None = None):
        """``python``: the interpreter to run (with_python_executable); else ``pip``: the
        packages of its runtime_env, else the job's."""
        from .controller import WorkerRecord

        w = WorkerRecord(next(self._ids), kind, pool_key, gpu_ids, label=label)
        if not python:
            pip = pip or pip_envs.spec_in(self.config.get("runtime_env"))
        chosen = {"MESHRT_PYTHON": python} if python else {}  # (the zygote's child runs it: zygote.py)
        if host:  # (its agent maps the slots to its devices, and makes the environment: agent.py)
            env = {gpus.SLOTS: ",".join(str(g) for g in gpu_ids), **chosen}
            if pip is not None and not python:
                env[pip_envs.SPEC_ENV] = json.dumps(pip)
            if not self.spawn_on_host(w, host, env):
                return None
            self.workers[w.id] = w
            return w
        self.workers[w.id] = w
        env = {**gpus.worker_env(gpu_ids), **chosen}
        if pip is not None and not python:
            w.env_pending = True
            self.spawn_background(self._spawn_in_env(w, env, kind, pip))
        else:
            self._fork_worker(w, env, kind)
        return w

    async def _spawn_in_env(self, w, env: dict, kind: str, pip: dict) -> None:
        maker = self.__dict__.get("env_maker")
        if maker is None:
            maker = self.env_maker = pip_envs.EnvMaker()  # (closed with the controller: close_env_maker)
        made = await pip_envs.worker_env(maker, pip)
        w.env_pending = False
        if made is not None and self.workers.get(w.id) is w and self.zygote is not None and not self.stopping:
            self._fork_worker(w, {**env, **made}, kind)

    def close_env_maker(self) -> None:
        maker = self.__dict__.get("env_maker")
        if maker is not None:
            maker.close()

    def _fork_worker(self, w, env: dict, kind: str) -> None:
        out_fd, err_fd = self.zygote.spawn(w.id, env, kind)

        def eof():
            w.pipes_open -= 1
            self._maybe_finalize(w)

        w.pipes = attach_pipes(self.loop, out_fd, err_fd,
                               worker_output(w, self.config["log_to_driver"], self.log_keeper(w), self.job_output), eof)

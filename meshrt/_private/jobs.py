"""Drivers attached to a long-running head (``meshrt start --head``; client_driver.py):
each is a job of its own, as in Ray.

Mixed into the Controller. A driver asks to attach (``attach_driver``), is given a
worker id and a job id, and then connects as a worker does; it owns what it puts and
submits. Its tasks and actors carry the job in their runtime_env (job_context.py), so
the lines the cluster's processes print for it are sent to it (``JobOutput``). When its
connection ends, its job ends: the job's actors that are not detached (named ones too,
and those its tasks created) are killed, its tasks cancelled, and ``list_jobs`` shows it
finished. Detached actors stay, for the next driver to find by name.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from . import messages as m


@dataclass
class Job:
    job_id: str
    driver: int  # its driver's worker id
    details: dict  # pid, entrypoint, namespace, sys_path, cwd, runtime_env, logging_config
    start_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    end_ms: int | None = None
    conn: object = None


class Jobs:
    @property
    def jobs(self) -> dict:
        """Job id -> Job, of the drivers that attached (not the head's own)."""
        return self.__dict__.setdefault("_jobs", {})

    def rpc_attach_driver(self, caller, details: dict) -> tuple:
        from .controller import WorkerRecord

        w = WorkerRecord(next(self._ids), "driver", (), label="driver")
        w.pid = int(details["pid"])
        w.exit_code = 0  # (not our child: its end is its connection's)
        w.pipes_open = 0
        w.state = "busy"
        self.workers[w.id] = w
        job = Job(uuid.uuid4().hex[:8], w.id, details)
        w.job = job.job_id
        self.jobs[job.job_id] = job
        return w.id, job.job_id

    def driver_hello(self, w, conn, msg: m.Hello) -> None:
        """An attached driver's core connection: welcomed into its own job."""
        job = self.jobs[w.job]
        conn.peer_id = w.id
        conn.peer_pid = msg.pid
        w.conn = conn
        w.address = msg.address
        job.conn = conn
        d = job.details
        config = dict(self.welcome_config(0), job_id=job.job_id, namespace=d["namespace"], sys_path=d["sys_path"],
                      cwd=d["cwd"], runtime_env=None, logging_config=d.get("logging_config"), workspace=[])
        conn.send(m.Welcome(config))
        self.core.worker_connected(w.id, conn)

    def job_output(self, job_id: str, stream: str, prefix: str, lines: list) -> bool:
        """Lines printed for ``job_id``: to its driver (True), or printed here (False)."""
        job = self.jobs.get(job_id)
        if job is None:
            return False
        if job.end_ms is None and job.conn is not None and not job.conn.closed:
            job.conn.send(m.JobOutput(stream, prefix, tuple(lines)))
        return True  # (an ended job's lines are kept in the log files only)

    def driver_gone(self, w) -> None:
        """Its job ends (see the module docstring)."""
        job = self.jobs.get(getattr(w, "job", None))
        if job is None or job.end_ms is not None:
            return
        job.end_ms = int(time.time() * 1000)
        reason = f"the driver of job {job.job_id} (pid {w.pid}) went away"
        for rec in list(self.actors.values()):
            spec = rec.spec
            if rec.state != "dead" and not spec.detached and (spec.owner == w.id or job_of(spec) == job.job_id):
                self.on_kill_actor(None, m.KillActor(spec.actor_id, False, reason))
        for task_id, rec in list(self.tasks.items()):
            if job_of(rec.spec) == job.job_id or rec.spec.owner == w.id:
                self.on_cancel_task(None, m.CancelTask(task_id, False, True))
        for group in list(self.groups.values()):
            if group.creator == w.id and not group.detached and group.state != "REMOVED":
                self.rpc_remove_placement_group(w.id, group.pg_id)

    def job_rows(self) -> list[dict]:
        """``list_jobs`` rows of the attached drivers' jobs."""
        rows = []
        for job in self.jobs.values():
            d = job.details
            rows.append({
                "job_id": job.job_id, "type": "DRIVER", "status": "RUNNING" if job.end_ms is None else "SUCCEEDED",
                "entrypoint": d.get("entrypoint", ""), "start_time": job.start_ms, "end_time": job.end_ms,
                "driver_info": {"id": f"driver {job.driver}", "node_ip_address": self.config.get("hostname", ""),
                                "pid": str(d["pid"])},
                "driver_node_id": self.config["node_id"], "runtime_env": dict(d.get("runtime_env") or {}),
                "metadata": dict(d.get("metadata") or {}),
            })
        return rows


def job_of(spec) -> str | None:
    env = getattr(spec, "runtime_env", None)
    job = env.get("_job") if isinstance(env, dict) else None
    return job.get("job_id") if job else None

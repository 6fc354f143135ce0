"""What ``meshrt.util.state`` lists, as rows of plain data the controller knows.

Mixed into the Controller (which provides actors, workers, tasks, hosts, store,
node_id_of_host): ``rpc_state_<kind>`` answers ``list_<kind>`` with one dict per
actor, worker process, task or object, in Ray's field names and state words (the
last tasks that ended, too).
"""

from __future__ import annotations

import collections
import time

from ..objstore.serialization import error_from_payload
from ..scheduler import bundles
from ..scheduler.resources import from_units
from . import ids, labels, task_spans
from .jobs import job_of

_ACTOR_STATES = {"pending": "PENDING_CREATION", "alive": "ALIVE", "restarting": "RESTARTING", "dead": "DEAD"}


_ENDED_KEPT = 1000  # (the last tasks that ended, for list_tasks; Ray keeps a bounded history too)


class StateTables:
    def note_task_end(self, rec, w, how: str, error_type: str = "", error_message: str = "") -> None:
        """A task ended (FINISHED or FAILED, and how it failed): kept, the last
        ``_ENDED_KEPT``, for list_tasks."""
        ended = self.__dict__.get("ended_tasks")
        if ended is None:
            ended = self.__dict__["ended_tasks"] = collections.deque(maxlen=_ENDED_KEPT)
        now = int(time.time() * 1000)
        rec.events.append((how, now))
        ended.append(self._task_row(rec.spec.task_id, rec, w, how) | {
            "end_time_ms": now, "error_type": error_type or None, "error_message": error_message or None})

    def rpc_state_actors(self, caller: int) -> list:
        rows = []
        for actor_id, rec in list(self.actors.items()):
            spec = rec.spec
            w = self.workers.get(rec.worker) if rec.worker is not None else None
            rows.append({
                "actor_id": ids.to_hex(actor_id),
                "job_id": job_of(spec) or self.config["job_id"],
                "placement_group_id": _group_of(spec.resources),
                "class_name": spec.class_name,
                "state": _ACTOR_STATES.get(rec.state, rec.state.upper()),
                "name": spec.name or "",
                "ray_namespace": spec.namespace,
                "node_id": self.node_id_of_host(w.host if w is not None else spec.host),
                "pid": w.pid if w is not None and rec.state == "alive" else None,
                "is_detached": spec.detached,
                "required_resources": {k: from_units(v) for k, v in spec.resources},
                "num_restarts": rec.incarnation,
                "death_cause": _death_cause(rec),
                "repr_name": spec.label or spec.class_name,
            })
        return rows

    def rpc_state_workers(self, caller: int) -> list:
        return [{
            "worker_id": ids.to_hex(w.id) if w.id else "driver",
            "is_alive": w.state != "dead",
            "worker_type": "WORKER",
            "pid": w.pid,
            "node_id": self.node_id_of_host(w.host),
            "state": w.state.upper(),
            "actor_id": ids.to_hex(w.actor_id) if w.actor_id is not None else None,
            "running": w.label,
        } for w in list(self.workers.values())]

    async def rpc_state_tasks(self, caller: int) -> list:
        """The tasks below, and the actor calls and constructors that ran in each process
        (with when each task started), from the calls every process keeps (task_spans.py)."""
        return task_spans.with_calls(self.task_rows(), await self.calls_of_processes(caller), self.config["job_id"])

    def task_rows(self) -> list:
        """The tasks this controller scheduled: waiting, running, and the last that ended."""
        rows = list(self.__dict__.get("ended_tasks", ()))
        for task_id, rec in list(self.tasks.items()):
            w = self.workers.get(rec.worker) if rec.worker is not None else None
            if w is None:
                status = "PENDING_NODE_ASSIGNMENT"
            elif w.tasks and w.tasks[0] is rec:
                status = "RUNNING"
            else:
                status = "SUBMITTED_TO_WORKER"
            rows.append(self._task_row(task_id, rec, w, status))
        return rows

    def _task_row(self, task_id: int, rec, w, status: str) -> dict:
        return {
            "task_id": ids.to_hex(task_id),
            "job_id": job_of(rec.spec) or self.config["job_id"],
            "placement_group_id": _group_of(rec.spec.resources),
            "worker_id": ids.to_hex(w.id) if w is not None and w.id else None,
            "name": rec.spec.name,
            "func_or_class_name": rec.spec.func_name or rec.spec.name,
            "state": status,
            "type": "NORMAL_TASK",
            "node_id": self.node_id_of_host(w.host if w is not None else rec.host),
            "worker_pid": w.pid if w is not None else None,
            "attempt_number": rec.spec.attempt,
            "required_resources": {k: from_units(v) for k, v in rec.spec.resources},
            "parent_task_id": ids.to_hex(rec.spec.parent) if rec.spec.parent else None,
            "creation_time_ms": rec.events[0][1] if rec.events else None,
            "events": [{"state": state, "created_ms": ms} for state, ms in rec.events],
            "label_selector": labels.as_label_selector(rec.spec.labels),
            "fallback_strategy": {"options": [{"label_selector": labels.as_label_selector(s)}
                                              for s in rec.spec.fallback_labels]},
        }

    def rpc_state_jobs(self, caller: int) -> list:
        """This driver's job: the controller lives in the driver's process."""
        import os
        import sys

        c = self.config
        return [{
            "job_id": c["job_id"], "type": "DRIVER", "status": "RUNNING",
            "entrypoint": " ".join([os.path.basename(sys.executable), *sys.argv]),
            "start_time": self.started_ms,
            "driver_info": {"id": "driver", "node_ip_address": c.get("hostname", ""), "pid": str(os.getpid())},
            "driver_node_id": c["node_id"], "runtime_env": dict(c.get("runtime_env") or {}),
            "metadata": dict(c.get("metadata") or {}),
        }] + self.job_rows()

    async def rpc_state_objects(self, caller: int) -> list:
        records = (await self.store_service.call(self.store.summary))["objects"]
        node_id = self.node_id_of_host(0)
        return [{
            "object_id": ids.to_hex(r["key"], ids.OBJECT_HEX),
            "object_size": r["size"],
            "where": r["where"],
            "owner_worker": r["owner"],
            "pinned_by": dict(r["pins"]),
            "node_id": node_id,
        } for r in records]


def _death_cause(rec) -> str | None:
    if rec.state != "dead":
        return None
    if rec.death is not None:
        try:
            return str(error_from_payload(rec.death))
        except Exception:  # noqa: BLE001 - an error that cannot be read back: say so
            return "died (its error could not be read)"
    return rec.exit_reason or rec.kill_reason or "died"


def _group_of(units: tuple) -> str | None:
    found = bundles.bundle_of(units)
    return found[0] if found is not None else None

"""Which host's queue a task joins, and keeping the queues right as hosts come and go.

Mixed into the Controller. Every host has its own Scheduler over its own resources
(the head's is ``self.scheduler``; an agent's is ``HostRecord.scheduler``). A task
joins one host's queue when it is submitted (host_choice.py picks it, as Ray's
scheduler picks a node), moves to another host when its own has no room for it and
the other has (Ray's spillback), and to another host, or fails, when its host goes.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass, field

from .. import exceptions as exc
from ..objstore.serialization import system_error_payload
from ..scheduler import bundles
from ..scheduler.policy import env_of, env_units, split_pool_key
from ..scheduler.resources import Allocation
from . import ids, labels, pip_envs
from . import messages as m
from .cluster_nodes import fits_now

log = logging.getLogger("meshrt")


@dataclass
class TaskRecord:
    spec: m.TaskSpec
    units: tuple
    worker: int | None = None
    alloc: Allocation | None = None
    cancelled: bool = False
    force_killed: bool = False
    host: int = 0  # whose queue and pool it is in
    kill_reason: str | None = None  # why it was killed, when not by cancel(force=True)
    events: list = field(default_factory=list)  # [(state, ms)]: list_tasks(detail=True)'s events


class TaskHosts:
    """Needs from the Controller: node, scheduler, hosts, tasks, config, spreads_tasks,
    workers and its worker bookkeeping (_top_up, _release_worker_alloc, _set_idle,
    _hand_back, schedule)."""

    pipelined: set  # (set by the Controller) workers that were given tasks to queue behind their current one

    def scheduler_of(self, host_id: int):
        return self.hosts[host_id].scheduler if host_id else self.scheduler

    def node_of_host(self, host_id: int):
        return self.hosts[host_id].node if host_id else self.node

    def task_schedulers(self) -> list:
        """(host id, scheduler) of every host that may run tasks now, the head first."""
        return [(0, self.scheduler)] + [(h.id, h.scheduler) for h in self.hosts.values() if h.joined and not h.leaving]

    def check_feasible(self, units: tuple, what: str, actor: bool = False) -> None:
        """At the driver's call: an actor, on the head host; a task, on some host."""
        if bundles.bundle_of(units) is not None:
            return  # (checked against its bundle by the caller; the group may not be reserved yet)
        if actor or self.node.infeasible(units) is None:
            self.node.check_feasible(units, what, actor)
        else:
            self.hosts_able(units, what)

    def enqueue_task(self, spec: m.TaskSpec) -> None:
        """Put a submitted (or retried) task in the queue of the host chosen for it; a
        task no host can run fails now, naming why."""
        if bundles.bundle_of(spec.resources) is not None:
            spec = self.task_in_group(spec)  # (placement_groups.py)
            if spec is None:  # (waits for its group, or failed)
                return
        try:
            host_id = self.choose_task_host(spec)
        except ValueError as err:  # (TaskUnschedulableError is one)
            self._fail_task(spec, system_error_payload(err))
            return
        events = [("PENDING_ARGS_AVAIL", spec.created_ms)] if spec.created_ms else []  # (its owner's, until then)
        events.append(("PENDING_NODE_ASSIGNMENT", int(time.time() * 1000)))
        rec = self.tasks[spec.task_id] = TaskRecord(spec, spec.resources + self.env_units_of(spec), host=host_id,
                                                    events=events)
        self.scheduler_of(host_id).submit_task(spec.task_id, rec.units, spec.depth)

    def env_units_of(self, spec: m.TaskSpec) -> tuple:
        """A task whose runtime_env installs packages queues for workers of their
        environment (policy.ENV_RESOURCE); the job's own packages are every worker's."""
        pip = pip_envs.spec_in(spec.runtime_env)
        if pip is None or pip == pip_envs.spec_in(self.config.get("runtime_env")):
            return ()
        key = pip_envs.key_of(pip)
        self.pip_specs.setdefault(key, pip)
        return env_units(key)

    def _hand_back(self, back: list, w) -> None:
        """Tasks a worker gives back unstarted go first in line again; one cancelled
        meanwhile (its CancelTask went to that worker) fails now instead."""
        again = []
        for rec in back:
            rec.worker = None
            if rec.cancelled:
                del self.tasks[rec.spec.task_id]
                self._fail_task(rec.spec, system_error_payload(exc.TaskCancelledError(ids.to_hex(rec.spec.task_id))))
            else:
                again.append(rec)
        self.requeue_front(w, again)

    def requeue_front(self, w, recs: list) -> None:
        """Tasks worker ``w`` gave back unstarted: first in line again on its host, or
        placed afresh when that host is gone."""
        if w.host and (not self.hosts[w.host].alive or self.hosts[w.host].leaving):
            for rec in recs:
                del self.tasks[rec.spec.task_id]
                self.enqueue_task(rec.spec)
            return
        self.scheduler_of(w.host).requeue_front([r.spec.task_id for r in recs], w.units,
                                                [r.spec.depth for r in recs])

    def requeue_from_host(self, host) -> None:
        """A host went away: the tasks still queued there (not started) go to another
        host, or fail when none can run them (a hard affinity to it, say)."""
        queued = list(host.scheduler.task_units)
        for task_id in queued:
            host.scheduler.remove_task(task_id)
        for task_id in queued:
            rec = self.tasks.pop(task_id, None)
            if rec is not None:
                self.enqueue_task(rec.spec)

    def _fail_queued_startup(self, w, cause: str) -> None:
        tail = "\n".join("    " + line for line in w.stderr_tail)
        error = system_error_payload(exc.WorkerCrashedError(
            f"workers fail to start ({cause}); last lines of stderr:\n{tail}"))
        env = split_pool_key(w.pool_key)[1] if w.kind == "task" else ""
        for task_id in [t for t, rec in self.tasks.items()
                        if rec.worker is None and rec.host == w.host and env_of(rec.units) == env]:
            if self.scheduler_of(w.host).remove_task(task_id):
                self._fail_task(self.tasks.pop(task_id).spec, error)

    def _fail_task(self, spec: m.TaskSpec, error) -> None:
        if spec.num_returns == -1:
            self.send_worker(spec.owner, m.StreamEnd(spec.task_id, -1, error))
            self.send_worker(spec.owner, m.TaskReturn(spec.task_id, ()))
        else:
            self.send_worker(spec.owner, m.TaskReturn(spec.task_id, (error,) * spec.num_returns))

    def spill_queued_tasks(self) -> bool:
        """Ray's spillback: tasks queued on a host without room for them now move to a
        host that has room (after what it queued itself): the first of those that would
        wait go first. Only tasks packed for any host, with no affinity and not in a
        placement group, to a host whose labels match its selector. True when some moved
        (the caller schedules again)."""
        if not self.spreads_tasks:
            return False
        schedulers = self.task_schedulers()
        waiting = [(host_id, s) for host_id, s in schedulers if s.tasks]
        if not waiting:
            return False
        moved = False
        for dst_id, dst in schedulers:
            node = self.node_of_host(dst_id)
            held = [alloc for units, queue in dst.tasks.items() for alloc in _room(node, units, len(queue))]
            for src_id, src in waiting:
                if src_id != dst_id:
                    moved = self._spill(src_id, src, dst_id, dst, held) or moved
            for alloc in held:
                node.release(alloc)
        return moved

    def _spill(self, src_id: int, src, dst_id: int, dst, held: list) -> bool:
        """Move what ``dst`` has room for (taken into ``held``) of the tasks ``src``
        cannot start now."""
        src_node, node = self.node_of_host(src_id), self.node_of_host(dst_id)
        moved = False
        for units, queue in list(src.tasks.items()):
            if bundles.bundle_of(units) is not None:
                continue
            starts = _room(src_node, units, len(queue))  # (those its own host starts now stay)
            for alloc in starts:
                src_node.release(alloc)
            room = _room(node, units, len(queue) - len(starts))
            for task_id in list(itertools.islice(queue, len(starts), len(starts) + len(room))):
                rec = self.tasks.get(task_id)
                if rec is None or not _may_move(rec) or not self._labels_allow(rec.spec, src_id, dst_id):
                    continue
                depth = src.task_units[task_id][1]
                src.remove_task(task_id)
                rec.host = dst_id
                dst.submit_task(task_id, units, depth)
                held.append(room.pop())
                moved = True
            for alloc in room:
                node.release(alloc)
        return moved

    def _labels_allow(self, spec, src_id: int, dst_id: int) -> bool:
        """A task may spill to a host its hard label selector matches, and not from a
        host its soft one matches to one it does not."""
        there = self.labels_of_host(dst_id)
        if not labels.matches(there, self.effective_labels(spec)):
            return False
        return not spec.soft_labels or labels.matches(there, spec.soft_labels) or not labels.matches(
            self.labels_of_host(src_id), spec.soft_labels)

    def room_elsewhere(self, host_id: int, units: tuple) -> bool:
        """Another host that queues nothing has room for ``units`` now."""
        return self.spreads_tasks and any(
            other != host_id and not s.tasks and fits_now(self.node_of_host(other), units)
            for other, s in self.task_schedulers())

    def better_elsewhere(self, w) -> bool:
        """The next task that would queue behind busy worker ``w`` can move to another
        host with room now (so it is not queued behind ``w``: controller._top_up)."""
        if not self.spreads_tasks:
            return False
        queue = self.scheduler_of(w.host).tasks.get(w.units)
        first = self.tasks.get(next(iter(queue))) if queue else None
        return first is not None and _may_move(first) and self.room_elsewhere(w.host, w.units)

    def ask_back_pipelined(self) -> None:
        """Tasks queued behind a busy worker's current one (controller._top_up) cannot
        spill over: when another host has room for them, their worker is asked to hand
        them back (they go first in line again, and spill over from there)."""
        for worker_id in list(self.pipelined):
            w = self.workers.get(worker_id)
            if w is None or len(w.tasks) < 2 or w.conn is None:
                self.pipelined.discard(worker_id)
            elif (not w.giving_back and any(_may_move(rec) for rec in list(w.tasks)[1:])
                  and self.room_elsewhere(w.host, w.units)):
                w.giving_back = True
                w.conn.send(m.GiveBack())

    # -- a task's end, as its worker reports it ---------------------------------------------------

    def on_task_done(self, conn, msg: m.TaskDone) -> None:
        w = self.workers.get(conn.peer_id)
        rec = self.tasks.pop(msg.task_id, None)
        if rec is not None:
            self.note_task_end(rec, w, "FAILED" if msg.retry or msg.failed else "FINISHED",
                               msg.error_type, msg.error_message)
            self.note_task_env_end(w.host if w is not None else rec.host, rec.spec, rec.events, msg.error_type,
                                   msg.error_message)
        if w is not None and w.state == "busy":
            if rec is not None and rec in w.tasks:
                w.tasks.remove(rec)
            if msg.retiring:  # its max_calls: it exits now; what was queued behind goes back
                self._retire(w)
            elif w.tasks:
                w.label = w.tasks[0].spec.name
                self._top_up(w)
            else:
                self._release_worker_alloc(w)
                self._set_idle(w)
        if rec is not None and msg.retry and not rec.cancelled:
            self._requeue(rec)
        self.schedule()

    def _retire(self, w) -> None:
        back = [r for r in w.tasks if r.spec.task_id in self.tasks]
        w.tasks.clear()
        self._hand_back(back, w)
        self._release_worker_alloc(w)
        w.state = "retiring"  # (never idle again: its exit is no failure)

    def _requeue(self, rec, died: str | None = None) -> None:
        """Run a task again; where its worker ``died``, the driver is told, as Ray's is."""
        spec = rec.spec
        if died is not None:
            of = f" of {spec.max_retries}" if spec.max_retries >= 0 else "; max_retries=-1"
            log.warning("meshrt: the worker running %s %s; retrying it (retry %d%s)",
                        spec.name, died, spec.attempt + 1, of)
        self.enqueue_task(spec._replace(attempt=spec.attempt + 1))


def _may_move(rec: TaskRecord) -> bool:
    """A task that may run on another host than its own: packed for any host, with no
    affinity and not in a placement group's bundle."""
    return rec.spec.portable and rec.spec.affinity is None and bundles.bundle_of(rec.units) is None


_ROOM_COUNTED = 256  # (a host with room for more tasks of a shape than this waits for its workers, not room)


def _room(node, units: tuple, most: int) -> list:
    """Up to ``most`` allocations of ``units`` taken from ``node`` (the caller releases
    them). None for a task that asks for nothing: it always has room, so never moves."""
    taken: list = []
    if not units:
        return taken
    most = min(most, _ROOM_COUNTED)
    while len(taken) < most:
        alloc = node.try_acquire(units)
        if alloc is None:
            break
        taken.append(alloc)
    return taken

"""Which host's queue a task joins, and keeping the queues right as hosts come and go.

Mixed into the Controller. Every host has its own Scheduler over its own resources
(the head's is ``self.scheduler``; an agent's is ``HostRecord.scheduler``). A task
joins one host's queue when it is submitted, as Ray's scheduler picks a node:

- ``NodeAffinitySchedulingStrategy``: that node (a soft one only while it has room
  now; else as if no node were named). A hard one whose host left fails, naming it.
- Otherwise the head while it has room for it; once what the task asks for is taken
  there (running and queued work counted: CPUs, GPUs, custom resources), the host
  where it is least taken, the head first on a tie, so a burst of tasks spreads over
  the cluster.
- Only a host that can ever give the task's resources: one the head can never run
  (GPUs only agents have, a custom resource) goes to a host that can.

A task leaves the head only when its caller packed it for any host
(``TaskSpec.portable``: large arguments lent, not left in the head's store); the
driver does so once another host has joined (placement.task_portable).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import exceptions as exc
from ..objstore.serialization import system_error_payload
from ..scheduler import bundles
from ..scheduler.resources import UNIT, Allocation, from_units
from . import messages as m
from .cluster_nodes import fits_now


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


class TaskHosts:
    """Needs from the Controller: node, scheduler, hosts, tasks, config, _fail_task."""

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
        self.tasks[spec.task_id] = TaskRecord(spec, spec.resources, host=host_id)
        self.scheduler_of(host_id).submit_task(spec.task_id, spec.resources, spec.depth)

    def choose_task_host(self, spec) -> int:
        units, what = spec.resources, f"task {spec.name}"
        if spec.affinity is not None:
            node_id, soft = spec.affinity
            if node_id == self.config["node_id"]:
                if not soft:
                    self.node.check_feasible(units, what)
                    return 0
                if fits_now(self.node, units):
                    return 0
            host = self.host_of_node_id(node_id)
            usable = host is not None and host.joined and not host.leaving and spec.portable
            if usable and not soft:
                missing = host.node.infeasible(units)
                if missing is not None:
                    name, requested, have = missing
                    raise exc.TaskUnschedulableError(f"{what} (NodeAffinitySchedulingStrategy to host {host.name!r})",
                                                     name, from_units(requested), from_units(have))
                return host.id
            if usable and fits_now(host.node, units):
                return host.id
            if not soft:
                raise self.affinity_unmet(node_id, host)
        head_can = self.node.infeasible(units) is None
        if not spec.portable or not self.hosts:
            self.node.check_feasible(units, what)
            return 0
        able = self.hosts_able(units, what)
        if head_can and (not able or self.task_load(0, units) < 1.0):
            return 0
        candidates = ([0] if head_can else []) + [h.id for h in able]
        return min(candidates, key=lambda host_id: self.task_load(host_id, units))  # (ties: the first, the head)

    def task_load(self, host_id: int, units: tuple) -> float:
        """How full a host is for a task asking ``units``: of each resource it asks for
        (CPU when none), what is in use (tasks and actors) and what its queued tasks ask
        for, over the host's total; the fullest counts. (A task asking for no CPU counts
        as one CPU in the queue when the request is for CPU-less tasks.)"""
        node = self.node_of_host(host_id)
        queues = self.scheduler_of(host_id).tasks
        fullest = 0.0
        for name in [name for name, _ in units] or ["CPU"]:
            total = node.total.get(name, 0)
            if total <= 0:
                continue
            used = total - node.available.get(name, 0)
            queued = sum(len(queue) * (dict(shape).get(name, 0) or (0 if units else UNIT))
                         for shape, queue in queues.items())
            fullest = max(fullest, (used + queued) / total)
        return fullest

    def requeue_front(self, w, recs: list) -> None:
        """Tasks worker ``w`` gave back unstarted: first in line again on its host, or
        placed afresh when that host is gone."""
        if w.host and not self.hosts[w.host].alive:
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

"""Placement groups in the controller: reserving bundles on hosts, and what runs in them.

Mixed into the Controller. A group's bundles are reserved all at once or not at all
(a group half placed would hold resources nobody can use): each reserved bundle
takes its resources from its host and shows there under its own names
(scheduler/bundles.py), which the tasks and actors placed in it ask for. Until the
group is reserved, what is submitted into it waits here; a group that does not fit
now is retried whenever the controller schedules (something freed up, a host joined).

Strategies, as Ray's: ``STRICT_PACK`` all bundles on one host; ``PACK`` one host if
they fit there, else as few as they fit on; ``STRICT_SPREAD`` every bundle on a
different host; ``SPREAD`` different hosts where they fit, shared ones otherwise.
A group that could plainly never be placed (a bundle larger than any host, STRICT_PACK
beyond every host, STRICT_SPREAD with more bundles than hosts) fails at creation.

What asks for any bundle (index -1) takes the first with room when it comes; while
none has, it waits for one to free up (whichever frees first, as in Ray). When a host
is lost, its bundles are reserved again elsewhere and what was queued for them waits
(the other bundles keep serving); ``remove_placement_group`` kills what runs in it,
fails what waits for it, and gives its resources back.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from .. import exceptions as exc
from ..objstore.serialization import system_error_payload
from ..scheduler import bundles
from ..scheduler.resources import from_units
from . import labels
from . import messages as m


@dataclass
class GroupRecord:
    pg_id: str
    bundles: list  # normalized units of each bundle
    strategy: str
    name: str
    namespace: str
    state: str = "PENDING"  # PENDING | CREATED | RESCHEDULING (a host lost) | REMOVED (Ray's names)
    hosts: list = field(default_factory=list)  # host id per bundle; None while not reserved
    reserved: list = field(default_factory=list)  # the Allocation each bundle holds on its host
    waiting: list = field(default_factory=list)  # ("task", TaskSpec) | ("actor", actor id): for a bundle's host
    for_room: list = field(default_factory=list)  # the same, for any bundle (index -1) with room
    watchers: list = field(default_factory=list)  # futures of wait() calls, True once reserved
    selectors: list = field(default_factory=list)  # each bundle's node label selector (labels.py), or ()
    creator: int = 0  # the process that made it (an attached driver's end removes it: jobs.py)
    detached: bool = False  # lifetime="detached": it outlives that driver

    def __post_init__(self) -> None:
        self.hosts = [None] * len(self.bundles)
        self.reserved = [None] * len(self.bundles)
        self.selectors = list(self.selectors) or [()] * len(self.bundles)

    def table(self, node_id_of_host) -> dict:
        """As Ray's ``placement_group_table``."""
        return {
            "placement_group_id": self.pg_id, "name": self.name, "strategy": self.strategy, "state": self.state,
            "bundles": {i: {k: from_units(v) for k, v in b} for i, b in enumerate(self.bundles)},
            "bundles_to_node_id": {i: node_id_of_host(h) for i, h in enumerate(self.hosts) if h is not None},
        }


class PlacementGroups:
    """Needs from the Controller: loop, hosts, scheduler, task_schedulers, node_of_host,
    node_id_of_host, scheduler_of, tasks, workers, actors, enqueue_task, place_on_host,
    on_kill_actor, _actor_dead, schedule, kill_worker, _fail_task."""

    def __init__(self) -> None:
        self.groups: dict[str, GroupRecord] = {}
        self.pending_groups: list[GroupRecord] = []
        self.groups_for_room: dict[str, GroupRecord] = {}  # (those with any-bundle waiters: place_for_room)

    # -- requests ----------------------------------------------------------------------------

    def rpc_create_placement_group(self, caller: int, pg_id: str, bundle_list: list, strategy: str,
                                   name: str, namespace: str, selectors: tuple = (), detached: bool = False) -> None:
        if name and any(g.name == name and g.namespace == namespace and g.state != "REMOVED"
                        for g in self.groups.values()):
            raise ValueError(f"placement_group(name={name!r}): a placement group of that name already exists "
                             f"in namespace {namespace!r}; remove it first or pick another name")
        rec = GroupRecord(pg_id, [tuple(b) for b in bundle_list], strategy, name, namespace,
                          selectors=list(selectors), creator=caller or 0, detached=detached)
        never = self._never_fits(rec)
        if never:
            raise ValueError(never)
        self.groups[pg_id] = rec
        self.pending_groups.append(rec)
        self.schedule()

    def rpc_remove_placement_group(self, caller: int, pg_id: str) -> None:
        rec = self.groups.get(pg_id)
        if rec is None:
            raise ValueError(f"remove_placement_group: no placement group {pg_id} in this cluster")
        if rec.state == "REMOVED":
            return
        rec.state = "REMOVED"
        if rec in self.pending_groups:
            self.pending_groups.remove(rec)
        reason = f"its placement group {rec.name or pg_id} was removed (remove_placement_group)"
        waiting, rec.waiting, rec.for_room = rec.waiting + rec.for_room, [], []
        self.groups_for_room.pop(pg_id, None)
        for kind, item in waiting:
            self._group_refuses(kind, item, reason, removed=True)
        _tell(rec.watchers, False)
        self._end_group_work(pg_id, reason)
        for index in range(len(rec.bundles)):
            self._unreserve(rec, index)
        self.schedule()

    def rpc_placement_group_table(self, caller: int, pg_id: str | None) -> dict:
        if pg_id is not None:
            rec = self.groups.get(pg_id)
            return rec.table(self.node_id_of_host) if rec is not None else {}
        return {g.pg_id: g.table(self.node_id_of_host) for g in self.groups.values()}

    async def rpc_wait_placement_group(self, caller: int, pg_id: str, timeout: float | None) -> bool:
        """True once every bundle is reserved; False when the group is removed or
        ``timeout`` passes first (nothing is left waiting then)."""
        rec = self.groups.get(pg_id)
        if rec is None:
            raise ValueError(f"placement group {pg_id} is not one of this cluster's")
        if rec.state in ("CREATED", "REMOVED"):
            return rec.state == "CREATED"
        told = self.loop.create_future()
        rec.watchers.append(told)
        try:
            return await asyncio.wait_for(told, timeout)
        except asyncio.TimeoutError:
            return False
        finally:
            if told in rec.watchers:
                rec.watchers.remove(told)

    def rpc_get_placement_group(self, caller: int, name: str, namespace: str):
        """(id, bundles) of the live group of that name."""
        for g in self.groups.values():
            if g.name == name and g.namespace == namespace and g.state != "REMOVED":
                return g.pg_id, g.bundles
        raise ValueError(f"get_placement_group({name!r}): no placement group of that name in namespace "
                         f"{namespace!r}; placement_group_table() lists them")

    # -- what runs in a group ----------------------------------------------------------------

    def task_in_group(self, spec: m.TaskSpec):
        """A task asking for a group's bundle, with its bundle chosen; None when it waits
        for the group or failed (its group removed, say)."""
        units = self._bundle_units(("task", spec), spec.resources)
        return spec._replace(resources=units) if units is not None else None

    def place_group_actor(self, rec) -> None:
        """An actor in a group: on its bundle's host, or waiting for the group."""
        units = self._bundle_units(("actor", rec.spec.actor_id), rec.spec.resources)
        if units is None:
            return
        pg_id, index = bundles.bundle_of(units)
        host = self.groups[pg_id].hosts[index]
        rec.spec = rec.spec._replace(resources=units, host=host, waits_for_host=bool(host))
        if host:
            self.place_on_host(rec)
        else:
            self.scheduler.submit_actor(rec.spec.actor_id, units)

    def _bundle_units(self, waiter: tuple, units: tuple):
        pg_id, index = bundles.bundle_of(units)
        rec = self.groups.get(pg_id)
        if rec is None or rec.state == "REMOVED":
            gone = "was removed" if rec is not None else "is not one of this cluster's"
            self._group_refuses(*waiter, f"its placement group {pg_id} {gone}", removed=rec is not None)
            return None
        if index >= len(rec.bundles):
            self._group_refuses(*waiter, f"placement_group_bundle_index={index}: its placement group has "
                                         f"{len(rec.bundles)} bundles")
            return None
        if (rec.hosts[index] is None) if index >= 0 else all(h is None for h in rec.hosts):
            rec.waiting.append(waiter)  # (its bundle, or every bundle, is not reserved yet)
            return None
        if index >= 0:
            return units
        resolved = self._bundle_with_room(rec, units)
        if resolved is None:
            rec.for_room.append(waiter)  # (place_for_room: when a bundle frees up)
            self.groups_for_room[rec.pg_id] = rec
        return resolved

    def _bundle_with_room(self, rec: GroupRecord, units: tuple, held: list | None = None):
        """An any-bundle request for the first reserved bundle with room for it now, or
        None; what it would take is kept in ``held`` (to release) when given."""
        for index, host_id in enumerate(rec.hosts):
            if host_id is None:
                continue
            resolved = bundles.in_bundle(units, index)
            node = self.node_of_host(host_id)
            alloc = node.try_acquire(resolved)
            if alloc is not None:
                if held is None:
                    node.release(alloc)
                else:
                    held.append((node, alloc))
                return resolved
        return None

    def place_for_room(self) -> None:
        """From ``schedule``: any-bundle requests into the bundles with room now, in order."""
        for rec in list(self.groups_for_room.values()):
            held: list = []
            waiting, rec.for_room = rec.for_room, []
            for n, (kind, item) in enumerate(waiting):
                actor = self.actors.get(item) if kind == "actor" else None
                if kind == "actor" and (actor is None or actor.state == "dead"):
                    continue
                resolved = self._bundle_with_room(rec, item.resources if kind == "task" else actor.spec.resources,
                                                  held if kind == "task" else None)  # (an actor takes it now)
                if resolved is None:
                    rec.for_room = waiting[n:] + rec.for_room
                    break
                if kind == "task":
                    self.enqueue_task(item._replace(resources=resolved))
                else:
                    actor.spec = actor.spec._replace(resources=resolved)
                    self.place_group_actor(actor)
            for node, alloc in held:  # (the tasks take it for real as the hosts schedule next)
                node.release(alloc)
            if not rec.for_room:
                self.groups_for_room.pop(rec.pg_id, None)

    def take_waiting_task(self, task_id: int):
        """A task still waiting for its group (to cancel it): its spec, off the lists; or None."""
        for rec in self.groups.values():
            for queue in (rec.waiting, rec.for_room):
                for entry in queue:
                    if entry[0] == "task" and entry[1].task_id == task_id:
                        queue.remove(entry)
                        return entry[1]
        return None

    def drop_waiting_tasks_of(self, owner: int) -> None:
        """Its owner died: nobody is left to return to."""
        for rec in self.groups.values():
            rec.waiting = [e for e in rec.waiting if e[0] != "task" or e[1].owner != owner]
            rec.for_room = [e for e in rec.for_room if e[0] != "task" or e[1].owner != owner]

    def _group_refuses(self, kind: str, item, reason: str, removed: bool = False) -> None:
        """A task or actor cannot have its bundle; ``removed``: because the group was removed."""
        if kind == "task":
            error = exc.TaskPlacementGroupRemoved if removed else exc.TaskUnschedulableError
            self._fail_task(item, system_error_payload(error.because(f"task {item.name}", reason)))
        else:
            rec = self.actors.get(item)
            if rec is not None and rec.state != "dead":
                self._actor_dead(rec, reason, error=exc.ActorPlacementGroupRemoved if removed else None)

    def _end_group_work(self, pg_id: str, reason: str) -> None:
        """The group is removed: its queued tasks fail, its running ones and its actors are killed."""
        def in_group(units) -> bool:
            found = bundles.bundle_of(units)
            return found is not None and found[0] == pg_id

        for task_id, trec in list(self.tasks.items()):
            if not in_group(trec.units):
                continue
            if trec.worker is None:
                if self.scheduler_of(trec.host).remove_task(task_id):
                    del self.tasks[task_id]
                    self._group_refuses("task", trec.spec, reason, removed=True)
                continue
            trec.cancelled = trec.force_killed = True
            trec.kill_reason = reason
            w = self.workers.get(trec.worker)
            if w is not None and w.pid:
                self.kill_worker(w)
        for arec in list(self.actors.values()):
            if in_group(arec.spec.resources) and arec.state != "dead":
                self.on_kill_actor(None, m.KillActor(arec.spec.actor_id, False, reason))

    # -- reserving -----------------------------------------------------------------------------

    def reserve_pending_groups(self) -> None:
        """Reserve the groups waiting for room, oldest first (from ``schedule``)."""
        for rec in list(self.pending_groups):
            plan = self._plan(rec, self._live_nodes())
            if plan is None:
                continue
            for index, (host_id, alloc) in plan.items():
                rec.hosts[index], rec.reserved[index] = host_id, alloc
                node = self.node_of_host(host_id)
                node.add_group(bundles.bundle_resources(rec.bundles[index], rec.pg_id, index),
                               bundles.gpu_pool(rec.pg_id, index) if alloc.gpus else "", alloc.gpus)
            rec.state = "CREATED"
            self.pending_groups.remove(rec)
            _tell(rec.watchers, True)
            waiting, rec.waiting = rec.waiting, []
            for kind, item in waiting:
                if kind == "task":
                    self.enqueue_task(item)
                elif item in self.actors and self.actors[item].state != "dead":
                    self.place_group_actor(self.actors[item])

    def groups_lost_host(self, host_id: int) -> None:
        """A host went away: its bundles are reserved again elsewhere."""
        for rec in self.groups.values():
            if rec.state == "REMOVED" or host_id not in rec.hosts:
                continue
            for index, bundle_host in enumerate(rec.hosts):
                if bundle_host == host_id:
                    rec.hosts[index] = rec.reserved[index] = None
            rec.state = "RESCHEDULING"
            if rec not in self.pending_groups:
                self.pending_groups.append(rec)

    def _unreserve(self, rec: GroupRecord, index: int) -> None:
        host_id, alloc = rec.hosts[index], rec.reserved[index]
        rec.hosts[index] = rec.reserved[index] = None
        if host_id is None or (host_id and not self.hosts[host_id].alive):
            return
        node = self.node_of_host(host_id)
        node.remove_group(list(bundles.bundle_resources(rec.bundles[index], rec.pg_id, index)) +
                          [bundles.gpu_pool(rec.pg_id, index)])
        node.release(alloc)

    def _live_nodes(self) -> list:
        """(host id, NodeResources) of the hosts that may hold bundles, the head first."""
        return [(host_id, self.node_of_host(host_id)) for host_id, _ in self.task_schedulers()]

    def _never_fits(self, rec: GroupRecord) -> str | None:
        """Why the group could never be placed, where that is plain from the hosts'
        totals (a bundle larger than any host, ...); a group that might fit waits."""
        live = self._live_nodes()
        totals = [dict(node.total) for _, node in live]
        summed = bundles.summed(rec.bundles)
        why = None
        for index, bundle in enumerate(rec.bundles):
            if not any(bundles.within(bundle, total) for total in totals):
                why = f"bundle {index} is larger than any host"
                break
            wanted = rec.selectors[index]
            if wanted and not any(labels.matches(self.labels_of_host(host_id), wanted) for host_id, _ in live):
                seen = labels.by_node([self.labels_of_host(host_id) for host_id, _ in live])
                why = f"no host's labels match bundle {index}'s label selector {labels.describe(wanted)} ({seen})"
                break
        else:
            if rec.strategy == "STRICT_PACK" and not any(bundles.within(summed, total) for total in totals):
                why = "no one host has room for all of them (STRICT_PACK)"
            elif rec.strategy == "STRICT_SPREAD" and len(rec.bundles) > len(totals):
                why = f"STRICT_SPREAD needs a host per bundle ({len(rec.bundles)} bundles, {len(totals)} hosts)"
            elif not bundles.within(summed, {n: sum(t.get(n, 0) for t in totals) for n, _ in summed}):
                why = "the hosts together have less than the bundles ask for"
        if why is None:
            return None
        shown = [{k: from_units(v) for k, v in b} for b in rec.bundles]
        hosts = [{k: from_units(v) for k, v in t.items() if k in dict(summed)} for t in totals]
        return (f"placement_group({shown}, strategy={rec.strategy!r}) can never be placed: {why} (the cluster's "
                f"hosts have {hosts}); ask for less, pick another strategy, or add hosts (meshrt agent) first")

    def _plan(self, rec: GroupRecord, nodes: list) -> dict | None:
        """{bundle index: (host id, Allocation taken)} for the bundles not reserved yet,
        all of them or None (then nothing is taken)."""
        missing = sorted((i for i, h in enumerate(rec.hosts) if h is None),
                         key=lambda i: -sum(amount for _, amount in rec.bundles[i]))
        placed = [h for h in rec.hosts if h is not None]
        plan: dict = {}
        if rec.strategy in ("PACK", "STRICT_PACK"):
            ordered = sorted(nodes, key=lambda n: n[0] not in placed)  # (where bundles are, first)
            if rec.strategy == "STRICT_PACK" and placed:
                ordered = [n for n in nodes if n[0] == placed[0]]
            for host_id, node in ordered:
                if self._take_all(plan, missing, host_id, node, rec):
                    return plan
            if rec.strategy == "STRICT_PACK":
                return None
        for index in missing:
            used = placed + [h for h, _ in plan.values()]
            if rec.strategy == "PACK":
                choices = sorted(nodes, key=lambda n: n[0] not in used)
            else:  # (spread: the hosts with fewest of its bundles first, then the emptiest)
                choices = sorted(nodes, key=lambda n: (used.count(n[0]), _cpu_taken(n[1])))
                if rec.strategy == "STRICT_SPREAD":
                    choices = [n for n in choices if n[0] not in used]
            if not any(self._take_all(plan, [index], host_id, node, rec) for host_id, node in choices):
                _give_back(plan, nodes)
                return None
        return plan

    def _take_all(self, plan: dict, indices: list, host_id: int, node, rec: GroupRecord) -> bool:
        taken = []
        there = self.labels_of_host(host_id)
        for index in indices:
            alloc = node.try_acquire(rec.bundles[index]) if labels.matches(there, rec.selectors[index]) else None
            if alloc is None:
                for alloc in taken:
                    node.release(alloc)
                return False
            taken.append(alloc)
        for index, alloc in zip(indices, taken, strict=True):
            plan[index] = (host_id, alloc)
        return True


def _tell(watchers: list, created: bool) -> None:
    for told in watchers:
        if not told.done():
            told.set_result(created)
    watchers.clear()


def _give_back(plan: dict, nodes: list) -> None:
    by_host = dict(nodes)
    for host_id, alloc in plan.values():
        by_host[host_id].release(alloc)
    plan.clear()


def _cpu_taken(node) -> float:
    total = node.total.get("CPU", 0)
    return 1.0 - node.available.get("CPU", 0) / total if total else 1.0

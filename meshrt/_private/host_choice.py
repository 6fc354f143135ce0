"""Which host a task or an actor goes to, as Ray's scheduling strategies pick a node.

Mixed into the Controller. Only hosts that can ever give what is asked for count
(GPUs only agents have, a custom resource); the head is host 0.

- ``NodeAffinitySchedulingStrategy``: that node (a soft one only while it has room
  now; else as if no node were named). A hard one whose host left fails, naming it.
- Default, with resources: the head while it has room; once what it asks for is
  taken there (running work, queued tasks and waiting actors counted: CPUs, GPUs,
  custom resources), the host where it is least taken, the head first on a tie, so
  a burst spreads over the cluster. An actor goes to a host with room now when one
  has it.
- Default, asking for nothing (Ray's default actor: 0 CPUs to run): the hosts in
  turn. Ray picks a random node for these; a rotation spreads them as evenly.
- ``"SPREAD"``: the hosts in turn, skipping those without room now while some have it.
- Node labels (``label_selector``, ``NodeLabelSchedulingStrategy``): only the hosts
  whose labels match the hard selector count, and of those the ones that match the
  soft one too, when any do (labels.py).

A task or actor leaves the head only when its caller packed it for any host (its
large arguments lent, not left in the head's store: placement.py), which callers do
once another host has joined.
"""

from __future__ import annotations

from .. import exceptions as exc
from ..scheduler.resources import UNIT, from_units
from . import labels
from .cluster_nodes import fits_now


class HostChoice:
    """Needs from the Controller: node, config, hosts and what ClusterNodes and TaskHosts give."""

    _turn = 0  # where the next rotation (SPREAD, actors asking for nothing) starts

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
        if not spec.portable or not self.hosts:
            if spec.labels and labels.first_met(spec.labels, spec.fallback_labels, [self.labels]) is None:
                raise self.labels_unmet(what, spec.labels, exc.TaskUnschedulableError, [0], spec.fallback_labels)
            self.node.check_feasible(units, what)
            return 0
        candidates = self._labelled(self._able(units, what, exc.TaskUnschedulableError), spec.labels,
                                    spec.soft_labels, what, exc.TaskUnschedulableError, spec.fallback_labels)
        if spec.spread:
            return self._in_turn(candidates, lambda host_id: self.task_load(host_id, units) < 1.0)
        if candidates[0] == 0 and (len(candidates) == 1 or self.task_load(0, units) < 1.0):
            return 0
        return min(candidates, key=lambda host_id: self.task_load(host_id, units))  # (ties: the first, the head)

    def choose_actor_host(self, units: tuple, what: str, spread: bool, hard: tuple = (), soft: tuple = (),
                          fallbacks: tuple = ()) -> int:
        """The host an actor the controller places (ActorSpec.host_policy) starts on."""
        candidates = self._labelled(self._able(units, what, exc.ActorUnschedulableError), hard, soft, what,
                                    exc.ActorUnschedulableError, fallbacks)
        free = [host_id for host_id in candidates if fits_now(self.node_of_host(host_id), units)]
        if spread or not any(amount for _, amount in units):
            return self._in_turn(candidates, free.__contains__)
        if free:
            return min(free, key=lambda host_id: self.task_load(host_id, units))  # (ties: the head)
        return min(candidates, key=lambda host_id: self.task_load(host_id, units))

    def rpc_host_for(self, caller: int, units: tuple, what: str, spread: bool = False, hard: tuple = (),
                     soft: tuple = (), fallbacks: tuple = ()) -> int:
        """At the caller's line: the host of an actor the head host can never run (or
        with a soft affinity that cannot be met, or node labels to match), so that what
        no host has fails there."""
        return self.choose_actor_host(units, what, spread, hard, soft, fallbacks)

    def _labelled(self, candidates: list, hard: tuple, soft: tuple, what: str, unschedulable,
                  fallbacks: tuple = ()) -> list:
        """The hosts of ``candidates`` whose labels match ``hard`` (where none does, the
        first of ``fallbacks`` that some do); of those, the ones that match ``soft`` too
        when there are any (Ray's label selectors: labels.py)."""
        if hard:
            wanted = labels.first_met(hard, fallbacks, [self.labels_of_host(h) for h in candidates])
            if wanted is None:
                raise self.labels_unmet(what, hard, unschedulable, candidates, fallbacks)
            candidates = [h for h in candidates if labels.matches(self.labels_of_host(h), wanted)]
        if soft:
            preferred = [h for h in candidates if labels.matches(self.labels_of_host(h), soft)]
            return preferred or candidates
        return candidates

    def labels_unmet(self, what: str, hard: tuple, unschedulable, able: list, fallbacks: tuple = ()):
        hosts = [0] + [h.id for h in self._joined_hosts()]
        seen = labels.by_node([self.labels_of_host(h) for h in hosts])
        also = "" if len(able) == len(hosts) else " among the nodes that have the resources it asks for"
        nor = (" nor its fallback_strategy's " + ", ".join(labels.describe(f) for f in fallbacks)) if fallbacks else ""
        return unschedulable.because(what, f"no node's labels match its label selector {labels.describe(hard)}"
                                           f"{nor}{also}; the nodes' labels are {seen} (meshrt.nodes() shows them: "
                                           f"init(labels=...) for the head, meshrt agent --labels for a host)")

    def effective_labels(self, spec) -> tuple:
        """The selector a task runs by: its own, or (no node matching that) the first of
        its fallbacks some node matches."""
        if not spec.fallback_labels:
            return spec.labels
        hosts = [0] + [h.id for h in self._joined_hosts()]
        return labels.first_met(spec.labels, spec.fallback_labels,
                                [self.labels_of_host(h) for h in hosts]) or spec.labels

    def _able(self, units: tuple, what: str, unschedulable) -> list:
        """Ids of the hosts that can ever give ``units``, the head first."""
        head = [0] if self.node.infeasible(units) is None else []
        return head + [h.id for h in self.hosts_able(units, what, unschedulable)]

    def _in_turn(self, candidates: list, has_room) -> int:
        """The next of ``candidates`` in rotation that has room, or just the next."""
        start = self._turn % len(candidates)
        order = candidates[start:] + candidates[:start]
        chosen = next((host_id for host_id in order if has_room(host_id)), order[0])
        self._turn = candidates.index(chosen) + 1
        return chosen

    def task_load(self, host_id: int, units: tuple) -> float:
        """How full a host is for a task or actor asking ``units``: of each resource it
        asks for (CPU when none), what is in use (tasks and actors), what its queued
        tasks and the actors waiting there ask for, over the host's total; the fullest
        counts. (A task asking for no CPU counts as one CPU in the queue when the
        request is for CPU-less tasks.)"""
        node = self.node_of_host(host_id)
        queues = self.scheduler_of(host_id).tasks
        waiting = self._waiting_actors(host_id)
        fullest = 0.0
        for name in [name for name, _ in units] or ["CPU"]:
            total = node.total.get(name, 0)
            if total <= 0:
                continue
            used = total - node.available.get(name, 0)
            queued = sum(len(queue) * (dict(shape).get(name, 0) or (0 if units else UNIT))
                         for shape, queue in queues.items())
            queued += sum(dict(shape).get(name, 0) for shape in waiting)
            fullest = max(fullest, (used + queued) / total)
        return fullest

    def _waiting_actors(self, host_id: int) -> list:
        """What the actors waiting for room on the host ask for (so that waiting actors
        spread over the hosts rather than pile onto one)."""
        if not host_id:
            return list(self.scheduler.actors.values())
        recs = (self.actors.get(actor_id) for actor_id in self.hosts[host_id].waiting)
        return [rec.spec.resources for rec in recs if rec is not None]

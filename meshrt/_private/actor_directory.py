"""The controller's half that knows actors: placement, names, restarts, deaths.

An actor moves pending -> alive -> (restarting -> alive)* -> dead. Every change is
published as an ActorState to the processes that watch it (its callers), which is
how they learn where to send calls and when to fail or retry them.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field

from .. import exceptions as exc
from ..objstore.serialization import Payload, error_from_payload, system_error_payload
from ..scheduler import bundles
from ..scheduler.resources import Allocation
from . import ids, pip_envs
from . import messages as m
from .cluster_nodes import fits_now

log = logging.getLogger("meshrt")
_MOVED_PER_PASS = 16


@dataclass
class ActorRecord:
    spec: m.ActorSpec
    restarts_left: int
    state: str = "pending"  # pending | alive | restarting | dead
    worker: int | None = None
    incarnation: int = 0
    alloc: Allocation | None = None
    death: Payload | None = None
    subscribers: set = field(default_factory=set)
    kill_reason: str | None = None
    kill_restart: bool = False
    exit_reason: str | None = None


class ActorDirectory:
    """Mixed into the Controller (which provides workers, scheduler, send_worker ...)."""

    def __init__(self) -> None:
        self.actors: dict[int, ActorRecord] = {}
        self.names: dict[tuple[str, str], int] = {}
        self.early_watchers: dict[int, set[int]] = {}

    def actor_handlers(self) -> dict:
        return {
            m.CreateActor: self.on_create_actor,
            m.ActorStarted: self.on_actor_started,
            m.WatchActor: self.on_watch_actor,
            m.KillActor: self.on_kill_actor,
            m.ActorExiting: self.on_actor_exiting,
        }

    # -- creation ------------------------------------------------------------------------

    def on_create_actor(self, conn, msg: m.CreateActor) -> None:
        spec = msg.spec
        rec = ActorRecord(spec, spec.max_restarts)
        rec.subscribers.add(spec.owner)
        rec.subscribers |= self.early_watchers.pop(spec.actor_id, set())
        self.actors[spec.actor_id] = rec
        if spec.deps and any(p.is_error for _, p in spec.deps):
            bad = next(p for _, p in spec.deps if p.is_error)
            self._actor_dead(rec, f"an argument of its constructor failed: {error_from_payload(bad)}")
            return
        if bundles.bundle_of(spec.resources) is not None:
            self.place_group_actor(rec)  # (placement_groups.py)
            self.schedule()
            return
        if spec.host_policy:
            self.place_by_policy(rec)
            self.schedule()
            return
        if spec.host:
            self.place_on_host(rec)
            return
        try:
            self.check_feasible(spec.resources, f"actor {spec.class_name}", actor=True)
        except exc.ActorUnschedulableError as err:
            self._actor_dead(rec, str(err))
            return
        self.scheduler.submit_actor(spec.actor_id, spec.resources)
        self.schedule()

    def place_by_policy(self, rec: ActorRecord) -> None:
        """An actor whose caller left its host to us: on the host picked now among those
        in the cluster (host_choice.py); again at each restart, as Ray restarts an actor
        on any node, so one whose host went away starts on another."""
        spec = rec.spec
        try:
            host_id = self.choose_actor_host(spec.resources, f"actor {spec.class_name}", spec.host_policy == "spread",
                                             spec.labels, spec.soft_labels, spec.fallback_labels)
        except exc.ActorUnschedulableError as err:
            self._actor_dead(rec, str(err))
            return
        rec.spec = spec._replace(host=host_id, waits_for_host=bool(host_id))
        if host_id:
            self.place_on_host(rec)
        else:
            self.scheduler.submit_actor(spec.actor_id, spec.resources)

    def host_in_driver(self, spec: m.ActorSpec) -> None:
        """An actor living in the driver's own process (driver_actors.py): alive at once,
        on worker 0, and never restarted."""
        rec = ActorRecord(spec, 0, state="alive", worker=0)
        rec.subscribers |= self.early_watchers.pop(spec.actor_id, set())
        self.actors[spec.actor_id] = rec
        self._publish(rec)

    def driver_actor_ended(self, actor_id: int, reason: str) -> None:
        rec = self.actors.get(actor_id)
        if rec is not None and rec.state != "dead":
            self._actor_dead(rec, reason)

    def place_on_host(self, rec: ActorRecord) -> None:
        """A mesh process bound to an agent's host: placed there at once, or it fails."""
        spec = rec.spec
        host = self.hosts.get(spec.host)
        if host is None or not host.alive:
            named = f"host {host.name!r} (host {spec.host})" if host is not None else f"host {spec.host}"
            self._actor_dead(rec, f"its host, {named}, is not in the cluster any more")
            return
        alloc = host.node.try_acquire(spec.resources)
        if alloc is None and spec.waits_for_host and host.node.infeasible(spec.resources) is None:
            host.waiting.append(spec.actor_id)  # (placed when an actor there frees enough: place_waiting)
            return
        if alloc is None and spec.waits_for_host:
            self._actor_dead(rec, f"host {host.name!r} never has the resources it asks for "
                                  f"(it has {host.node.as_floats('total')} in all)")
            return
        if alloc is None:
            self._actor_dead(rec, f"host {host.name!r} has not enough free resources for it "
                                  f"(it offers {host.node.as_floats('available')})")
            return
        rec.alloc = alloc
        w = self.spawn_worker("actor", ("actor", spec.actor_id), alloc.gpu_ids, label=spec.label or spec.class_name,
                              host=spec.host, python=spec.python, pip=pip_envs.spec_in(spec.runtime_env))
        if w is None:
            host.node.release(alloc)
            rec.alloc = None
            self._actor_dead(rec, f"its host {host.name!r} went away")
            return
        w.actor_id = spec.actor_id
        rec.worker = w.id

    def place_waiting(self, host) -> None:
        """Resources freed up on ``host``: start the actors waiting for them that fit now."""
        for rec in self._take_waiting(host):
            self.place_on_host(rec)  # (one that still does not fit waits again)

    def move_waiting_actors(self) -> None:
        """Actors the controller placed (host_policy) that wait for room on a host that
        has none go to another host that has room now, as Ray places a pending actor
        on whichever node frees up first. (The first few of each host per pass: this
        runs at every scheduling pass.)"""
        waiting = [(0, self.node, list(itertools.islice(self.scheduler.actors, _MOVED_PER_PASS)))]
        waiting += [(h.id, h.node, h.waiting[:_MOVED_PER_PASS]) for h in self.hosts.values() if h.waiting]
        if not any(actor_ids for _, _, actor_ids in waiting):
            return
        nodes = [(host_id, self.node_of_host(host_id)) for host_id, _ in self.task_schedulers()]
        for host_id, node, actor_ids in waiting:
            for actor_id in actor_ids:
                rec = self.actors.get(actor_id)
                if (rec is None or not rec.spec.host_policy or rec.worker is not None or rec.state == "dead"
                        or fits_now(node, rec.spec.resources)):
                    continue
                if not any(other != host_id and fits_now(elsewhere, rec.spec.resources) for other, elsewhere in nodes):
                    continue
                if host_id:
                    self.hosts[host_id].waiting.remove(actor_id)
                else:
                    self.scheduler.remove_actor(actor_id)
                self.place_by_policy(rec)

    def fail_waiting(self, host, reason: str) -> None:
        for rec in self._take_waiting(host):
            if bundles.bundle_of(rec.spec.resources) is not None:
                self.place_group_actor(rec)  # (waits for its bundle's new host)
            elif rec.spec.host_policy:
                self.place_by_policy(rec)  # (on a host still in the cluster)
            else:
                self._actor_dead(rec, reason)

    def _take_waiting(self, host) -> list:
        """The records still waiting on ``host`` (not killed meanwhile), off its list."""
        waiting, host.waiting = host.waiting, []
        recs = (self.actors.get(actor_id) for actor_id in waiting)
        return [rec for rec in recs if rec is not None and rec.state != "dead" and rec.worker is None]

    def _node_of(self, rec: ActorRecord):
        host = self.hosts.get(rec.spec.host) if rec.spec.host else None
        return host.node if host is not None else self.node

    def place_actor(self, actor_id: int, alloc: Allocation) -> None:
        rec = self.actors.get(actor_id)
        if rec is None or rec.state == "dead":
            self.node.release(alloc)
            return
        rec.alloc = alloc
        w = self.spawn_worker("actor", ("actor", actor_id), alloc.gpu_ids, label=rec.spec.label or rec.spec.class_name,
                              python=rec.spec.python, pip=pip_envs.spec_in(rec.spec.runtime_env))
        w.actor_id = actor_id
        rec.worker = w.id

    def actor_worker_ready(self, w) -> None:
        rec = self.actors.get(w.actor_id)
        if rec is None or rec.worker != w.id or rec.state == "dead":
            w.conn.send(m.Exit("its actor is gone"))
            return
        if rec.kill_reason is not None:  # killed before its process was up: the kill lands now
            w.conn.send(m.Exit(rec.kill_reason))
            return
        w.state = "busy"
        self.send_code(w, rec.spec.code_id)
        w.conn.send(m.StartActor(rec.spec, rec.incarnation, rec.alloc.gpu_ids if rec.alloc else ()))

    def on_actor_started(self, conn, msg: m.ActorStarted) -> None:
        rec = self.actors.get(msg.actor_id)
        if rec is None or msg.incarnation != rec.incarnation or rec.state == "dead":
            return
        w = self.workers.get(rec.worker) if rec.worker is not None else None
        err = error_from_payload(msg.error) if msg.error is not None else None
        setup_failed = isinstance(err, exc.RuntimeEnvSetupError) and not isinstance(err, exc.TaskError)  # (meshrt's)
        if w is not None and setup_failed:
            self.note_env_failed(w.host, rec.spec.runtime_env, w.spawned_ms, str(err))
        elif w is not None:  # (set up; a constructor that raised, even a RuntimeEnvSetupError of its own, came after)
            self.note_env_ran(w.host, rec.spec.runtime_env, w.spawned_ms)
        if err is not None:
            cause = getattr(err, "cause", None) or err
            if setup_failed:  # (Ray's error for its calls, too)
                self._actor_dead(rec, f"its runtime_env could not be set up: {cause}", creation_error=err,
                                 error=exc.ActorEnvSetupError)
            else:
                self._actor_dead(rec, f"its constructor raised {type(cause).__name__}: {cause}", creation_error=err)
            if w is not None and w.conn is not None:
                w.conn.send(m.Exit("its actor failed to start"))
            return
        if msg.label and w is not None and not rec.spec.label:  # (a mesh's processes keep theirs)
            w.label = msg.label
        rec.state = "alive"
        self._publish(rec)

    # -- watching ------------------------------------------------------------------------

    def on_watch_actor(self, conn, msg: m.WatchActor) -> None:
        caller = conn.peer_id
        rec = self.actors.get(msg.actor_id)
        if rec is None:  # the handle overtook its creation message
            self.early_watchers.setdefault(msg.actor_id, set()).add(caller)
            return
        rec.subscribers.add(caller)
        if rec.state != "pending":
            self.send_worker(caller, self._state_msg(rec))

    def _state_msg(self, rec: ActorRecord) -> m.ActorState:
        w = self.workers.get(rec.worker) if rec.worker is not None else None
        return m.ActorState(
            rec.spec.actor_id, rec.state, rec.worker or 0,
            w.address if w is not None else None, rec.incarnation, rec.death,
        )

    def _publish(self, rec: ActorRecord) -> None:
        msg = self._state_msg(rec)
        for sub in list(rec.subscribers):
            self.send_worker(sub, msg)

    # -- ending ----------------------------------------------------------------------------

    def on_kill_actor(self, conn, msg: m.KillActor) -> None:
        rec = self.actors.get(msg.actor_id)
        if rec is None or rec.state == "dead":
            return
        if rec.worker == 0:  # in the driver's process: its thread stops serving (no restart)
            self.core.driver_actors.end(rec.spec.actor_id, msg.reason)
            return
        w = self.workers.get(rec.worker) if rec.worker is not None else None
        if w is None:  # not placed yet (pending or between incarnations)
            if not msg.restart:
                self.scheduler.remove_actor(rec.spec.actor_id)
                self._actor_dead(rec, msg.reason)
            return
        rec.kill_reason = msg.reason
        rec.kill_restart = msg.restart
        if not msg.restart:  # (as Ray: the name is free at once, not when the process is gone)
            self._release_name(rec)
        if w.pid:
            self.kill_worker(w)
        elif w.conn is not None:
            w.conn.send(m.Exit(msg.reason))
        elif w.env_pending and not w.host:  # (its packages still install: it ends now, and is never started)
            w.lost_reason = msg.reason
            self._finalize(w)

    def on_actor_exiting(self, conn, msg: m.ActorExiting) -> None:
        rec = self.actors.get(msg.actor_id)
        if rec is not None:
            rec.exit_reason = msg.reason

    def actor_worker_died(self, w, cause: str) -> None:
        rec = self.actors.get(w.actor_id)
        if rec is None or rec.worker != w.id:
            return
        if rec.alloc is not None:
            self._node_of(rec).release(rec.alloc)
            rec.alloc = None
            host = self.hosts.get(rec.spec.host) if rec.spec.host else None
            if host is not None and host.waiting and host.alive:
                self.place_waiting(host)
        rec.worker = None
        if rec.state == "dead":
            return
        reason = rec.exit_reason or rec.kill_reason or cause
        tail = () if (rec.exit_reason or rec.kill_reason) else tuple(w.stderr_tail)
        restart = (
            rec.exit_reason is None
            and (rec.kill_reason is None or rec.kill_restart)
            and rec.restarts_left != 0
        )
        rec.kill_reason = None
        rec.exit_reason = None
        if not restart:
            self._actor_dead(rec, reason, tail)
            return
        if rec.restarts_left > 0:
            rec.restarts_left -= 1
        rec.incarnation += 1
        rec.state = "restarting"
        rec.death = system_error_payload(exc.ActorUnavailableError(
            ids.to_hex(rec.spec.actor_id), rec.spec.class_name, f"{reason}; it is being restarted", tail))
        self._publish(rec)
        if bundles.bundle_of(rec.spec.resources) is not None:
            self.place_group_actor(rec)  # (in its bundle, wherever the group holds it now)
        elif rec.spec.host_policy:
            self.place_by_policy(rec)
        elif rec.spec.host:
            self.place_on_host(rec)
        else:
            self.scheduler.submit_actor(rec.spec.actor_id, rec.spec.resources)

    def _actor_dead(self, rec: ActorRecord, reason: str, tail=(), creation_error=None, error=None) -> None:
        rec.state = "dead"
        rec.death = system_error_payload((error or exc.ActorDiedError)(
            ids.to_hex(rec.spec.actor_id), rec.spec.class_name, reason, tail, creation_error))
        self._publish(rec)
        self._release_name(rec)

    def _release_name(self, rec: ActorRecord) -> None:
        key = (rec.spec.namespace, rec.spec.name)
        if rec.spec.name and self.names.get(key, (None,))[0] == rec.spec.actor_id:
            del self.names[key]

    def owner_died_actors(self, worker_id: int) -> None:
        """Actors share their owner's fate unless named or detached (Ray's rule)."""
        for rec in list(self.actors.values()):
            spec = rec.spec
            if spec.owner == worker_id and not spec.detached and not spec.name and rec.state != "dead":
                self.on_kill_actor(None, m.KillActor(spec.actor_id, False, f"its owner (worker {worker_id}) died"))

    # -- names -------------------------------------------------------------------------------

    def rpc_register_actor_name(self, caller, name: str, namespace: str, actor_id: int,
                                get_if_exists: bool, meta: bytes):
        """Claim a name before the actor exists, so racing creators agree on one actor."""
        key = (namespace, name)
        existing = self.names.get(key)
        if existing is not None:
            other_id, other_meta, other_owner = existing
            rec = self.actors.get(other_id)
            if rec is None or rec.state != "dead":  # no record yet: its CreateActor is on the way
                if get_if_exists:
                    return ("exists", other_id, other_meta, other_owner)
                raise exc.ActorNameTakenError(name, namespace)
        self.names[key] = (actor_id, meta, caller)
        return ("created", actor_id, None, None)

    def rpc_get_actor(self, caller, name: str, namespace: str):
        entry = self.names.get((namespace, name))
        rec = self.actors.get(entry[0]) if entry is not None else None
        if entry is None or (rec is not None and rec.state == "dead"):
            raise exc.ActorNotFoundError(name, namespace)
        return entry

    def rpc_list_named_actors(self, caller, namespace: str | None) -> list:
        return [
            {"name": n, "namespace": ns} if namespace is None else n
            for (ns, n), (aid, _, _) in self.names.items()
            if (namespace is None or ns == namespace)
            and (aid not in self.actors or self.actors[aid].state != "dead")
        ]

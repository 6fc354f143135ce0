"""The controller's half that knows host agents: joining, remote workers, losing a host.

Host 0 is the head (the controller's own zygote and store). An agent that joins gets
the next id; processes of a mesh placed on it are started by that agent, and connect
back to the controller like local workers. When an agent's connection goes, every
worker it ran is finished at once, so the actors on it fail (callers get
ActorDiedError naming the host) while the other hosts keep serving.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..scheduler.policy import Scheduler
from ..scheduler.resources import NodeResources
from . import heartbeat, labels, ucx_routes
from . import messages as m
from .addresses import local_ip_towards
from .inline_reads import answer_inline_read
from .portal import in_background

log = logging.getLogger("meshrt")


# How a host's processes died when its agent was told to leave: no failure to supervise.
SHUT_DOWN = "was shut down (HostMesh.shutdown())"


@dataclass
class HostRecord:
    id: int
    name: str
    conn: Any
    pid: int
    node: NodeResources
    listen_host: str
    workers: set = field(default_factory=set)
    alive: bool = True
    leaving: bool = False  # told to exit (HostMesh.shutdown()): its going is no failure
    went: str | None = None  # how it was lost, when not by its connection closing
    checking: bool = False  # UCX's routes to it are being checked (ucx_routes.py): not joined yet
    machine: str = ""  # procutil.machine_id() of its agent
    lent_probe: tuple | None = None  # (handle, bytes) its agent lent for UCX checks, once the head read it
    node_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # (as Ray's: meshrt.nodes())
    waiting: list = field(default_factory=list)  # ids of actors waiting for its resources to free up
    scheduler: Any = None  # its tasks' queues and pool (task_hosts.py)
    labels: dict = field(default_factory=dict)  # its node labels (labels.py), ray.io/node-id included

    def __post_init__(self) -> None:
        self.scheduler = Scheduler(self.node)

    @property
    def joined(self) -> bool:
        """Alive, and its UCX check done: ``meshrt.hosts()`` counts it."""
        return self.alive and not self.checking


class HostDirectory:
    """Mixed into the Controller (which provides workers, send_worker, _finalize ...)."""

    def __init__(self) -> None:
        self.hosts: dict[int, HostRecord] = {}
        self._host_ids = itertools.count(1)
        self._hosts_changed: asyncio.Event | None = None
        self._head_cache = None  # HostCache over the head host's store, once a process needs it
        self.host_watch = None  # heartbeat.Watch over the agents' connections, once listening
        # Where UCX does not reach ({host}: from anywhere; {a, b}: between the two):
        # values between those hosts go inline (ucx_routes.py).
        self.ucx_unreached: set[frozenset] = set()
        self.ucx_checks: dict[int, tuple] = {}  # check id -> (host id, future of its agent's answer)
        self.spreads_tasks = False  # another host has joined: the driver packs tasks for any host

    def host_handlers(self) -> dict:
        return {
            m.AgentHello: self.on_agent_hello,
            m.WorkerSpawned: self.on_worker_spawned,
            m.WorkerExited: self.on_worker_exited,
            m.WorkerOutput: self.on_worker_output,
            m.DropHostCopies: self.on_drop_host_copies,
            m.Heartbeat: lambda conn, msg: None,  # (its arrival is what counts: heartbeat.py)
            m.UcxProbeReply: self.on_ucx_answer,
            m.UcxPeerReply: self.on_ucx_answer,
            m.UcxRouteFailed: self.on_ucx_route_failed,
            m.InlineRead: self.on_agent_inline_read,
        }

    def on_drop_host_copies(self, conn, msg: m.DropHostCopies) -> None:
        for host_id in msg.hosts:
            if host_id == 0:
                if self._head_cache is not None:
                    self._head_cache.drop(msg.object_id)
                continue
            host = self.hosts.get(host_id)
            if host is not None and host.alive:
                host.conn.send(m.DropCopy(msg.object_id))

    def head_host_pull(self, conn, msg: m.Request) -> None:
        """A head-host process got a large object lent from another host: the head
        host's store keeps one copy for all its processes, as an agent's does."""
        if self._head_cache is None:
            from .host_cache import HostCache

            self._head_cache = HostCache(self.store, self.store_service)
        self._head_cache.pull_lent(conn, msg)

    def head_owner_gone(self, worker_id: int) -> None:
        if self._head_cache is not None:
            self._head_cache.owner_gone(worker_id)

    def on_agent_hello(self, conn, msg: m.AgentHello) -> None:
        if getattr(conn, "peer_id", None) is not None or self.tcp_address is None:
            conn.abort()
            return
        same = next((h for h in self.hosts.values() if h.alive and h.name == msg.name), None)
        if same is not None:  # (meshes and logs name hosts: two of one name is a mistake)
            log.warning("meshrt: refused an agent named %r (pid %d): host %d already has that name",
                        msg.name, msg.pid, same.id)
            conn.send(m.Exit(f"a host named {msg.name!r} is already in the cluster (agent pid {same.pid}); "
                             "give this agent another --name"))
            conn.close()
            return
        host = HostRecord(next(self._host_ids), msg.name, conn, msg.pid,
                          NodeResources.create(msg.resources), msg.listen_host, machine=msg.machine)
        host.labels = labels.of_node(msg.labels or {}, host.node_id, msg.resources)
        self.hosts[host.id] = host
        conn.agent_host = host.id
        if self.host_watch is None:
            self.host_watch = heartbeat.Watch(self.loop, heartbeat.timeout_s(), self._host_silent)
        conn.send(m.AgentWelcome(host.id, self.tcp_address, self.host_watch.timeout))
        self.host_watch.add(conn)
        if ucx_routes.probe_needed(msg.machine):
            host.checking = True
            in_background(self._check_ucx(host))
        else:
            self._joined(host)

    def _joined(self, host: HostRecord) -> None:
        log.info("meshrt: host %r joined as host %d", host.name, host.id)
        self._notify_hosts()

    async def _check_ucx(self, host: HostRecord) -> None:
        """Counted as joined once UCX's routes to it are known (ucx_routes.py)."""
        cut_off = []
        try:
            why = await ucx_routes.check_host(self, host)
            if why is None:
                cut_off = await ucx_routes.check_peers(self, host)
        except Exception as err:  # noqa: BLE001 - an unexpected failure: take the safe way
            why = f"{type(err).__name__}: {err}"
        host.checking = False
        if not host.alive or self.stopping:
            return
        if why is not None:
            self._ucx_unreached(frozenset([host.id]), f"the head and host {host.name!r}", why,
                                "to and from its processes")
        for peer, why in cut_off:
            self._ucx_unreached(frozenset([host.id, peer.id]), f"host {host.name!r} and host {peer.name!r}", why,
                                "between their processes")
        self._joined(host)

    def _ucx_unreached(self, cut: frozenset, between: str, why: str, which: str) -> None:
        self.ucx_unreached.add(cut)
        hint = "" if "UCX_NET_DEVICES" in why else f" ({ucx_routes.HINT})"
        log.warning("meshrt: UCX does not connect %s (%s); large values %s travel inside the messages "
                    "instead, which is slower%s", between, why, which, hint)
        cuts = frozenset(self.ucx_unreached)
        for w in list(self.workers.values()):  # (those starting get it in their Welcome)
            if w.conn is not None and not w.conn.closed:
                w.conn.send(m.UcxUnreached(cuts))

    def on_ucx_route_failed(self, conn, msg: m.UcxRouteFailed) -> None:
        """A process's read through UCX failed between two hosts whose check had
        passed (inline_reads.py): from now on their large values go inline."""
        cut = frozenset(msg.hosts)
        names = [self._host_label(h) for h in msg.hosts]
        if len(cut) != 2 or cut in self.ucx_unreached or None in names:
            return
        why = ucx_routes.without_fall_back_hint(msg.why)
        self._ucx_unreached(cut, f"{names[0]} and {names[1]} any more", f"a read from {names[1]} failed: {why}",
                            "between their processes")

    def on_agent_inline_read(self, conn, msg: m.InlineRead) -> None:
        """An agent could not read a block the driver lent it (host_cache.py): the
        bytes, inside a message; only blocks the driver lends now. (From a process,
        not an agent: the driver is the lender, as in any process: inline_reads.py.)"""
        if getattr(conn, "agent_host", None) is None:
            self.core.on_inline_read(conn, msg)
            return
        lending = {(buf._h.slot_ptr, buf._h.generation) for _oid, buf, _block in self.core.lent.values()}
        if all((slot_ptr, generation) in lending for slot_ptr, generation, _ptr, _n in msg.regions):
            in_background(answer_inline_read(msg, conn.send))
        else:
            conn.send(m.InlineBytes(msg.req_id, None, "the driver no longer lends that block"))

    def _host_label(self, host_id: int) -> str | None:
        if host_id == 0:
            return "the head"
        host = self.hosts.get(host_id)
        return f"host {host.name!r}" if host is not None and host.alive else None

    def on_ucx_answer(self, conn, msg) -> None:
        """An agent's UcxProbeReply or UcxPeerReply, to the check that asked it."""
        host_id, answer = self.ucx_checks.get(msg.check_id, (None, None))
        if answer is not None and host_id == getattr(conn, "agent_host", None) and not answer.done():
            answer.set_result(msg)

    def _notify_hosts(self) -> None:
        spreads = any(h.joined for h in self.hosts.values())
        if spreads != self.spreads_tasks:
            self.spreads_tasks = spreads  # (read by the driver's callers)
            for w in list(self.workers.values()):  # (those starting get it in their Welcome)
                if not w.host and w.conn is not None and not w.conn.closed:
                    w.conn.send(m.ClusterSpans(spreads))
        if self._hosts_changed is not None:
            self._hosts_changed.set()
            self._hosts_changed = None

    async def rpc_hosts(self, caller: int, min_hosts: int, timeout: float | None) -> list:
        """Wait until ``min_hosts`` agents are connected; their (id, name, resources)."""
        deadline = None if timeout is None else self.loop.time() + timeout
        while sum(h.joined for h in self.hosts.values()) < min_hosts:
            if self._hosts_changed is None:
                self._hosts_changed = asyncio.Event()
            event = self._hosts_changed
            left = None if deadline is None else deadline - self.loop.time()
            if left is not None and left <= 0:
                joined = sum(h.joined for h in self.hosts.values())
                where = self.public_address or "(not listening: pass init(address='0.0.0.0:6380'))"
                raise TimeoutError(
                    f"hosts(min_hosts={min_hosts}): only {joined} host agent(s) joined within {timeout} s; "
                    f"start one per host with `meshrt agent --address {where.removeprefix('tcp:')}`")
            try:
                await asyncio.wait_for(event.wait(), left)
            except asyncio.TimeoutError:
                pass
        return [(h.id, h.name, h.node.as_floats("total")) for h in self.hosts.values() if h.joined]

    async def rpc_shutdown_hosts(self, caller: int, host_ids: tuple, timeout: float) -> None:
        """HostMesh.shutdown(): these hosts' agents exit, and with them their processes;
        returns once their connections are gone."""
        leaving = [h for i in host_ids if (h := self.hosts.get(i)) is not None and h.alive]
        for host in leaving:
            host.leaving = True
            host.conn.send(m.Exit("its HostMesh was shut down"))
        deadline = self.loop.time() + timeout
        while any(h.alive for h in leaving):
            left = deadline - self.loop.time()
            if left <= 0:
                names = [h.name for h in leaving if h.alive]
                raise TimeoutError(f"shutdown(): host agent(s) {names} still connected after {timeout} s")
            if self._hosts_changed is None:
                self._hosts_changed = asyncio.Event()
            try:
                await asyncio.wait_for(self._hosts_changed.wait(), left)
            except asyncio.TimeoutError:
                pass

    def rpc_host_info(self, caller: int, host_id: int) -> dict:
        """Resources and the address other hosts reach it at (for torch.distributed)."""
        if host_id == 0:
            agent = next((h for h in self.hosts.values() if h.alive), None)
            address = agent.conn.transport.get_extra_info("sockname")[0] if agent is not None else "127.0.0.1"
            return {"resources": self.node.as_floats("total"), "address": address}
        host = self.hosts.get(host_id)
        if host is None or not host.alive:
            raise ValueError(f"host {host_id} is not connected")
        return {"resources": host.node.as_floats("total"), "address": host.listen_host}

    # -- workers on agents -------------------------------------------------------------------

    def spawn_on_host(self, w, host_id: int, env: dict) -> bool:
        host = self.hosts.get(host_id)
        if host is None or not host.alive:
            return False
        w.host = host_id
        w.pipes_open = 0  # its output arrives as WorkerOutput messages
        host.workers.add(w.id)
        host.conn.send(m.SpawnWorker(w.id, w.kind, env))
        return True

    def kill_worker(self, w) -> None:
        host = self.hosts.get(getattr(w, "host", 0))
        if host is not None:
            if host.alive:
                host.conn.send(m.KillWorker(w.id))
            return
        if w.pid:
            from .controller import _kill

            _kill(w.pid)

    def on_worker_spawned(self, conn, msg: m.WorkerSpawned) -> None:
        w = self.workers.get(msg.worker_id)
        if w is not None and w.host == getattr(conn, "agent_host", None):
            w.pid = msg.pid

    def on_worker_exited(self, conn, msg: m.WorkerExited) -> None:
        w = self.workers.get(msg.worker_id)
        if w is not None and w.host == getattr(conn, "agent_host", None):
            w.exit_code = msg.code
            self._maybe_finalize(w)

    def on_worker_output(self, conn, msg: m.WorkerOutput) -> None:
        w = self.workers.get(msg.worker_id)
        if w is not None and w.host == getattr(conn, "agent_host", None):
            from .spawn import worker_output

            worker_output(w, self.config["log_to_driver"], self.log_keeper(w), self.job_output)(msg.stream, list(msg.lines))

    def _host_silent(self, conn, silent_s: float) -> None:
        host = self.hosts.get(conn.agent_host)
        if host is not None and host.alive:
            host.went = f"stopped answering (nothing from it for {silent_s:.0f} s; MESHRT_HOST_TIMEOUT_S)"
            conn.abort()  # (should it wake up, it finds itself cut off, and exits)
            self.agent_lost(conn)

    def agent_lost(self, conn) -> None:
        host = self.hosts.get(conn.agent_host)
        if host is None or not host.alive:
            return
        host.alive = False
        ucx_routes.end_checks(self, "the agent went away", host.id)
        if host.lent_probe is not None:
            host.lent_probe[0].drop()
        went = host.went or (SHUT_DOWN if host.leaving else "went away")
        if not self.stopping and not host.leaving:
            log.warning("meshrt: host %r (host %d) %s; its actors fail", host.name, host.id, went)
        self.groups_lost_host(host.id)  # (first: its bundles' queued tasks wait for them elsewhere)
        self.requeue_from_host(host)  # (first: its queued tasks are not its workers' to fail)
        for worker_id in list(host.workers):
            w = self.workers.get(worker_id)
            if w is not None:
                w.lost_reason = f"its host agent {host.name!r} (host {host.id}) {went}"
                if w.conn is not None and not w.conn.closed:
                    # (a host cut off the network says nothing more: its processes'
                    # connections to us would stay open, unread, past shutdown)
                    w.conn.abort()
                self._finalize(w)
        self.fail_waiting(host, f"its host {host.name!r} (host {host.id}) {went} before it had room for it")
        self._notify_hosts()


def host_ip() -> str:
    """This host's address as other hosts see it (the interface of the default route)."""
    return local_ip_towards("10.255.255.255") or "127.0.0.1"


def node_ip(bind: str | None) -> str:
    """A node's IP as Ray names it (``nodes()``'s NodeManagerAddress, its ``node:<ip>``
    resource, ``get_node_ip_address()`` in its processes): the address it listens on,
    or this host's where it listens on every interface or not at all."""
    bind = (bind or "").strip("[]")
    return bind if bind not in ("", "0.0.0.0", "::") else host_ip()


NODE_RESOURCE = "node:"  # node:<ip>, 1 on each node: Ray's way to send a task to a given node
HEAD_RESOURCE = "node:__internal_head__"  # 1 on the head node only (Ray's name)


def node_ip_resources(ip: str, head: bool) -> dict:
    return {NODE_RESOURCE + ip: 1.0, **({HEAD_RESOURCE: 1.0} if head else {})}

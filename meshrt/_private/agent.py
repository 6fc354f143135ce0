"""The host agent: ``meshrt agent --address HEAD:PORT`` on every host but the head's.

It joins the head's controller over TCP (the same token handshake as every
connection), then does for its host what the controller does for the head's: owns
the host's shared-memory object store, forks workers from its own zygote when the
controller asks, forwards their output, and reports when they exit. It exits when
the head goes away, and its workers go with it (each dies with its parent).

Workers it starts talk to the controller directly for control and to other workers
directly for calls; only store requests (allocate, pin) come to the agent.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import signal
import socket

from ..objstore.store import SharedStore
from ..objstore.store_service import StoreService
from . import addresses, env_packages, gpus, heartbeat, pip_envs, procutil, ucx_routes, wire
from . import messages as m
from .direct_lanes import DirectLanes
from .host_cache import HostCache
from .host_directory import node_ip, node_ip_resources
from .inline_reads import AgentInlineReads
from .portal import in_background
from .spawn import Zygote

log = logging.getLogger("meshrt")

_STOP_ACTOR = "stop_actor:"  # a mesh actor being stopped (ActorMesh.stop): its lane ends
# Replies to one mesh call go back together; one that is slower than this goes alone.
GATHER_WINDOW_S = 0.002
# How long an agent keeps dialing a head that is not listening (yet): under SLURM the
# agents start first (`srun meshrt agent &`), then the driver, which may take a while
# to import. A refused token is not retried.
CONNECT_TIMEOUT_S = 300.0
EXIT_GRACE_S = 2.0  # a worker that exited but whose connection stays open (its child holds it)


class Agent:
    def __init__(self, head: str, token: bytes, name: str, resources: dict, store_bytes: int,
                 spill_dir: str | None = None, connect_timeout: float = CONNECT_TIMEOUT_S,
                 token_source: str = "MESHRT_TOKEN", labels: dict | None = None) -> None:
        self.head_address = head
        self.labels = labels or {}  # this node's labels (labels.py)
        self.connect_timeout = connect_timeout
        self.token_source = token_source
        self.token = token
        self.name = name
        self.resources = resources
        self.store_bytes = store_bytes
        self.spill_dir = spill_dir
        self.host_id: int | None = None
        self.pids: dict[int, int] = {}  # worker id -> pid
        self.workers_by_pid: dict[int, int] = {}
        self.pipes: list = []
        self.store: SharedStore | None = None
        self.zygote: Zygote | None = None
        self.env_maker: pip_envs.EnvMaker | None = None  # (runtime_env pip/uv environments made here)
        self._early: list = []  # spawn requests that beat the zygote's start
        self.local_conns: dict = {}  # worker id -> its connection to us
        self.early_relays: dict = {}  # worker id -> relayed messages that beat its Hello
        self.gone: set = set()
        self.gathering: dict = {}  # task id -> the _Gather its reply joins
        self.exited: dict = {}  # worker id -> timer: exited, its connection not yet read to the end
        self.direct_lanes = DirectLanes()  # lanes of this host's mesh actors (direct_lanes.py)
        self.ucx_probe = None  # bytes lent for UCX checks, read by the head and other agents (ucx_routes.py)

    async def run(self) -> int:
        """Serve until the head goes away; returns the process exit code."""
        procutil.raise_open_file_limit()
        procutil.freeze_imports_out_of_gc()
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.done = asyncio.Event()
        self.store = SharedStore(self.store_bytes, self.spill_dir)
        self.store_service = StoreService(self.store, loop)  # (spills off this loop)
        self.env_dir = env_packages.new_host_dir()
        self.cache = HostCache(self.store, self.store_service)
        self.local_address = addresses.new_unix_address("agent")
        server = await wire.listen(self.local_address, self.token,
                                   lambda: {"on_messages": self.on_local, "on_close": self.on_local_close})
        welcome = loop.create_future()
        self._welcome = welcome
        try:
            self.head = await self._dial_head()
            listen_host = self.head.transport.get_extra_info("sockname")[0]
            self.resources.update(node_ip_resources(node_ip(listen_host), head=False))
            self.head.send(m.AgentHello(self.name, os.getpid(), self.resources, listen_host, procutil.machine_id(),
                                        self.labels))
            self.host_id, timeout = await welcome
            self.cache.inline = AgentInlineReads(self.head.send, self.host_id)
        except (OSError, ConnectionError) as err:
            log.error("meshrt agent: cannot join the head at %s: %s", self.head_address, err)
            server.close()
            self.store_service.close()
            self.store.close()
            env_packages.remove_host_dir(self.env_dir)
            return 1
        env = dict(os.environ)
        env.update({
            "MESHRT_CONTROLLER": self.head_address, "MESHRT_TOKEN": self.token.hex(),
            "MESHRT_STORE_SIZE": str(self.store.capacity),
            "MESHRT_AGENT": self.local_address, "MESHRT_HOST_ID": str(self.host_id),
            "MESHRT_LISTEN_HOST": listen_host, "PYTHONUNBUFFERED": "1", "MESHRT_ENV_DIR": self.env_dir,
        })
        self.zygote = Zygote(loop, env, self.on_spawned, self.on_exited, self.on_zygote_lost,
                             store_fd=self.store.fd)
        self.zygote.start()
        for early in self._early:
            self.spawn(early)
        self._early.clear()
        log.info("meshrt agent %s joined %s as host %d", self.name, self.head_address, self.host_id)
        watch = heartbeat.Watch(loop, timeout, self._head_silent)
        watch.add(self.head)
        await self.done.wait()
        watch.stop()
        if self.env_maker is not None:
            self.env_maker.close()  # (an install still running is killed)
        await self.zygote.close()
        for pipe in list(self.pipes):
            pipe.close()
        server.close()
        self.direct_lanes.close()
        self.store_service.close()
        self.store.close()
        env_packages.remove_host_dir(self.env_dir)
        return 0

    # -- the head --------------------------------------------------------------------------

    async def _dial_head(self):
        """Connect, retrying while the head is not listening yet (see CONNECT_TIMEOUT_S)."""
        from ..exceptions import AuthenticationError

        deadline = self.loop.time() + self.connect_timeout
        delay, said = 0.1, None
        while True:
            try:
                return await wire.connect(self.head_address, self.token, on_messages=self.on_head,
                                          on_close=self.on_head_lost)
            except AuthenticationError as err:
                raise ConnectionError(f"{err}; the head refused this agent's cluster token (from "
                                      f"{self.token_source}): give both sides the same one") from None
            except OSError as err:
                now = self.loop.time()
                if now + delay > deadline:
                    raise ConnectionError(f"{err.strerror or err} (kept trying for {self.connect_timeout:g} s)") from None
                if said is None or now - said > 30:
                    log.info("meshrt agent %s: the head at %s does not answer yet (%s); retrying for up to %g s",
                             self.name, self.head_address, err.strerror or err, deadline - now)
                    said = now
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    def on_head(self, conn, msgs: list) -> None:
        self._group_calls(msgs)
        for msg in msgs:
            try:
                self._from_head(msg)
            except Exception:  # one bad request must not cost the host its connection
                log.exception("meshrt agent %s: failed to handle %s", self.name, type(msg).__name__)

    def _from_head(self, msg) -> None:
        kind = type(msg)
        if kind is m.AgentWelcome:
            if not self._welcome.done():
                self._welcome.set_result((msg.host_id, msg.host_timeout))
        elif kind is m.SpawnWorker:
            if self.zygote is None:  # the welcome is still being processed
                self._early.append(msg)
            else:
                self.spawn(msg)
        elif kind is m.KillWorker:
            pid = self.pids.get(msg.worker_id)
            if pid:
                _kill(pid)
        elif kind is m.DropCopy:
            self.cache.drop(msg.object_id)
        elif kind is m.PeerGone:
            self.cache.owner_gone(msg.worker_id)
        elif kind is m.UcxProbe:
            in_background(self._answer_ucx_check(msg))
        elif kind is m.UcxPeerCheck:
            in_background(self._answer_peer_check(msg))
        elif kind is m.InlineBytes:
            self.cache.inline.answered(msg)
        elif kind is m.Exit:
            if not self._welcome.done():  # refused (a name already taken)
                self._welcome.set_exception(ConnectionError(msg.reason))
            self.done.set()
        elif kind is m.Relay:
            inner = type(msg.msg)
            if inner is m.PullValue:
                self.cache.pull(msg, self._deliver, self.head.send)
                return
            if inner is m.ObjectValue:
                msg = self.cache.arrived(msg)
            self._deliver(msg)

    async def _answer_ucx_check(self, probe: m.UcxProbe) -> None:
        """The head checks that UCX connects it and this host (ucx_routes.py)."""
        reply, self.ucx_probe = await self.loop.run_in_executor(None, ucx_routes.answer_check, probe)
        if not self.head.closed:
            self.head.send(reply)

    async def _answer_peer_check(self, check: m.UcxPeerCheck) -> None:
        """The head checks that UCX connects this host and others (ucx_routes.py)."""
        failed = await ucx_routes.read_peers(check.peers)
        if not self.head.closed:
            self.head.send(m.UcxPeerReply(check.check_id, failed))

    def _deliver(self, msg: m.Relay) -> None:
        """A relayed message to one of this host's processes."""
        conn = self.local_conns.get(msg.dest)
        if conn is not None:
            if not (msg.direct and self.direct_lanes.offer_call(msg.dest, msg.msg, conn, msg.src)):
                conn.send(msg)  # (or it went to its actor's lane: direct_lanes.py)
            if type(msg.msg) is m.ActorCall and msg.msg.method.startswith(_STOP_ACTOR):
                # (that actor's lane ends: the frames written to it are still read)
                self.direct_lanes.drop(msg.dest, msg.msg.method[len(_STOP_ACTOR):])
        elif msg.dest in self.pids or msg.dest not in self.gone:
            self.early_relays.setdefault(msg.dest, []).append(msg)  # not connected yet

    def _head_silent(self, conn, silent_s: float) -> None:
        log.warning("meshrt agent %s: nothing from the head at %s for %.0f s (MESHRT_HOST_TIMEOUT_S); stopping",
                    self.name, self.head_address, silent_s)
        self.done.set()

    def on_head_lost(self, conn, _exc) -> None:
        if not self._welcome.done():
            self._welcome.set_exception(ConnectionError("the head closed the connection before welcoming this agent"))
            return
        log.warning("meshrt agent %s: the head at %s went away; stopping", self.name, self.head_address)
        self.done.set()

    def spawn(self, msg: m.SpawnWorker) -> None:
        env = dict(msg.env)
        slots = env.pop(gpus.SLOTS, None)
        if slots is not None:  # (the GPU slots of this host the head gave the worker)
            env.update(gpus.worker_env([int(s) for s in slots.split(",") if s]))
        pip = env.pop(pip_envs.SPEC_ENV, None)
        if pip is not None:  # (its runtime_env's packages: their environment is made here, off the loop)
            in_background(self._spawn_in_env(msg, env, json.loads(pip)))
            return
        self._fork(msg, env)

    async def _spawn_in_env(self, msg: m.SpawnWorker, env: dict, pip: dict) -> None:
        if self.env_maker is None:
            self.env_maker = pip_envs.EnvMaker()  # (closed as the agent ends)
        made = await pip_envs.worker_env(self.env_maker, pip)
        if made is not None and self.zygote is not None and not self.done.is_set():
            self._fork(msg, {**env, **made})

    def _fork(self, msg: m.SpawnWorker, env: dict) -> None:
        from .spawn import attach_pipes

        out_fd, err_fd = self.zygote.spawn(msg.worker_id, env, msg.kind)
        worker_id = msg.worker_id

        def sink(stream_name: str, lines: list[str]) -> None:
            self.head.send(m.WorkerOutput(worker_id, stream_name, tuple(lines)))

        def eof() -> None:
            self.pipes[:] = [p for p in self.pipes if p.fd is not None]

        self.pipes.extend(attach_pipes(self.loop, out_fd, err_fd, sink, eof))

    def on_spawned(self, worker_id: int, pid: int) -> None:
        self.pids[worker_id] = pid
        self.workers_by_pid[pid] = worker_id
        self.head.send(m.WorkerSpawned(worker_id, pid))

    def on_exited(self, pid: int, code: int) -> None:
        worker_id = self.workers_by_pid.pop(pid, None)
        if worker_id is None:
            return
        self.pids.pop(worker_id, None)
        if worker_id in self.local_conns:  # what it sent before exiting (a seal, a free) goes first
            self.exited[worker_id] = self.loop.call_later(EXIT_GRACE_S, self._worker_gone, worker_id)
        else:
            self._worker_gone(worker_id)
        self.head.send(m.WorkerExited(worker_id, code))

    def _worker_gone(self, worker_id: int) -> None:
        """Exited, and its connection read to the end: its store pins and leftovers go."""
        timer = self.exited.pop(worker_id, None)
        if timer is not None:
            timer.cancel()
        self.store_service.run(functools.partial(self.store.worker_died, worker_id), worker_id)

    def on_zygote_lost(self) -> None:
        if not self.done.is_set():
            log.warning("meshrt agent %s: its zygote died; starting a new one", self.name)
            self.zygote.start()

    # -- this host's workers: the object store ------------------------------------------------

    def on_local(self, conn, msgs: list) -> None:
        store, service = self.store, self.store_service
        for msg in msgs:
            kind = type(msg)
            if kind is m.Relay:
                inner = type(msg.msg)
                if inner is m.FetchObject and self.cache.serve(conn, msg):
                    continue  # this host already holds it
                self._upward(msg)
            elif kind is m.Hello:
                conn.peer_id = msg.worker_id
                self.local_conns[msg.worker_id] = conn
                for early in self.early_relays.pop(msg.worker_id, ()):
                    conn.send(early)
            elif kind is m.Request and msg.method == "host_pull":
                try:
                    self.cache.pull_lent(conn, msg)  # answers once the value is here
                except Exception as err:  # noqa: BLE001 - the worker pulls it itself
                    conn.send(m.Response(msg.req_id, False, err))
            elif kind is m.Request:  # (an error is handed back to the worker)
                service.request(conn.peer_id, msg.method, msg.args,
                                lambda ok, value, conn=conn, req_id=msg.req_id: conn.send(m.Response(req_id, ok, value)))
            elif kind is m.StoreUpdate:
                service.run(functools.partial(store.apply, msg, conn.peer_id), conn.peer_id)
            elif kind is m.DirectLaneOffer:
                pid = self.pids.get(conn.peer_id)
                if pid is not None:
                    self.direct_lanes.take(conn.peer_id, pid, msg.lane, msg.fd)
                conn.send(m.DirectLaneTaken(msg.lane, self.direct_lanes.refused_for(conn.peer_id)))

    # -- gathering replies: one frame back per call to many processes ------------------------

    def _group_calls(self, msgs: list) -> None:
        """Actor calls that came in one frame are one mesh call (or a burst of calls):
        their replies go back together, as one frame."""
        calls = [r.msg.task_id for r in msgs if type(r) is m.Relay and type(r.msg) is m.ActorCall]
        if len(calls) > 1:
            group = _Gather(set(calls))
            for task_id in calls:
                self.gathering[task_id] = group

    def _upward(self, relay: m.Relay) -> None:
        inner = relay.msg
        group = self.gathering.pop(inner.task_id, None) if type(inner) is m.TaskReturn else None
        if group is None:
            self.head.send(relay)
            return
        group.replies.append(relay)
        group.waiting.discard(inner.task_id)
        if not group.waiting:
            self._release(group)
        elif group.timer is None:
            # A slow reply must not hold the fast ones (nor a caller waiting on them).
            group.timer = self.loop.call_later(GATHER_WINDOW_S, self._release, group)

    def _release(self, group: _Gather) -> None:
        if group.timer is not None:
            group.timer.cancel()
            group.timer = None
        replies, group.replies = group.replies, []
        for relay in replies:
            self.head.send(relay)
        if group.waiting:  # later replies of this group pass straight through
            for task_id in group.waiting:
                self.gathering.pop(task_id, None)

    def on_local_close(self, conn, _exc) -> None:
        if conn.peer_id is not None and self.local_conns.get(conn.peer_id) is conn:
            del self.local_conns[conn.peer_id]
            self.direct_lanes.drop(conn.peer_id)
            self.gone.add(conn.peer_id)
            self.early_relays.pop(conn.peer_id, None)
            if conn.peer_id in self.exited:
                self._worker_gone(conn.peer_id)


class _Gather:
    __slots__ = ("waiting", "replies", "timer")

    def __init__(self, waiting: set) -> None:
        self.waiting = waiting
        self.replies: list = []
        self.timer = None


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def default_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"

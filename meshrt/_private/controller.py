"""The single controller: worker registry, task scheduling glue, supervision.

It runs on the driver's core loop, beside the driver's own Core. Placement
decisions come from the pure :class:`~meshrt.scheduler.policy.Scheduler`; this
module only moves messages and processes. Actors live in actor_directory.py.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import logging
import os
import signal
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from .. import exceptions as exc
from ..objstore.serialization import system_error_payload
from ..objstore.store import SharedStore
from ..objstore.store_service import StoreService
from ..scheduler.policy import Dispatch, PlaceActor, Scheduler, StartWorkers
from ..scheduler.resources import Allocation, NodeResources
from . import addresses, env_packages, ids, labels, ucx_routes, wire
from . import messages as m
from .actor_directory import ActorDirectory
from .cluster_nodes import ClusterNodes
from .control_requests import ControlRequests
from .host_choice import HostChoice
from .host_directory import HostDirectory, host_ip
from .jobs import Jobs
from .log_files import LogFiles
from .log_options import LogOptions
from .metrics_table import MetricsTable
from .placement_groups import PlacementGroups
from .pool_upkeep import PoolUpkeep
from .runtime_env_states import RuntimeEnvStates
from .spawn import Zygote, end_preforked, new_tail
from .state_tables import StateTables
from .task_hosts import TaskHosts, TaskRecord
from .timeline_table import TimelineTable
from .worker_spawn import WorkerSpawn

log = logging.getLogger("meshrt")

_UNSET = object()
FINALIZE_GRACE_S = 2.0
MAX_STARTUP_FAILURES = 3
# Tasks a pool worker may hold at once (one running, the rest queued behind it) when
# the queue is long: saves a controller round trip per task. See Scheduler.pipeline_share.
PIPELINE_DEPTH = 8


@dataclass
class WorkerRecord:
    id: int
    kind: str  # "task" | "actor"
    pool_key: tuple
    gpu_ids: tuple = ()
    pid: int | None = None
    conn: Any = None
    address: str | None = None
    state: str = "starting"  # starting | idle | busy | dead
    tasks: Any = field(default_factory=collections.deque)  # assigned, in order; the first runs
    alloc: Allocation | None = None  # held while it has tasks (all of one shape)
    units: tuple = ()
    actor_id: int | None = None
    label: str = "worker"
    code_sent: set = field(default_factory=set)
    stderr_tail: Any = field(default_factory=new_tail)
    exit_code: Any = _UNSET
    conn_closed: bool = False
    pipes_open: int = 2
    blocked: bool = False
    finalized: bool = False
    idle_since: float = 0.0
    grace_timer: Any = None
    pipes: list = field(default_factory=list)
    env_pending: bool = False  # its runtime_env's packages are being installed (worker_spawn.py)
    host: int = 0  # 0 = this (head) host; else the agent that started it
    lost_reason: str | None = None  # set when its host agent went away
    log_stream: bool = True  # its output printed by the driver (ProcMesh.logging_option)
    log_aggregator: Any = None  # or gathered there first (log_options.py)
    giving_back: bool = False  # asked to hand back its queued tasks (task_hosts.py)
    spawned_ms: float = field(default_factory=lambda: time.time() * 1000)  # (list_runtime_envs)


class Controller(ActorDirectory, HostDirectory, ClusterNodes, HostChoice, TaskHosts, PlacementGroups, ControlRequests,
                 LogOptions, LogFiles, PoolUpkeep, StateTables, MetricsTable, TimelineTable, Jobs, WorkerSpawn,
                 RuntimeEnvStates):
    def __init__(self, core, io, config: dict) -> None:
        self.core = core
        self.io = io
        self.loop = io.loop
        self.config = config
        self.started_ms = int(time.time() * 1000)  # (the job's start_time: list_jobs)
        self.labels = labels.of_node(config.get("labels", {}), config["node_id"], config["resources"])  # the head's
        self.token: bytes = config["token"]
        self.node = NodeResources.create(config["resources"])
        self.scheduler = Scheduler(self.node)
        self.workers: dict[int, WorkerRecord] = {}
        self.pip_specs: dict[str, dict] = {}  # runtime_env pip/uv: its pool's name -> the packages (pip_envs.py)
        self.by_pid: dict[int, WorkerRecord] = {}
        self._ids = itertools.count(1)
        self.code: dict[int, bytes] = {}
        # runtime_env and workspace directories (env_packages.py): uri -> (zip, kept for the job)
        self.packages: dict[str, tuple] = {uri: (z, True) for uri, z in config.pop("packages", {}).items()}
        self.workspaces: dict[int, list] = {}  # host -> directories synced there (mesh/workspace.py)
        self.env_dir: str | None = None
        self.tasks: dict[int, TaskRecord] = {}
        self.pipelined: set[int] = set()
        self.address = addresses.new_unix_address("ctl")
        self.tcp_address: str | None = config.get("tcp_address")  # where it listens
        self.public_address: str | None = None
        self.servers: list = []
        self.accepted: weakref.WeakSet = weakref.WeakSet()  # every connection the servers took
        self.zygote: Zygote | None = None
        self.store: SharedStore | None = None
        self.store_service: StoreService | None = None
        self.startup_failures: dict[tuple, int] = {}  # (host id, pool) -> workers in a row that failed to start
        self.stopping = False
        self._background: set = set()  # tasks we started and must keep referenced
        self._all_exited: asyncio.Event | None = None
        self._trim_timer = None
        self._prestart_timer = None
        ActorDirectory.__init__(self)
        HostDirectory.__init__(self)
        LogOptions.__init__(self)
        PlacementGroups.__init__(self)
        TimelineTable.__init__(self)
        LogFiles.__init__(self)
        self.handlers = {
            m.Hello: self.on_hello,
            m.SubmitTask: self.on_submit_task,
            m.TaskDone: self.on_task_done,
            m.WorkerBlocked: self.on_worker_blocked,
            m.CancelTask: self.on_cancel_task,
            m.DefineCode: self.on_define_code,
            m.Request: self.on_request,
            m.StoreUpdate: self.on_store_update,
            **self.actor_handlers(),
            **self.host_handlers(),
            **self.timeline_handlers(),
        }

    # -- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        self.store = SharedStore(int(self.config["resources"]["object_store_memory"]),
                                 self.config.get("spill_dir"))
        self.store_service = StoreService(self.store, self.loop)
        self.env_dir = env_packages.new_host_dir()
        self.open_log_dir()
        self.servers.append(await wire.listen(self.address, self.token, self._conn_kwargs, self.accepted))
        if self.tcp_address:
            server = await wire.listen(self.tcp_address, self.token, self._conn_kwargs, self.accepted)
            host, port = server.sockets[0].getsockname()[:2]
            self.tcp_address = f"tcp:{host}:{port}"  # the real port when asked for port 0
            # what other hosts dial: this host's address when listening on every interface
            self.public_address = f"tcp:{host_ip() if host in ('', '0.0.0.0', '::') else host}:{port}"
            self.servers.append(server)
        env = dict(os.environ)
        if self.tcp_address:  # processes on other hosts must reach this host's workers too
            bind = addresses.parse_tcp(self.tcp_address)[0]
            env["MESHRT_LISTEN_HOST"] = bind or "0.0.0.0"
            if bind in ("", "0.0.0.0", "::"):
                env["MESHRT_ADVERTISE_HOST"] = host_ip()
        env.update({
            "MESHRT_CONTROLLER": self.address,
            "MESHRT_TOKEN": self.token.hex(),
            "PYTHONUNBUFFERED": "1",
            "MESHRT_SESSION": self.config["session"],
            "MESHRT_STORE_SIZE": str(self.store.capacity), "MESHRT_ENV_DIR": self.env_dir,
        })
        self.zygote = Zygote(self.loop, env, self._on_spawned, self._on_exited, self._on_zygote_lost,
                             store_fd=self.store.fd, preforked=self.config.pop("preforked_zygote", None))
        self.zygote.start()
        self.start_pool_upkeep()

    def _conn_kwargs(self) -> dict:
        return {"on_messages": self.core.on_messages, "on_close": self._on_conn_close}

    async def stop(self) -> None:
        try:
            await self._stop_processes()
        finally:
            self.flush_logs()  # (what the processes printed on their way out)
            self.end_progress_bars()
            if self.store is not None:
                self.store_service.close()
                self.store.close()
            env_packages.remove_host_dir(self.env_dir)

    async def _stop_processes(self) -> None:
        self.stopping = True
        self.close_env_maker()  # (an install still running is killed: nothing waits for it now)
        self.flush_logs()
        ucx_routes.end_checks(self, "the driver is shutting down")  # (of joining hosts)
        if self._trim_timer is not None:
            self._trim_timer.cancel()
        if self._prestart_timer is not None:
            self._prestart_timer.cancel()
        if self.host_watch is not None:
            self.host_watch.stop()
        for server in self.servers:
            server.close()
        # (list(): a worker finalized on the way, a pipe closed say, leaves self.workers)
        for w in list(self.workers.values()):
            if w.conn is not None and not w.conn.closed:
                w.conn.send(m.Exit("the driver is shutting down"))
                w.conn.close()
            elif w.pid and w.exit_code is _UNSET:
                self.kill_worker(w)  # still starting up: nothing to finish
        self._all_exited = asyncio.Event()
        self._check_all_exited()
        try:
            await asyncio.wait_for(self._all_exited.wait(), 1.0)
        except asyncio.TimeoutError:
            pass
        for w in list(self.workers.values()):
            if w.pid and w.exit_code is _UNSET:
                self.kill_worker(w)
        for host in list(self.hosts.values()):
            if host.alive and not host.conn.closed:
                host.conn.send(m.Exit("the driver is shutting down"))
                host.conn.close()
        if self.zygote is not None:
            await self.zygote.close()
        preforked = self.config.pop("preforked_zygote", None)
        if preforked is not None:  # (start failed before adopting it)
            await end_preforked(self.loop, preforked)
        for w in list(self.workers.values()):
            for pipe in w.pipes:
                pipe.close()
        # What is still open now belongs to no live record: a worker finalized before its
        # connection's end arrived, or a peer still in the handshake. The loop closes next.
        for conn in list(self.accepted):
            conn.close()
        for server in self.servers:
            await server.wait_closed()

    # -- workers -----------------------------------------------------------------------

    def spawn_background(self, coro) -> None:
        task = self.loop.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _on_spawned(self, worker_id: int, pid: int) -> None:
        w = self.workers.get(worker_id)
        if w is None:
            _kill(pid)
            return
        w.pid = pid
        self.by_pid[pid] = w

    def _on_exited(self, pid: int, code: int) -> None:
        w = self.by_pid.pop(pid, None)
        if w is not None:
            w.exit_code = code
            self._maybe_finalize(w)
        if self.stopping:
            self._check_all_exited()

    def _check_all_exited(self) -> None:
        if self._all_exited is not None and not any(
            w.pid and w.exit_code is _UNSET for w in self.workers.values()
        ):
            self._all_exited.set()

    def _on_zygote_lost(self) -> None:
        """The zygote died (killed by hand, OOM): its workers die with it, their tasks are
        retried, and a new zygote takes over spawning."""
        if self.stopping:
            return
        log.warning("meshrt: the worker zygote died; starting a new one")
        self.zygote.start()

    def on_hello(self, conn, msg: m.Hello) -> None:
        w = self.workers.get(msg.worker_id)
        if w is None or w.conn is not None or w.state == "dead":
            log.warning("meshrt: dropped connection claiming to be unknown worker %s", msg.worker_id)
            conn.abort()
            return
        if w.kind == "driver":  # (attached to a long-running head: jobs.py)
            return self.driver_hello(w, conn, msg)
        conn.peer_id = w.id
        conn.peer_pid = msg.pid
        w.conn = conn
        w.address = msg.address
        if w.pid is None:
            w.pid = msg.pid
            self.by_pid[msg.pid] = w
        self.startup_failures.pop((w.host, w.pool_key), None)
        conn.send(m.Welcome(self.welcome_config(w.host)))
        self.core.worker_connected(w.id, conn)
        if w.kind == "task":
            self.note_worker_env(w)
            self.scheduler_of(w.host).worker_started(w.pool_key)
            self._set_idle(w)
            self.schedule()
        else:
            self.actor_worker_ready(w)

    def welcome_config(self, host_id: int = 0) -> dict:
        """What a worker on host ``host_id`` (0: the head) needs to know."""
        c = self.config
        return {
            "job_id": c["job_id"], "node_id": self.node_id_of_host(host_id), "head_node_id": c["node_id"],
            "head_resources": dict(self.node.total), "namespace": c["namespace"],
            "sys_path": c["sys_path"], "cwd": c["cwd"], "session": c["session"],
            "temp_dir": c.get("temp_dir") if not host_id else None,  # (another host's: its own)
            "ucx_unreached": [sorted(cut) for cut in self.ucx_unreached], "several_hosts": self.spreads_tasks,
            "runtime_env": c.get("runtime_env"), "workspace": self.workspaces.get(host_id, []),
            "logging_config": c.get("logging_config"), "default_actor_lifetime": c.get("default_actor_lifetime"),
            "head_labels": self.labels, "node_labels": self.labels_of_host(host_id),
        }

    def _set_idle(self, w: WorkerRecord) -> None:
        w.state = "idle"
        w.tasks.clear()
        w.idle_since = time.monotonic()
        self.scheduler_of(w.host).worker_idle(w.id, w.pool_key)

    def _on_conn_close(self, conn, _exc) -> None:
        if getattr(conn, "agent_host", None) is not None:
            self.agent_lost(conn)
            return
        w = self.workers.get(conn.peer_id) if conn.peer_id is not None else None
        if w is not None and w.conn is conn:
            w.conn_closed = True
            self._maybe_finalize(w)

    def _maybe_finalize(self, w: WorkerRecord) -> None:
        """A worker is dead once its exit status is known, its connection and pipes closed
        (so the last stderr lines are in); a grace timer covers whatever never comes."""
        if w.finalized:
            return
        exited = w.exit_code is not _UNSET
        if exited and (w.conn is None or w.conn_closed) and w.pipes_open <= 0:
            self._finalize(w)
        elif w.grace_timer is None and (exited or w.conn_closed):
            w.grace_timer = self.loop.call_later(FINALIZE_GRACE_S, self._finalize, w)

    def _finalize(self, w: WorkerRecord) -> None:
        if w.finalized:
            return
        w.finalized = True
        if w.grace_timer is not None:
            w.grace_timer.cancel()
        previous = w.state
        w.state = "dead"
        self.workers.pop(w.id, None)
        if w.pid is not None:
            self.by_pid.pop(w.pid, None)
        if w.exit_code is _UNSET and w.pid is not None and w.lost_reason is None:
            self.kill_worker(w)  # closed its connection but did not exit: make sure
        if w.host:
            host = self.hosts.get(w.host)
            if host is not None:
                host.workers.discard(w.id)
        if self.stopping:
            return
        scheduler = self.scheduler_of(w.host)
        scheduler.worker_busy_or_gone(w.id, w.pool_key)
        if previous == "starting" and w.kind == "task":
            scheduler.worker_started(w.pool_key)
        failed_start = previous == "starting" and w.lost_reason is None  # (not its host lost)
        if failed_start:
            key = (w.host, w.pool_key)  # (a pool of workers in a broken environment fails alone)
            self.startup_failures[key] = self.startup_failures.get(key, 0) + 1
        cause = w.lost_reason or exc.describe_exit(None if w.exit_code is _UNSET else w.exit_code)
        crashed = (w.lost_reason is not None or any(rec.force_killed for rec in w.tasks)  # (not a worker that
                   or w.exit_code not in (_UNSET, 0, None))  # ended as asked: its tasks' children go on)
        self.core.direct_lanes.drop(w.id)  # (before its calls fail: no caller sees a dead lane)
        if w.tasks:
            self._release_worker_alloc(w)
            for rec in list(w.tasks):
                self._task_worker_died(w, rec, cause)
            w.tasks.clear()
        if w.actor_id is not None:
            self.actor_worker_died(w, cause)
        elif failed_start and self.startup_failures.get((w.host, w.pool_key), 0) >= MAX_STARTUP_FAILURES:
            self._fail_queued_startup(w, cause)
        if w.kind == "driver":
            self.driver_gone(w)
        self._owner_died(w.id, crashed)
        self.head_owner_gone(w.id)  # copies the head host keeps of what it owned
        self.store_service.run(functools.partial(self.store.worker_died, w.id), w.id)
        gone = m.PeerGone(w.id)
        self.core.local.send(gone)
        for other in self.workers.values():
            if other.conn is not None and not other.conn.closed:
                other.conn.send(gone)
        for host in self.hosts.values():  # copies agents keep of what it owned go
            if host.alive and not host.conn.closed:
                host.conn.send(gone)
        self.schedule()

    def send_worker(self, worker_id: int, msg) -> None:
        """Deliver to a worker, or to the driver's own core for id 0."""
        if worker_id == 0:
            self.core.local.send(msg)
            return
        w = self.workers.get(worker_id)
        if w is not None and w.conn is not None:
            w.conn.send(msg)

    def send_code(self, w: WorkerRecord, code_id: int) -> None:
        if code_id not in w.code_sent:
            w.code_sent.add(code_id)
            w.conn.send(m.DefineCode(code_id, self.code[code_id]))

    def on_define_code(self, conn, msg: m.DefineCode) -> None:
        self.code.setdefault(msg.code_id, msg.blob)

    # -- tasks -------------------------------------------------------------------------

    def on_submit_task(self, conn, msg: m.SubmitTask) -> None:
        self.enqueue_task(msg.spec)
        self.schedule()

    def schedule(self) -> None:
        if self.stopping:
            return
        if self.pending_groups:  # (placement_groups.py)
            self.reserve_pending_groups()
        if self.groups_for_room:
            self.place_for_room()
        if self.spreads_tasks:
            self.move_waiting_actors()
        self._schedule_hosts()
        if self.spill_queued_tasks():  # (queued tasks moved to hosts with room: task_hosts.py)
            self._schedule_hosts()
        if self.pipelined and self.spreads_tasks:
            self.ask_back_pipelined()

    def _schedule_hosts(self) -> None:
        for host, scheduler in self.task_schedulers():
            for action in scheduler.schedule():
                if type(action) is Dispatch:
                    self._dispatch(action, host)
                elif type(action) is PlaceActor:
                    self.place_actor(action.actor_id, action.alloc)
                elif type(action) is StartWorkers:
                    self._start_workers(action.pool_key, action.count, host)

    def _dispatch(self, action: Dispatch, host: int) -> None:
        rec = self.tasks.get(action.task_id)
        w = self.workers.get(action.worker_id)
        if rec is None or w is None or w.conn is None:
            self.node_of_host(host).release(action.alloc)
            if w is not None and w.conn is not None:
                self._set_idle(w)
            if rec is not None:
                self.scheduler_of(host).submit_task(rec.spec.task_id, rec.units, rec.spec.depth)
            return
        w.alloc = action.alloc
        w.units = rec.units
        w.state = "busy"
        self._assign(w, rec)
        self._top_up(w)

    def _assign(self, w: WorkerRecord, rec: TaskRecord) -> None:
        rec.worker = w.id
        rec.events.append(("SUBMITTED_TO_WORKER", int(time.time() * 1000)))
        self.note_task_env_ran(w.host, rec.spec, rec.events)
        w.tasks.append(rec)
        if len(w.tasks) == 1:
            w.label = rec.spec.name
        elif self.spreads_tasks:
            self.pipelined.add(w.id)  # (may be asked to hand them back: task_hosts.py)
        self.send_code(w, rec.spec.code_id)
        w.conn.send(m.ExecuteTask(rec.spec, w.alloc.gpu_ids))

    def _top_up(self, w: WorkerRecord) -> None:
        """Queue more tasks of the same shape behind a busy worker's current one (not
        while another host has room for them: they go there instead)."""
        if w.blocked or w.state != "busy" or w.alloc is None or self.better_elsewhere(w):
            return
        workers = sum(1 for o in self.workers.values()
                      if o.kind == "task" and o.pool_key == w.pool_key and o.host == w.host)
        scheduler = self.scheduler_of(w.host)
        extra = scheduler.pipeline_share(w.units, PIPELINE_DEPTH, len(w.tasks), workers)
        for task_id in scheduler.take(w.units, extra):
            self._assign(w, self.tasks[task_id])

    def _release_worker_alloc(self, w: WorkerRecord) -> None:
        if w.alloc is not None:
            node = self.node_of_host(w.host)
            if w.blocked:
                node.reclaim_cpu(w.alloc)  # its CPUs were lent out: take them back first
            node.release(w.alloc)
            w.alloc = None
            if w.host and self.hosts[w.host].alive:  # (actors waiting for room there)
                self.place_waiting(self.hosts[w.host])
        w.blocked = False

    def on_worker_blocked(self, conn, msg: m.WorkerBlocked) -> None:
        w = self.workers.get(conn.peer_id)
        if w is not None and msg.blocked is None:
            w.giving_back = False
        if w is None or w.alloc is None:
            return
        if msg.returned:  # queued behind the blocked task (or asked for): give them to someone else
            back = [self.tasks[t] for t in msg.returned if t in self.tasks]
            for rec in back:
                if rec in w.tasks:
                    w.tasks.remove(rec)
            self._hand_back(back, w)
            if msg.blocked is None:
                if not w.tasks and w.state == "busy":  # (its last task ended before it answered)
                    self._release_worker_alloc(w)
                    self._set_idle(w)
                self.schedule()
        if msg.blocked and not w.blocked:
            w.blocked = True
            self.node_of_host(w.host).lend_cpu(w.alloc)
            self.schedule()
        elif msg.blocked is False and w.blocked:
            w.blocked = False
            self.node_of_host(w.host).reclaim_cpu(w.alloc)

    def on_cancel_task(self, conn, msg: m.CancelTask) -> None:
        rec = self.tasks.get(msg.task_id)
        if rec is None:  # no task: one waiting for its placement group, or a call to an actor in the driver
            spec = self.take_waiting_task(msg.task_id)
            if spec is not None:
                self._fail_task(spec, system_error_payload(exc.TaskCancelledError(ids.to_hex(msg.task_id))))
            else:
                self.core.driver_actors.cancel(msg.task_id, msg.recursive)
            return
        error = system_error_payload(exc.TaskCancelledError(ids.to_hex(msg.task_id)))
        if rec.worker is None:
            if self.scheduler_of(rec.host).remove_task(msg.task_id):
                del self.tasks[msg.task_id]
                self._fail_task(rec.spec, error)
            return
        rec.cancelled = True
        w = self.workers.get(rec.worker)
        if w is None:
            return
        if msg.force:
            rec.force_killed = True
            if w.pid:
                self.kill_worker(w)
        elif w.conn is not None:
            w.conn.send(m.CancelTask(msg.task_id, False, msg.recursive))

    def _task_worker_died(self, w: WorkerRecord, rec: TaskRecord, cause: str) -> None:
        self.tasks.pop(rec.spec.task_id, None)
        self.note_task_end(rec, w, "FAILED", "TASK_CANCELLED" if rec.cancelled else "WORKER_DIED", cause)
        spec = rec.spec
        if rec.cancelled:
            self._fail_task(spec, system_error_payload(exc.TaskCancelledError(
                ids.to_hex(spec.task_id), rec.kill_reason or "its worker was killed (cancel(force=True))")))
        elif spec.max_retries < 0 or spec.attempt < spec.max_retries:
            self._requeue(rec, f"(pid {w.pid}) died: {cause}")
        else:
            tail = "\n".join("    " + line for line in w.stderr_tail)
            detail = f"\nlast lines of its stderr:\n{tail}" if tail else ""
            self._fail_task(spec, system_error_payload(exc.WorkerCrashedError(
                f"the worker running {spec.name} (pid {w.pid}) died: {cause}; "
                f"no retries left (max_retries={spec.max_retries}){detail}")))

    def _owner_died(self, worker_id: int, crashed: bool) -> None:
        """Tasks of a dead owner have nobody to return to: those queued are dropped; where
        it crashed or was killed, those running are cancelled too, with the tasks they
        submitted (as Ray stops the workers of an owner that died; a parent killed by
        cancel(force=True) so takes its children along). An owner that ended as asked (an
        actor's exit, a retired worker) lets them finish, as in Ray."""
        for task_id in [t for t, rec in self.tasks.items() if rec.spec.owner == worker_id]:
            rec = self.tasks[task_id]
            if rec.worker is None:
                if self.scheduler_of(rec.host).remove_task(task_id):
                    del self.tasks[task_id]
                continue
            if not crashed:
                continue
            w = self.workers.get(rec.worker)
            if not rec.cancelled and w is not None and w.conn is not None and not w.conn.closed:
                rec.cancelled = True
                w.conn.send(m.CancelTask(task_id, False, True))
        self.drop_waiting_tasks_of(worker_id)
        self.owner_died_actors(worker_id)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass

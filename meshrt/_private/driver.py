"""The driver: ``init`` and ``shutdown``, and the driver's core, which hosts the controller.

The driver is worker 0. Its core and the controller share one event loop (a daemon
thread), and talk through a LocalPipe: the same message records as on the wire,
delivered in order on a later turn of the loop, never pickled.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import logging
import os
import secrets
import socket
import sys
import time
import uuid
import warnings
from typing import Any

from .. import job_config
from . import (
    addresses,
    call_record,
    context,
    gpus,
    labels,
    logging_config,
    metrics_local,
    runtime_env,
    spin,
    state,
    temp_root,
)
from . import messages as m
from .controller import Controller
from .core import Core
from .direct_lanes import DirectLanes
from .driver_actors import DriverActors
from .host_directory import node_ip, node_ip_resources
from .lending import Lending
from .options import ACCELERATOR_PREFIX
from .portal import LoopThread
from .runtime_info import RuntimeInfo

log = logging.getLogger("meshrt")

_atexit_registered = False

# Ray's init() arguments accepted as keywords: most mean nothing here (so Ray programs run
# unchanged); the few that do are read where noted.
_IGNORED_INIT_ARGS = {
    "include_dashboard", "dashboard_host", "dashboard_port", "configure_logging",
    "logging_format", "log_to_driver_level", "runtime_env", "job_config", "_system_config",
    "_temp_dir",  # (used: temp_root.py)
    "_plasma_directory", "_metrics_export_port", "storage", "_enable_object_reconstruction",
    "_node_ip_address", "logging_config", "enable_resource_isolation",
    "labels", "_memory", "_redis_password", "_tracing_startup_hook",
    "object_spilling_directory",  # (used: where spilled and fallback objects go)
}


class LocalPipe:
    """In-process delivery with the ordering and batching of a real connection."""

    closed = False

    def __init__(self, loop, deliver, peer_id: int = 0) -> None:
        self.loop = loop
        self.deliver = deliver
        self.peer_id = peer_id
        self._box: list = []
        self._scheduled = False

    def send(self, msg) -> None:
        self._box.append(msg)
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        box, self._box = self._box, []
        self.deliver(self, box)


class DriverCore(Lending, Core):
    is_driver = True

    def __init__(self, io: LoopThread, token: bytes) -> None:
        Core.__init__(self, 0, io, token)
        self.local = LocalPipe(io.loop, self.on_messages)
        self.controller: Controller | None = None
        self.worker_conns: dict[int, Any] = {}
        self.relay_for: dict[int, Any] = {}  # worker on an agent's host -> that agent's connection
        self.host_copies: dict[int, set] = {}  # object id -> agents' hosts that may keep a copy
        Lending.__init__(self)
        self.handlers[m.PullDone] = self.on_pull_done
        self.handlers[m.DirectLaneOffer] = self.on_direct_lane_offer
        self.direct_lanes = DirectLanes()
        self.driver_actors = DriverActors(self)  # this_proc() in the driver

    def attach(self, controller: Controller) -> None:
        self.controller = controller
        self.handlers.update(controller.handlers)

    def attach_store(self, store, service) -> None:
        from ..objstore.client import LocalBackend, StoreClient
        from ..objstore.serialization import set_store_client

        backend = LocalBackend(store)
        backend.service = service
        self.store = StoreClient(store.arena, backend)
        set_store_client(self.store)

    def _periodic_drain(self, busy: bool = False) -> None:
        store = self.controller.store if self.controller is not None else None
        if store is not None and store._unpins:  # (not while a spill holds it)
            self.controller.store_service.try_now(store.drain_unpins)
            busy = True
        super()._periodic_drain(busy)

    def send_controller(self, msg) -> None:
        self.local.send(msg)

    def send_to(self, peer: int, msg) -> None:
        if peer == 0:
            self.local.send(msg)
            return
        agent = self.relay_for.get(peer)
        if agent is not None and not agent.closed:
            agent.send(m.Relay(peer, 0, msg))  # one frame per host, fanned out by its agent
            return
        conn = self.worker_conns.get(peer)
        if conn is not None:
            conn.send(msg)

    def send_call(self, peer: int, msg, alone: bool) -> None:
        agent = self.relay_for.get(peer) if alone else None
        if agent is not None and not agent.closed:
            agent.send(m.Relay(peer, 0, msg, True))  # (the agent may use the actor's lane: direct_lanes.py)
        else:
            self.send_to(peer, msg)

    def direct_conn(self, peer: int):
        agent = self.relay_for.get(peer)
        conn = agent if agent is not None else self.worker_conns.get(peer)
        if conn is None or not conn.open or conn.closed:
            return None
        return conn, agent is not None

    def on_direct_lane_offer(self, conn, msg: m.DirectLaneOffer) -> None:
        """A local worker's lane offers its socket (direct_lanes.py)."""
        if conn.peer_id is not None and self.worker_conns.get(conn.peer_id) is conn and conn.peer_pid:
            self.direct_lanes.take(conn.peer_id, conn.peer_pid, msg.lane, msg.fd)
        conn.send(m.DirectLaneTaken(msg.lane, self.direct_lanes.refused_for(conn.peer_id)))

    def worker_connected(self, worker_id: int, conn) -> None:
        self.worker_conns[worker_id] = conn
        w = self.controller.workers.get(worker_id)
        host = self.controller.hosts.get(w.host) if w is not None and w.host else None
        if host is not None:
            self.relay_for[worker_id] = host.conn

    def forget_peer(self, peer: int) -> None:
        self.direct_lanes.drop(peer)
        self.worker_conns.pop(peer, None)
        self.relay_for.pop(peer, None)

    def note_copy(self, entry, borrower: int) -> None:
        w = self.controller.workers.get(borrower)
        if w is not None and w.host:
            self.host_copies.setdefault(entry.id, set()).add(w.host)

    def forget_copies(self, oid: int) -> None:
        if self.lent:
            self.stop_lending(oid)
        hosts = self.host_copies.pop(oid, None) if self.host_copies else None
        for host_id in hosts or ():
            host = self.controller.hosts.get(host_id)
            if host is not None and host.alive:
                host.conn.send(m.DropCopy(oid))

    def remote_peer(self, peer: int) -> bool:
        w = self.controller.workers.get(peer) if peer else None
        return w is not None and w.host != 0

    def host_of(self, peer: int) -> int | None:
        w = self.controller.workers.get(peer) if peer else None
        return 0 if not peer else w.host if w is not None else None

    @property
    def ucx_unreached(self) -> set[frozenset]:
        return self.controller.ucx_unreached

    def adopt(self, payload, count: bool = True):
        # Every payload that arrives comes through here: a block its writer left for us
        # to seal (a worker's result or Port value, see WorkerCore.owner_seals) is
        # sealed now. Sealing a sealed block again changes nothing.
        shm = payload.shm
        if shm is not None and shm[0] is not None and self.controller.store is not None:
            self.controller.store_service.run(functools.partial(self.controller.store.seal, shm[0]), 0)
        return super().adopt(payload, count)

    def pin_for(self, peer: int, payload) -> tuple:
        # A call's large argument would otherwise cost the actor's process one store
        # round trip (a pin) before it can read it: pinned here, as it is sent.
        shm = getattr(payload, "shm", None)  # (lent arguments have none)
        if shm is None or shm[0] is None or self.store is None or not peer or self.remote_peer(peer):
            return ()
        store = self.controller.store
        try:  # (not while the store is busy with a spill, nor for a spilled value)
            pinned = self.controller.store_service.try_now(lambda: store.pin_at_once(shm[0], peer))
        except Exception:  # noqa: BLE001 - lost or freed: the reader asks, and hears why
            return ()
        return () if pinned is None else ((shm[0], *pinned),)

    def unpin_for(self, peer: int, pins: tuple) -> None:
        for key, _offset, _size in pins:
            self.controller.store_service.run(functools.partial(self.controller.store.unpin, key, peer), peer)

    def note_address(self, peer: int, address) -> None:
        pass

    async def request(self, method: str, *args):
        return await self.controller.rpc(0, method, args)

    def define_code(self, code_id: int, blob_fn) -> None:
        code = self.controller.code
        if code_id not in code:
            code[code_id] = blob_fn()

    def address(self) -> str:
        return self.controller.address

    def check_feasible(self, units: tuple, what: str, actor: bool = False) -> None:
        self.controller.check_feasible(units, what, actor)

    def refuse_waiting_on_itself(self, entries: list) -> None:
        self.driver_actors.refuse_waiting_on_itself(entries)

    def on_shutdown(self, *closers) -> None:
        """Call ``closers`` first when the runtime shuts down (a metrics HTTP server)."""
        self.__dict__.setdefault("_closers", []).extend(closers)

    def shutdown(self) -> None:
        self.closing = True
        io = self.io
        for close in self.__dict__.get("_closers", ()):
            try:
                close()
            except Exception:  # noqa: BLE001 - the rest of the shutdown goes on
                logging.getLogger("meshrt").exception("meshrt: a shutdown hook failed")
        self.driver_actors.close()

        async def stop():
            self.fail_everything_pending()
            await self.controller.stop()

        try:
            io.run_sync(stop(), timeout=15)
        finally:
            from ..objstore.arena import stop_copy_helper
            from .lending import close_engine_if_open

            self.stop_lending()
            self.direct_lanes.close()
            close_engine_if_open()
            from ..objstore.serialization import set_store_client

            set_store_client(None)
            self.store = None
            self.close()
            io.stop()
            stop_copy_helper()

    def fail_everything_pending(self) -> None:
        from .. import exceptions as exc
        from ..objstore.serialization import system_error_payload
        from .pending import fail_everything

        fail_everything(self, system_error_payload(exc.RuntimeNotInitializedError(
            "meshrt.shutdown() was called while this value was still being computed")))


def init(
    address: str | None = None,
    *,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    resources: dict | None = None,
    object_store_memory: int | None = None,
    local_mode: bool = False,
    ignore_reinit_error: bool = False,
    namespace: str | None = None,
    log_to_driver: bool = True,
    logging_level: int | None = None,
    token_file: str | None = None,
    **ray_args: Any,
) -> RuntimeInfo:
    """Start meshrt in this process (the driver); see the README for the tour."""
    unknown = sorted(set(ray_args) - _IGNORED_INIT_ARGS)
    if unknown:
        raise TypeError(f"init() got unexpected keyword argument(s) {', '.join(unknown)}")
    if address is None:  # (Monarch's enable_transport("tcp"), called before: mesh/bootstrap.py)
        address = auto_init_address
    env, namespace, logs, job_details = job_config.merged(ray_args.get("job_config"), ray_args.get("runtime_env"),
                                                          namespace, ray_args.get("logging_config"))
    job_env = runtime_env.check(env, "meshrt.init()", job=True)
    node_labels = labels.node_labels(ray_args.get("labels"), "init(labels=...)")
    if logs is not None and not isinstance(logs, logging_config.LoggingConfig):
        raise TypeError(f"init(logging_config={logs!r}): give a meshrt.LoggingConfig(encoding=..., log_level=...)")
    with state.lock:
        current = state.core_or_none()
        if current is not None:
            if ignore_reinit_error:
                return _info(current)
            raise RuntimeError(
                "meshrt.init() was already called in this process; call meshrt.shutdown() "
                "first, or pass ignore_reinit_error=True"
            )
        temp_root.restore()  # (an earlier init's, which failed)
        if ray_args.get("_temp_dir") is not None:
            temp_root.use(ray_args["_temp_dir"], "init(_temp_dir=...)")
        head = None if local_mode else _running_head(address or os.environ.get("MESHRT_ADDRESS"))
        if head is not None:  # (a long-running head: this process attaches to it as a job's driver)
            from .client_driver import attach

            core = attach(head, namespace, job_env, logs.to_plain() if logs is not None else None, log_to_driver,
                          job_details)
            logging_config.apply(logs.to_plain() if logs is not None else None)
            _register_atexit()
            return _info(core, head["address"])
        amounts = _node_resources(num_cpus, num_gpus, resources, object_store_memory)
        tcp = _tcp_address(address)
        amounts.update(node_ip_resources(node_ip(addresses.parse_tcp(tcp)[0] if tcp else None), head=True))
        token = _token(tcp, token_file)
        spin.limit_ns()  # (a bad MESHRT_SPIN_US is named here, not by each lane's thread)
        call_record.clear()  # (meshrt.timeline() covers this session: not the calls of an earlier one)
        if tcp is not None:
            from . import heartbeat

            heartbeat.timeout_s()  # (a bad MESHRT_HOST_TIMEOUT_S is named here, not when an agent joins)
        config = {
            "token": token,
            "resources": amounts,
            "job_id": uuid.uuid4().hex[:8],
            "node_id": uuid.uuid4().hex,
            "namespace": namespace or "default",
            "sys_path": [p if p else os.getcwd() for p in sys.path],
            "cwd": os.getcwd(),
            "session": f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",
            "log_to_driver": log_to_driver,
            "prestart": int(amounts.get("CPU", 0)),
            "hostname": socket.gethostname(),
            "tcp_address": tcp,
            "spill_dir": ray_args.get("object_spilling_directory"),
            "temp_dir": temp_root.root(),
            "logging_config": logs.to_plain() if logs is not None else None,
            "labels": node_labels,
            **job_details,  # (metadata, default_actor_lifetime: JobConfig)
        }
        if job_env is not None and local_mode:
            warnings.warn("meshrt.init(local_mode=True): runtime_env is not applied in local mode (tasks run in "
                          "this process)", RuntimeWarning, stacklevel=2)
        elif job_env is not None:  # (packed before any worker starts: every one is welcomed into it)
            config["runtime_env"], config["packages"] = runtime_env.resolve(job_env, "meshrt.init()")
        if local_mode:
            from .local_mode import LocalCore

            core = LocalCore(config)
        else:
            from .procutil import freeze_imports_out_of_gc, raise_open_file_limit
            from .spawn import fork_zygote_if_safe

            raise_open_file_limit()
            freeze_imports_out_of_gc()
            config["preforked_zygote"] = fork_zygote_if_safe()  # before our first thread
            io = LoopThread("meshrt-controller")
            core = DriverCore(io, token)
            controller = Controller(core, io, config)
            core.attach(controller)
            try:
                io.run_sync(controller.start(), timeout=30)
            except BaseException as err:
                with contextlib.suppress(Exception):  # (the start's own error is the one to see)
                    io.run_sync(controller.stop(), timeout=10)  # what it made: servers, store, zygote
                io.stop()
                if isinstance(err, OSError) and tcp is not None:
                    raise _listen_error(err, address) from None
                raise
            core.attach_store(controller.store, controller.store_service)
            io.post(core.start_timers)
            if tcp is not None:  # (Ray's address= attaches: say that this one listens, as no head ran there)
                log.warning("meshrt: no head ran at %s, so this driver is the cluster's head, listening there for "
                            "other hosts (`meshrt agent --address %s`); to attach drivers to a head, start one "
                            "with `meshrt start --head`", address, controller.public_address.removeprefix("tcp:"))
        context.process.update(
            job_id=config["job_id"], node_id=config["node_id"], namespace=config["namespace"],
            worker_id=0, resources=amounts,
        )
        core.config = config
        logging_config.apply(config["logging_config"])
        runtime_env.set_job(config.get("runtime_env"))
        state.set_core(core)
        _register_atexit()
        return _info(core)


def _info(core, head: str | None = None) -> RuntimeInfo:
    config = getattr(core, "config", {})
    controller = getattr(core, "controller", None)
    tcp = controller.public_address if controller is not None else head
    return RuntimeInfo(
        address=controller.address if controller is not None else head or "local",
        tcp_address=tcp.removeprefix("tcp:") if tcp else None,
        node_id=config.get("node_id"), namespace=config.get("namespace"),
        job_id=config.get("job_id"), session=config.get("session"),
    )


def _node_resources(num_cpus, num_gpus, resources, object_store_memory) -> dict:
    from ..scheduler.resources import validate_request

    amounts: dict[str, float] = {}
    amounts["CPU"] = (os.cpu_count() or 1) if num_cpus is None else num_cpus
    amounts["GPU"] = gpus.detect_gpu_count() if num_gpus is None else num_gpus
    for name, value in (resources or {}).items():
        if name in ("CPU", "GPU"):
            raise ValueError(f"init(resources={{{name!r}: ...}}): use num_cpus= / num_gpus= for {name}")
        amounts[name] = value
    validate_request(amounts, "init()")
    if amounts["GPU"] and not any(name.startswith(ACCELERATOR_PREFIX) for name in amounts):
        model = gpus.detect_accelerator_type()  # (for accelerator_type=; given in resources=, that one)
        if model:
            amounts[ACCELERATOR_PREFIX + model] = 1
    if amounts["GPU"] != int(amounts["GPU"]):
        raise ValueError(f"init(num_gpus={num_gpus}): a node has a whole number of GPUs")
    total_ram = _total_memory()
    amounts.setdefault("memory", int(total_ram * 0.7))
    if object_store_memory is not None:
        if isinstance(object_store_memory, bool) or not isinstance(object_store_memory, int) or object_store_memory <= 0:
            raise ValueError(f"init(object_store_memory={object_store_memory!r}): give a size in bytes > 0")
        amounts["object_store_memory"] = object_store_memory
    else:  # Ray's default: 30% of memory, capped by the shared-memory mount
        amounts["object_store_memory"] = min(int(total_ram * 0.3), _shm_size() or total_ram)
    return amounts


def _shm_size() -> int | None:
    try:
        st = os.statvfs("/dev/shm")
        return st.f_bavail * st.f_frsize
    except OSError:
        return None


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def _token(tcp_address: str | None, token_file: str | None) -> bytes:
    """MESHRT_TOKEN or a token file when given; a fresh secret otherwise. A driver that
    listens on TCP writes the fresh one where agents look for it by default."""
    from . import cluster_token

    token = cluster_token.from_env_or_file(token_file)
    if token is not None:
        return token
    if tcp_address is None:
        return secrets.token_bytes(32)
    token, fresh = cluster_token.generate_or_reuse()
    log.warning("meshrt: %s the cluster token in %s (mode 0600); agents on other hosts need it: "
                "`meshrt agent --address HOST:PORT --token-file %s`, or set MESHRT_TOKEN on both sides",
                "generated" if fresh else "using", cluster_token.DEFAULT_FILE, cluster_token.DEFAULT_FILE)
    return token


def _running_head(address: str | None) -> dict | None:
    """The long-running head (``meshrt start --head``) to attach to: for "auto", the
    one this host runs; for HOST:PORT, that one if it is where this host's head listens
    (else ``address`` is where this driver listens, as before)."""
    if address in (None, "", "local") or address.startswith(("unix:", "ray://")):
        return None
    from . import cluster_file

    head = cluster_file.read()
    if address == "auto":
        if head is None:
            raise ConnectionError("meshrt.init(address='auto'): no meshrt head runs on this host; start one with "
                                  "`meshrt start --head` (or call meshrt.init() to run one in this program)")
        return head
    wanted = address.removeprefix("tcp:")
    return head if head is not None and wanted in (head["address"], head.get("bind")) else None


def _tcp_address(address: str | None) -> str | None:
    if address in (None, "", "auto", "local") or address.startswith("unix:"):
        return None
    if address.startswith("ray://"):
        raise ValueError(f"init(address={address!r}): meshrt has no Ray Client to attach to a cluster from afar; "
                         f"run this program on the cluster's head host, with init(address='0.0.0.0:6380') to let "
                         f"the other hosts join it (`meshrt agent --address HEAD:6380` on each)")
    if address.startswith("tcp:"):
        return address
    if ":" not in address:
        raise ValueError(f"init(address={address!r}): expected HOST:PORT to listen on")
    return "tcp:" + address


def _listen_error(err: OSError, address: str) -> OSError:
    """Why the driver cannot listen at ``init(address=...)``, and what to do: a Ray user
    may have meant to attach to a cluster that runs elsewhere."""
    role = (f"init(address={address!r}) makes this driver the cluster's head, listening there for the other "
            f"hosts' agents")
    if err.errno == errno.EADDRNOTAVAIL:
        hint = ("this machine has no such address. meshrt does not attach a driver to a cluster started "
                "elsewhere (as Ray's address= does): run this program on the head host, and `meshrt agent "
                "--address HEAD:PORT` on each other host; '0.0.0.0:6380' listens on every interface")
    elif err.errno == errno.EADDRINUSE:
        hint = "that port is taken (another meshrt driver, or a Ray head?); pick a free port, or port 0 for any"
    else:
        hint = "give HOST:PORT of this machine"
    return OSError(err.errno, f"{role}, but {err.strerror or err}: {hint}")


# Where a runtime started without init() listens for hosts (Monarch's enable_transport: mesh/bootstrap.py).
auto_init_address: str | None = None


def auto_init() -> None:
    """``.remote()``/``get``/``put`` before ``init()``: start with defaults, as Ray does."""
    with state.lock:
        if state.core_or_none() is None:
            init()


def shutdown() -> None:
    """Stop every worker and the controller; ``init()`` may be called again afterwards."""
    with state.lock:
        core = state.core_or_none()
        if core is None:
            return
        if not core.is_driver:  # (Ray's would take the worker down; this one serves on)
            warnings.warn("meshrt.shutdown() inside a task or actor does nothing: the runtime is its "
                          "driver's to shut down", RuntimeWarning, stacklevel=2)
            return
        state.set_core(None)
        runtime_env.set_job(None)
        runtime_env.set_current(None)  # (an attached driver's job: client_driver.py)
        metrics_local.local().reset()
        logging_config.remove()
        try:
            core.shutdown()
        finally:
            context.process.update(actor_id=None)
            temp_root.restore()


def _register_atexit() -> None:
    global _atexit_registered
    if not _atexit_registered:
        _atexit_registered = True
        atexit.register(shutdown)


def is_initialized() -> bool:
    return state.core_or_none() is not None


"""HostMesh and ProcMesh: where mesh processes come from.

``this_host().spawn_procs(per_host={"gpus": 4})`` starts one ProcHost actor per
point. Each is an ordinary meshrt actor, so it is placed by the scheduler (one GPU
each when the host has enough GPUs for a "gpus" dim), watched by the controller,
and ends when the last reference to its mesh goes or ``stop()`` is called.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import math
import os
import warnings
import weakref
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from .. import exceptions as exc
from .._private import context as rt_context
from .._private import lanes, state
from .._private.args import CallChecker
from ..objstore.serialization import dumps_code
from . import python_executable, supervision, table
from .actor import ENDPOINT_MARK, OwnerCell, current_owner, endpoint_names, plain_method_names
from .actor_mesh import ActorMesh, MeshState, _gather
from .future import Future, ready
from .lifetime import StoppedOnExit
from .proc_host import ProcHost
from .shape import Point, Shape, Shaped, check_dims

log = logging.getLogger("meshrt")
_checked_python = python_executable.checked  # (HostMesh.with_python_executable's argument shares the module's name)

_names = itertools.count()
_host_classes: dict = {}


class HostMesh(Shaped, StoppedOnExit):
    """Hosts, as a mesh: ``this_host()`` (no dims) or ``meshrt.hosts(...)`` {"hosts": N}."""

    def __init__(self, shape: Shape, host_ids: tuple, python: str | None = None) -> None:
        self._shape = shape
        self._host_ids = host_ids  # per underlying rank
        self._python = python_executable.inherited() if python is None else python  # ('': the driver's)

    def slice(self, **dims) -> HostMesh:
        return self._reshaped(self._shape.slice(**dims))

    def _reshaped(self, shape: Shape) -> HostMesh:
        return HostMesh(shape, self._host_ids, self._python)

    def with_python_executable(self, python_executable: str) -> HostMesh:
        """These hosts, their new processes running ``python_executable`` (python_executable.py)."""
        return HostMesh(self._shape, self._host_ids, _checked_python(python_executable))

    @property
    def stream_logs(self) -> bool:
        """Monarch's flag: the processes' output reaches this client (unless log_to_driver=False)."""
        return bool((getattr(state.core(), "config", None) or {}).get("log_to_driver", True))

    @property
    def initialized(self) -> Future:
        """Resolves to True: a HostMesh is made of hosts that have already joined."""
        return ready(True)

    def stop(self) -> Future:
        """Stop the process meshes this process spawned that have a process on these hosts
        (each one whole, as its ``stop()`` does); the hosts stay, ready for new processes."""
        on = {self._host_ids[r] for r in self._shape.ranks()}
        registry = _spawned(state.core())
        meshes = [_whole(registry, st) for st, (_, hosts, _) in list(registry.items())
                  if not st.stopping and on & set(hosts)]
        stops = [mesh.stop() for mesh in meshes if mesh is not None]

        async def aget():
            for stop in stops:
                await stop

        def get(timeout):
            for stop in stops:
                stop.get(timeout)

        return Future(aget, get)

    def shutdown(self, timeout: float = 30.0) -> Future:
        """``stop()``, then these hosts' agents exit and leave the cluster (start
        ``meshrt agent`` there again to rejoin). Resolves once they are gone. The head
        host is this driver's own: end it with ``meshrt.shutdown()``."""
        on = tuple(sorted({self._host_ids[r] for r in self._shape.ranks()}))
        if 0 in on:
            raise ValueError("shutdown(): this host mesh includes the head host, where the driver runs; "
                             "shut down agents' hosts only (meshrt.hosts() gives them), stop() the head's "
                             "processes, or call meshrt.shutdown()")
        stopped = self.stop()
        core = state.core()

        async def aget():
            await stopped
            done = asyncio.run_coroutine_threadsafe(core.request("shutdown_hosts", on, timeout), core.io.loop)
            await asyncio.wrap_future(done)

        def get(wait_s):
            stopped.get(wait_s)
            core.request_sync("shutdown_hosts", on, timeout, timeout=timeout + 5)

        return Future(aget, get)

    def sync_workspace(self, workspace, conda: bool = False, auto_reload: bool = False) -> Future:
        """Copy the workspace's local directories to these hosts (``$WORKSPACE_DIR/<name>``),
        where processes import from them; ``auto_reload``: the processes spawned there
        reload the modules whose files changed (see mesh/workspace.py)."""
        from .workspace import sync

        return sync([self._host_ids[r] for r in self._shape.ranks()], workspace, conda, auto_reload)

    def spawn_procs(self, per_host: Mapping | None = None, bootstrap: Callable | None = None,
                    name: str | None = None) -> ProcMesh:
        """Start processes: ``per_host={"gpus": 4}`` -> a ProcMesh {"gpus": 4} per host.

        ``per_host`` may name several dims (``{"hosts": 2, "gpus": 2}`` on one machine);
        without any (None or ``{}``), one process per host, as in Monarch. ``bootstrap``:
        a function (``def`` or ``async def``, no arguments) each new process runs first,
        before any actor is spawned there, as in Monarch; if it raises, the calls to that
        process's actors fail with its error.
        """
        if bootstrap is not None and not callable(bootstrap):
            raise TypeError(f"spawn_procs(bootstrap=...): give a function each new process runs first, or None; "
                            f"got {type(bootstrap).__name__} (name the mesh with name=...)")
        labels, sizes = check_dims(per_host if per_host is not None else {}, "spawn_procs(per_host=...)")
        clash = set(labels) & set(self._shape.labels)
        if clash:
            raise ValueError(f"spawn_procs(per_host=...): {sorted(clash)} already names a dimension of the "
                             f"host mesh {self.extent}; pick other names")
        hosts = [self._host_ids[r] for r in self._shape.ranks()]
        labels = self._shape.labels + labels
        sizes = self._shape.sizes + sizes
        setup = dumps_code(bootstrap) if bootstrap is not None else None
        return _spawn(name or f"procs{next(_names)}", labels, sizes, _count(per_host), hosts, setup, self._python)

    def __repr__(self) -> str:
        return f"<HostMesh {self.extent}>"


def _endpoint_checker(cls: type, endpoint: str, mesh: str) -> CallChecker:
    """Checks a call's arguments against the endpoint's own (less ``self``, and the
    port an ``explicit_response_port=True`` endpoint is given)."""
    fn = getattr(cls, endpoint)
    bound = isinstance(inspect.getattr_static(cls, endpoint), (staticmethod, classmethod))
    if (getattr(fn, ENDPOINT_MARK, None) or {}).get("explicit_response_port"):
        fn = partial(fn, None) if bound else partial(fn, None, None)
        bound = True
    return CallChecker.for_callable(fn, f"{mesh}.{endpoint}", drop_self=not bound, call="(...)")


def _mesh_core():
    core = state.core()
    if getattr(core, "local_mode", False):
        raise RuntimeError("actor meshes need processes: meshrt.init(local_mode=True) runs Ray-style tasks "
                           "and actors only; call meshrt.init() without local_mode to use meshes")
    return core


def this_host() -> HostMesh:
    """The host this code runs on."""
    core = _mesh_core()
    return HostMesh(Shape((), 0, (), ()), (core.host_id,))


def hosts(min_hosts: int | None = None, timeout: float | None = 60.0) -> HostMesh:
    """The hosts whose agents joined this cluster (``meshrt agent --address ...``), as a
    HostMesh {"hosts": N}; waits until at least ``min_hosts`` have joined (default: the
    job's node count under SLURM, else 1)."""
    if min_hosts is None:
        from .._private import slurm

        min_hosts = slurm.num_nodes() or 1
    if isinstance(min_hosts, bool) or not isinstance(min_hosts, int) or min_hosts < 1:
        raise ValueError(f"hosts(min_hosts={min_hosts!r}): give an int >= 1")
    core = _mesh_core()
    wait = None if timeout is None else timeout + 5
    joined = core.request_sync("hosts", min_hosts, timeout, timeout=wait)
    ids = tuple(h[0] for h in joined)
    return HostMesh(Shape.dense(("hosts",), (len(ids),)), ids)


def this_proc() -> ProcMesh:
    """The process this code runs in, as a one-process mesh. In the driver, actors
    spawned on it run inside the driver's own process (as in Monarch), sharing its
    memory; inside a mesh actor, they run in that actor's process."""
    core = _mesh_core()
    if core.is_driver:
        handle = core.driver_actors.this_proc()
        return ProcMesh("driver", (handle,), Shape((), 0, (), ()), None, None, (core.host_id,), in_driver=True)
    actor_id = rt_context.process.get("actor_id")
    if actor_id is None or rt_context.process.get("actor_class") != "ProcHost":
        raise RuntimeError(
            "this_proc() names a mesh process or the driver, and this code runs in neither (a plain "
            "task or a Ray-style actor); spawn processes with this_host().spawn_procs(...) and spawn "
            "actors there")
    from .._private.toplevel import RuntimeContext

    handle = RuntimeContext().current_actor
    return ProcMesh(f"proc-{actor_id:x}", (handle,), Shape((), 0, (), ()), None, None, (core.host_id,))


class ProcMesh(Shaped, StoppedOnExit):
    """Processes with named dims. ``spawn`` starts actors in them; ``stop`` ends them."""

    def __init__(self, name: str, procs: tuple, shape: Shape, mesh_state: MeshState | None,
                 env_ranks: tuple | None = None, hosts: tuple | None = None, in_driver: bool = False) -> None:
        self._name = name
        self._in_driver = in_driver  # this_proc() of the driver: the driver's own process
        self._procs = procs
        self._shape = shape
        self._state = mesh_state
        self._local = env_ranks  # (local_rank, local_world) per process, in rank order
        self._hosts = hosts or (0,) * len(procs)  # host id per process

    def slice(self, **dims) -> ProcMesh:
        return self._reshaped(self._shape.slice(**dims))

    def _reshaped(self, shape: Shape) -> ProcMesh:
        return ProcMesh(self._name, self._procs, shape, self._state, self._local, self._hosts, self._in_driver)

    to_table = table.to_table  # (Monarch's: each process as host.gpu[i], by the mesh's dims)

    def spawn(self, name: str, actor_class: Any, *args, **kwargs) -> ActorMesh:
        """Start one ``actor_class(*args, **kwargs)`` in every process; returns the ActorMesh
        at once (calls wait behind the constructors). Takes an ``Actor`` subclass with
        ``@endpoint`` methods or a ``@meshrt.remote`` class."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"spawn(name, Class, ...): the first argument is the mesh's name, got {name!r}")
        if self._state is not None and self._state.stopping:
            raise RuntimeError(f"spawn({name!r}, ...): the processes of {self._name!r} were stopped with stop(); "
                               f"start new ones with this_host().spawn_procs(...) (or hosts.spawn_procs)")
        cls = checked_class("spawn", name, actor_class, args, kwargs)
        endpoints = {n: (_endpoint_checker(cls, n, name), is_async) for n, is_async in endpoint_names(cls).items()}
        plain = {n: (_endpoint_checker(cls, n, name), is_async)
                 for n, is_async in plain_method_names(cls, endpoints).items()}
        hidden = sorted(n for n in endpoints if hasattr(ActorMesh, n) and n != "endpoint")
        if hidden:
            how = "ActorMesh.endpoint(mesh, " if "endpoint" in endpoints else "mesh.endpoint("
            warnings.warn(f"spawn({name!r}, {cls.__name__}, ...): the mesh's own {hidden} hide the endpoint(s) "
                          f"of the same name; call them as {how}{hidden[0]!r}).call(...), or rename them",
                          stacklevel=2)
        core = state.core()
        extent = self.extent
        blob = _class_blob(cls)
        if self._in_driver and core.is_driver:  # runs here: the class itself, not a copy made from its code
            host = core.driver_actors.instance(self._procs[0]._actor_id)
            if host is not None:
                host.classes.setdefault(blob, cls)
        key = f"{name}#{os.urandom(6).hex()}"
        failures = supervision.failure_port_for(self._state, key, lambda: _owner_here(core))
        spawned = [
            core.call_actor(self._procs[r], lanes.named("spawn", key),
                            (name, key, blob, extent.labels, extent.sizes, i, args, kwargs, failures),
                            {}, 1, inline=self._hosts[r] != core.host_id)
            for i, r in enumerate(self._shape.ranks())
        ]
        for ref in spawned:  # (a constructor that raises is reported to supervision: its ref is no unread error)
            if (entry := core.table.entries.get(ref._id)) is not None:
                entry.seen = True
        if self._state is not None:  # (its actors fail with these processes: supervision.py reports them)
            self._state.actor_meshes[key] = (name, tuple(self._shape.ranks()), extent)
        mesh = ActorMesh(name, cls.__name__, endpoints, self._procs, self._shape, self._state, spawned,
                         hosts=self._hosts, key=key, plain=plain)
        mesh._owned = True
        return mesh

    def sync_workspace(self, workspace, conda: bool = False, auto_reload: bool = False) -> Future:
        """``HostMesh.sync_workspace`` on the hosts these processes run on."""
        from .workspace import sync

        return sync([self._hosts[r] for r in self._shape.ranks()], workspace, conda, auto_reload)

    def init_torch_distributed(self, backend: str | None = None) -> Future:
        """Bring up torch.distributed over these processes (gloo on CPU, NCCL on GPU) and a
        DeviceMesh named like this mesh, available in each as ``meshrt.device_mesh()``."""
        core = state.core()
        ranks = self._shape.ranks()
        world = len(ranks)
        extent = self.extent
        first = self._hosts[ranks[0]]
        same_host = all(self._hosts[r] == first for r in ranks)
        # Rank 0's process picks the rendezvous port, on its own host.
        port_ref = core.call_actor(self._procs[ranks[0]], "free_port", (), {}, 1)

        def start(port: int) -> list:
            addr = "127.0.0.1" if same_host else core.request_sync("host_info", first)["address"]
            refs = []
            for i, r in enumerate(ranks):
                local_rank, local_world = self._local[r] if self._local else (i, world)
                env = {"MASTER_ADDR": addr, "MASTER_PORT": str(port), "RANK": str(i), "WORLD_SIZE": str(world),
                       "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(local_world)}
                refs.append(core.call_actor(self._procs[r], "init_torch_distributed",
                                            (env, backend, extent.labels, extent.sizes), {}, 1,
                                            inline=self._hosts[r] != core.host_id))
            return refs

        mesh = self._hosts_mesh()
        points = self._points()

        async def aget():
            port = await port_ref
            refs = await asyncio.to_thread(start, port)
            return await _gather(mesh, refs, points, "init_torch_distributed", build=_first)

        def get(timeout):
            port = core.get([port_ref], timeout)[0]
            return _gather(mesh, start(port), points, "init_torch_distributed", build=_first).get(timeout)

        return Future(aget, get)

    def logging_option(self, stream_to_client: bool = False, aggregate_window_sec: float | None = None,
                       level: int = logging.INFO) -> Future:
        """What becomes of these processes' output (as in Monarch): printed by the driver
        (``stream_to_client``), with the lines printed within each
        ``aggregate_window_sec`` gathered into one per distinct text and a count; and
        their root logger's ``level``. Takes effect at once; the Future resolves
        once every process has its level (``await`` it or not)."""
        if aggregate_window_sec is not None:
            if not stream_to_client:
                raise ValueError("logging_option(aggregate_window_sec=...) gathers the lines streamed to the "
                                 "driver; give stream_to_client=True as well")
            if isinstance(aggregate_window_sec, bool) or not isinstance(aggregate_window_sec, (int, float)) \
                    or aggregate_window_sec <= 0:
                raise ValueError(f"logging_option(aggregate_window_sec={aggregate_window_sec!r}): give the "
                                 f"window in seconds (> 0), or None")
        if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 255:
            raise ValueError(f"logging_option(level={level!r}): give a logging level (0-255) such as logging.INFO")
        core = state.core()
        ranks = self._shape.ranks()
        window = None if aggregate_window_sec is None else float(aggregate_window_sec)
        core.request_sync("log_options", tuple(int(self._procs[r]._actor_id) for r in ranks), bool(stream_to_client),
                          window)
        refs = [core.call_actor(self._procs[r], "set_log_level", (level,), {}, 1,
                                inline=self._hosts[r] != core.host_id) for r in ranks]
        return _gather(self._hosts_mesh(), refs, self._points(), "logging_option", build=lambda values: None)

    @property
    def initialized(self) -> Future:
        """Resolves to True once every process is up (calls made meanwhile wait anyway)."""
        core = state.core()
        refs = [core.call_actor(self._procs[r], "__ray_ready__", (), {}, 1, inline=self._hosts[r] != core.host_id)
                for r in self._shape.ranks()]
        return _gather(self._hosts_mesh(), refs, self._points(), "initialized", build=lambda values: True)

    @property
    def host_mesh(self) -> HostMesh:
        """The host these processes run on (slice a mesh over several hosts first)."""
        on = {self._hosts[r] for r in self._shape.ranks()}
        if len(on) != 1:
            raise ValueError(f"host_mesh: the processes of {self.extent} run on {len(on)} hosts; slice them to "
                             f"one host first, e.g. procs.slice(hosts=0).host_mesh")
        return HostMesh(Shape((), 0, (), ()), (on.pop(),))

    def _hosts_mesh(self) -> ActorMesh:
        """The ProcHost actors of these processes, as an actor mesh (to gather their replies)."""
        return ActorMesh(self._name, "ProcHost", {}, self._procs, self._shape, self._state, hosts=self._hosts)

    def _points(self) -> list[Point]:
        extent = self.extent
        return [Point(i, extent) for i in range(len(self._shape))]

    def stop(self, reason: str = "stopped by client", timeout: float | None = 30.0) -> Future:
        """End these processes cleanly; resolves when they have exited. Each process
        first finishes the calls it was given before; one still busy after ``timeout``
        seconds (a call blocked for good, say in a collective whose peer died) is killed,
        so stop() always ends (None: wait as long as it takes). ``reason`` (Monarch's
        argument) is in the error of every later call to these processes."""
        if not isinstance(reason, str):
            raise TypeError(f"stop(reason=...): give the reason as a str (the seconds to wait go in timeout=...); "
                            f"got {reason!r}")
        if timeout is not None and (not isinstance(timeout, (int, float)) or timeout < 0):
            raise ValueError(f"stop(timeout=...): give the seconds to wait before killing, or None; got {timeout!r}")
        if self._in_driver:
            raise RuntimeError("stop() of this_proc() in the driver: that process is the driver itself, which "
                               "stop() does not end; stop the actor meshes spawned there (mesh.stop()) or "
                               "call meshrt.shutdown()")
        self._check_owned()
        self._state.stopping = True
        self._state.stop_reason = reason
        core = state.core()
        ranks = self._shape.ranks()
        refs = [core.call_actor(self._procs[r], "stop", (reason,), {}, 1) for r in ranks]

        def kill_the_rest() -> None:  # (core loop, ``timeout`` after stop(): however it is awaited)
            entries = core.table.entries
            busy = [r for r, ref in zip(ranks, refs, strict=True)
                    if (entry := entries.get(ref._id)) is not None and entry.payload is None]
            if busy:
                log.warning("meshrt: %d process(es) of mesh %r still busy %s s after stop(); killing them",
                            len(busy), self._name, timeout)
            for r in busy:
                core.kill_actor(self._procs[r]._actor_id, True)

        if timeout is not None:
            core.io.post(lambda: core.io.loop.call_later(timeout, kill_the_rest))

        def refused() -> None:
            """A process that died or was killed counts as stopped; one that refused says why."""
            for ref in refs:
                try:
                    core.get([ref], 0)
                except exc.RayActorError:
                    pass

        async def aget():
            await core.wait_all_async(refs)
            refused()

        def get(wait_s):
            ready = core.wait(refs, len(refs), wait_s)[0]
            if len(ready) < len(refs):
                raise exc.GetTimeoutError(f"stop() of mesh {self._name!r}: {len(refs) - len(ready)} process(es) "
                                          f"still running after {wait_s} s")
            refused()

        return Future(aget, get)

    def _check_owned(self) -> None:
        """As in Monarch, only the mesh that spawn_procs() returned, in the process that
        called it, stops the processes: a slice or a copy passed elsewhere would end
        processes that other holders go on calling."""
        if self._state is None:
            raise ValueError(f"stop() of process mesh {self._name!r}: this handle is a copy passed between "
                             f"processes (or this_proc()), and only the mesh that spawn_procs() returned, in the "
                             f"process that called it, stops the processes (as in Monarch); stop them with that "
                             f"one, or stop just your actors with the actor mesh that spawn() returned")
        if len(self._shape) != len(self._procs):
            raise ValueError(f"stop() of a slice of process mesh {self._name!r}: processes stop together, by "
                             f"stop() of the mesh that spawn_procs() returned (as in Monarch)")

    def __reduce__(self):
        return (ProcMesh, (self._name, self._procs, self._shape, None, self._local, self._hosts, self._in_driver))

    def __repr__(self) -> str:
        return f"<ProcMesh {self._name!r} {self.extent}>"


def _spawn(name: str, labels: tuple, sizes: tuple, per_host_count: int, host_ids: list,
           bootstrap: bytes | None = None, python: str = "") -> ProcMesh:
    core = state.core()
    total = math.prod(sizes)
    proc_hosts = tuple(host_ids[rank // per_host_count] for rank in range(total))
    gpus = {h: _gpus_per_proc(core, h, labels, per_host_count) for h in set(proc_hosts)}
    extent = Shape.dense(labels, sizes).extent
    procs = tuple(_host_class(gpus[h], h).options(_label=_proc_label(name, Point(rank, extent)), _python=python)
                  .remote(name, labels, sizes, rank, {}, bootstrap=bootstrap)
                  for rank, h in enumerate(proc_hosts))
    mesh_state = MeshState(name, Shape.dense(labels, sizes).extent, _owner_here(core))
    core.io.post(supervision.watch, core, procs, mesh_state)
    local = tuple((r % per_host_count, per_host_count) for r in range(total))
    mesh = ProcMesh(name, procs, Shape.dense(labels, sizes), mesh_state, local, proc_hosts)
    mesh_state.whole = weakref.ref(mesh)
    # (weakly: the processes end when the last handle to them goes, as ever)
    _spawned(core)[mesh_state] = (tuple(weakref.ref(p) for p in procs), proc_hosts, local)
    return mesh


def _owner_here(core):
    """Who supervises what this code spawns: the mesh actor running it, or a plain
    (Ray-style) actor; None in the driver (its unhandled_fault_hook)."""
    owner = current_owner()
    if owner is None and not core.is_driver:
        owner = OwnerCell(getattr(getattr(core, "executor", None), "instance", None))
    return owner


def stop_owned_by(owner, reason: str) -> None:
    """Stop, without waiting, the process meshes that the actor behind ``owner`` (an
    OwnerCell) spawned: it ended itself, and its children end with it, as in Monarch."""
    core = state.core_or_none()
    if core is None or owner is None:
        return
    registry = _spawned(core)
    for mesh_state in list(registry):
        if mesh_state.owner is owner and not mesh_state.stopping:
            mesh = _whole(registry, mesh_state)
            if mesh is not None and not mesh._in_driver:
                mesh.stop(reason)


def stop_spawned(core, timeout: float) -> None:
    """Stop every process mesh this process spawned and has not stopped, and wait for
    them (shutdown_context): a process still busy after ``timeout`` s is killed."""
    registry = _spawned(core)
    meshes = [_whole(registry, st) for st in list(registry) if not st.stopping]
    stops = [mesh.stop("shutdown_context()", timeout) for mesh in meshes if mesh is not None and not mesh._in_driver]
    for stop in stops:
        try:
            stop.get(timeout + _KILL_WAIT_S)
        except Exception as err:  # noqa: BLE001 - shutdown goes on: what is left ends with the runtime
            log.warning("meshrt: shutdown_context(): %s", err)


_KILL_WAIT_S = 10.0  # (a process killed at the timeout takes a moment to be seen gone)


def _spawned(core) -> weakref.WeakKeyDictionary:
    """The process meshes this process spawned in this runtime, while anything of theirs
    is held (a slice, an actor mesh on them): for HostMesh.stop()."""
    registry = core.__dict__.get("_spawned_meshes")
    if registry is None:
        registry = core.__dict__["_spawned_meshes"] = weakref.WeakKeyDictionary()
    return registry


def _whole(registry, mesh_state: MeshState) -> ProcMesh | None:
    """The ProcMesh as spawned (made again if only its slices are left), or None when its
    processes were released."""
    mesh = mesh_state.whole()
    if mesh is None:
        refs, hosts, local = registry[mesh_state]
        procs = tuple(r() for r in refs)
        if any(p is None for p in procs):
            return None
        mesh = ProcMesh(mesh_state.name, procs, Shape.dense(mesh_state.extent.labels, mesh_state.extent.sizes),
                        mesh_state, local, hosts)
    return mesh


def _proc_label(mesh_name: str, point: Point) -> str:
    """How the driver names a mesh process before the lines it prints: ``procs0 gpus=1``."""
    coords = ",".join(f"{k}={v}" for k, v in zip(point.extent.labels, point.coords(), strict=True))
    return f"{mesh_name} {coords}" if coords else mesh_name


def _gpus_per_proc(core, host: int, labels: tuple, per_host: int) -> int:
    if "gpus" not in labels:
        return 0
    if host == 0 and core.is_driver:  # (this host's own, not the cluster's sum)
        resources = core.controller.node.as_floats("total")
    else:
        resources = core.request_sync("host_info", host)["resources"]
    have = int(resources.get("GPU", 0))
    if have == 0:
        return 0  # a CPU machine: "gpus" is just a name for the processes
    if have < per_host:
        raise ValueError(f"spawn_procs(per_host=...) asks for {per_host} processes with a GPU each, but this "
                         f"host has {have} GPU(s); lower the 'gpus' size or name the dimension otherwise")
    return 1


def _host_class(gpus: int, host: int):
    cls = _host_classes.get((gpus, host))
    if cls is None:
        from .._private.api import ActorClass

        cls = _host_classes[(gpus, host)] = ActorClass(
            ProcHost, {"num_cpus": 0, "num_gpus": gpus, "max_concurrency": 1000, "_host": host})
    return cls


def _first(values: list):
    return values[0] if values else None


def _count(per_host: Mapping | None) -> int:
    return math.prod((per_host or {}).values())


_blobs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _class_blob(cls: type) -> bytes:
    """The class as code (kept per class): by value when it lives in ``__main__`` or a
    test file, with its real file name so remote tracebacks show the source."""
    blob = _blobs.get(cls)
    if blob is None:
        blob = _blobs[cls] = dumps_code(cls)
    return blob


def checked_class(call: str, name: str, actor_class: Any, args: tuple, kwargs: dict) -> type:
    """The user's class behind ``actor_class``, once its constructor would take
    ``args``/``kwargs``: said at the call site, not later by the process it runs in."""
    from .._private.api import ActorClass

    if isinstance(actor_class, ActorClass):
        cls = actor_class._cls
    elif inspect.isclass(actor_class):
        cls = actor_class
    else:
        raise TypeError(f"{call}(name, Class, ...) needs a class (an Actor subclass or a @meshrt.remote class), "
                        f"got {type(actor_class).__name__}")
    init = cls.__dict__.get("__init__")
    if inspect.isfunction(init):
        CallChecker.for_callable(init, f"{call}({name!r}, {cls.__name__}, ...): {cls.__name__}.__init__",
                                 drop_self=True, call="").check(args, kwargs)
    return cls

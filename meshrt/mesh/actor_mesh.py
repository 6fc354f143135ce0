"""ActorMesh and its endpoints: ``mesh.step.call(x)``, ``call_one``, ``broadcast``,
``choose``, ``stream``.

Every message is an actor call to the ProcHost of one process, so per caller and
process messages arrive in the order sent. A call to many actors serializes its
arguments once: they are put in the object store and each process receives them
from there (large buffers zero-copy).
"""

from __future__ import annotations

import asyncio
import difflib
import logging
import random
import threading
import time
from typing import Any

from .. import exceptions as exc
from .._private import lanes, state
from .._private.args import CallChecker, name_bad_argument
from .._private.portal import failed
from ..objstore.serialization import SHM_THRESHOLD, big_bytes_out_of_band
from . import supervision
from .future import Future
from .proc_host import ENDED_ITSELF, STOPPED, UNANSWERED
from .shape import Point, Shape, Shaped
from .values import ValueMesh

log = logging.getLogger("meshrt")


class MeshState:
    """What the process that made a mesh knows about it: owner, stopping, load.
    Shared by the mesh, its slices and the actor meshes spawned on it; not pickled."""

    def __init__(self, name: str, extent, owner: Any) -> None:
        self.name = name
        self.extent = extent
        self.owner = owner
        self.stopping = False
        self.stop_reason = ""  # ProcMesh.stop(reason)
        # A death that a waiting caller saw is that caller's to handle, not supervision's:
        # set by meshrt.parallel's Trainer, which waits on every call and reports deaths itself.
        self.callers_handle_deaths = False
        # Spawn key -> (name, process ranks, extent) of the actor meshes spawned from here on
        # these processes and not stopped: a process's death is reported for each of them.
        self.actor_meshes: dict[str, tuple] = {}
        self.failures = None  # (Port, keeper) its actors report an abort() to (supervision.failure_port)
        self.whole = lambda: None  # the ProcMesh as spawned, weakly (meshes.py)


# Spawn keys of the actor meshes this process stopped, with the reason given: their later
# calls fail at the call site (a spawn key is never reused).
_stopped_here: dict[str, str] = {}


class ActorMesh(Shaped):
    """Actors of one class, one per process of a ProcMesh, addressed as one array."""

    # Set on the mesh spawn() returns, in the process that called it: only that one
    # stops the actors (as in Monarch); its slices and copies passed elsewhere do not.
    _owned = False

    def __init__(self, name: str, class_name: str, endpoints: dict, procs: tuple, shape: Shape,
                 mesh_state: MeshState | None = None, spawned: list | None = None,
                 origin: Shape | None = None, hosts: tuple | None = None, key: str | None = None,
                 plain: dict | None = None) -> None:
        self._origin = origin or shape  # the shape it was spawned with: actors' own ranks
        self._hosts = hosts or (0,) * len(procs)  # host id per process
        self._name = name
        self._key = key or name  # this spawn's own name in its processes (proc_host.py)
        self._class_name = class_name
        self._endpoints = endpoints  # name -> (CallChecker, is_async)
        self._plain = plain or {}  # an Actor's public methods that are no endpoints: name -> (CallChecker, is_async)
        self._procs = procs
        self._shape = shape
        self._state = mesh_state
        self._spawned = spawned  # refs of the constructor calls, one per process as spawned
        if "endpoint" in endpoints:  # (an endpoint of that name works, as in Monarch, which has no mesh.endpoint())
            self.endpoint = Endpoint(self, "endpoint", *endpoints["endpoint"])

    # -- shape ----------------------------------------------------------------------------

    def slice(self, **dims) -> ActorMesh:
        """A view of some of the actors (int drops the dimension, a slice keeps it)."""
        return self._reshaped(self._shape.slice(**dims))

    def _reshaped(self, shape: Shape) -> ActorMesh:
        mesh = ActorMesh(self._name, self._class_name, self._endpoints, self._procs, shape, self._state,
                         self._spawned, self._origin, self._hosts, self._key, self._plain)
        mesh._owned = self._owned and len(shape) == len(self._origin)  # (renamed or flattened whole: as owned)
        return mesh

    def _points(self) -> list[Point]:
        """Each addressed actor's own Point in the mesh as spawned (for errors)."""
        points = self.__dict__.get("_point_cache")
        if points is None:
            where = self._origin_index()
            extent = self._origin.extent
            points = self._point_cache = [Point(where[r], extent) for r in self._shape.ranks()]
        return points

    def _dense(self) -> Shape:
        """The replies' layout: this mesh's dims, densely numbered (made once)."""
        dense = self.__dict__.get("_dense_cache")
        if dense is None:
            extent = self._shape.extent
            dense = self._dense_cache = Shape.dense(extent.labels, extent.sizes)
        return dense

    def _origin_index(self) -> dict[int, int]:
        """Process rank -> the actor's index in the mesh as spawned (computed once)."""
        where = self.__dict__.get("_origin_cache")
        if where is None:
            where = self._origin_cache = {r: i for i, r in enumerate(self._origin.ranks())}
        return where

    @property
    def initialized(self) -> Future:
        """Resolves once every actor's constructor has run (raises the first failure)."""
        refs = list(self._spawned or ())
        return _gather(self, refs, [Point(i, self._origin.extent) for i in range(len(refs))], None,
                       build=lambda values: None)

    def stop(self, reason: str = "stopped by client", timeout: float | None = 30.0) -> Future:
        """Remove these actors from their processes (``__cleanup__`` runs if defined), each
        once the calls it was given before have run; ``reason`` (Monarch's argument) is in
        the error of every later call from here. Resolves after at most ``timeout`` s (None:
        as long as it takes): an actor still in a call then is named in a warning, and
        its process mesh's stop() ends it."""
        if not isinstance(reason, str):
            raise TypeError(f"stop(reason=...): give the reason as a str; got {reason!r}")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0):
            raise ValueError(f"stop(timeout=...): give the seconds to wait for running calls, or None; got {timeout!r}")
        if not self._owned:
            raise NotImplementedError(
                f"stop() of actor mesh {self._name!r}: this is a slice of it or a copy passed between processes, "
                f"and only the mesh that spawn() returned, in the process that called it, stops the actors (as "
                f"in Monarch); stop them with that one")
        core = state.core()
        _stopped_here[self._key] = reason
        supervision.forget_failure_port(self._key)
        if self._state is not None:
            self._state.actor_meshes.pop(self._key, None)
        # (an actor whose process died is stopped already)
        ranks = [r for r in self._shape.ranks() if not core.known_dead(self._procs[r]._actor_id)]
        points = [p for r, p in zip(self._shape.ranks(), self._points(), strict=True) if r in ranks]
        refs = [core.call_actor(self._procs[r], lanes.named("stop_actor", self._key), (self._key,), {}, 1,
                                inline=self._hosts[r] != core.host_id)
                for r in ranks]
        direct = getattr(core, "direct_lanes", None)
        if direct is not None:  # (its lanes end: frames written before are still read, then EOF)
            for r in self._shape.ranks():
                client = core.actor_clients.get(self._procs[r]._actor_id)
                if client is not None and client.worker_id is not None:
                    direct.drop(client.worker_id, self._key)
        stopped = _gather(self, refs, points, None, build=lambda values: None)
        return stopped if timeout is None else _bounded_stop(self._name, stopped, refs, points, timeout)

    # -- endpoints ------------------------------------------------------------------------

    def __getattr__(self, name: str) -> Endpoint | NotAnEndpoint:
        if self.__dict__.get("_endpoints") is None or name.startswith("__"):
            raise AttributeError(name)
        if name not in self._endpoints and name in self._plain:
            return NotAnEndpoint(self, name)
        return ActorMesh.endpoint(self, name)

    def endpoint(self, name: str) -> Endpoint:
        """The endpoint ``name``; also one the mesh's own methods hide (``stop``, ``slice``...)."""
        endpoints = self._endpoints
        found = endpoints.get(name)
        if found is None:
            hint = difflib.get_close_matches(name, list(endpoints), n=1)
            extra = f"; did you mean {hint[0]!r}?" if hint else f"; its endpoints are {sorted(endpoints)}"
            if name in self._plain:
                extra = f": it is a method without @endpoint; mark it, or call it as as_endpoint(mesh.{name})"
            raise AttributeError(f"actor mesh {self._name!r} ({self._class_name}) has no endpoint {name!r}{extra}")
        return Endpoint(self, name, *found)

    def __reduce__(self):
        # The constructor refs travel along: a process that got the mesh from someone
        # else waits on them before its first call (see Endpoint._send).
        return (ActorMesh, (self._name, self._class_name, self._endpoints, self._procs, self._shape, None,
                            self._spawned, self._origin, self._hosts, self._key, self._plain))

    def __repr__(self) -> str:
        return f"<ActorMesh {self._name!r} of {self._class_name} {self.extent}>"


class NotAnEndpoint:
    """``mesh.method`` for a public method of the actor's class without ``@endpoint``:
    ``as_endpoint(mesh.method)`` makes it one (as in Monarch); calling it says so."""

    __slots__ = ("_mesh", "_name")

    def __init__(self, mesh: ActorMesh, name: str) -> None:
        self._mesh = mesh
        self._name = name

    def __getattr__(self, adverb: str):
        raise AttributeError(f"{self._mesh._class_name}.{self._name} of actor mesh {self._mesh._name!r} is not "
                             f"an @endpoint, so it has no {adverb!r}; mark it @endpoint, or call it through "
                             f"as_endpoint(mesh.{self._name}).{adverb}(...)")

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{self._mesh._class_name}.{self._name} of actor mesh {self._mesh._name!r} runs in the "
                        f"actors' processes: call it through as_endpoint(mesh.{self._name}).call(...) (or mark it "
                        f"@endpoint)")

    def __repr__(self) -> str:
        return f"<method {self._mesh._name}.{self._name} (not an endpoint)>"


class Endpoint:
    """``mesh.method``: choose how to send it."""

    __slots__ = ("_mesh", "_name", "_checker", "_target", "_options")

    def __init__(self, mesh: ActorMesh, name: str, checker: CallChecker, is_async: bool,
                 options: dict | None = None) -> None:
        self._mesh = mesh
        self._name = name
        self._checker = checker
        self._options = options  # as_endpoint's options for a method without @endpoint (its mark has them)
        # A plain endpoint runs on its actor's own helper thread in each process (lanes.py).
        self._target = "call" if is_async else lanes.named("call_sync", mesh._key)

    def _check(self, args: tuple, kwargs: dict) -> None:
        mesh = self._mesh
        if mesh._state is not None and mesh._state.stopping:
            reason = f" ({mesh._state.stop_reason})" if mesh._state.stop_reason else ""
            raise exc.MeshActorDiedError(class_name=f"actor mesh {mesh._name!r}",
                                         cause=f"its processes were stopped with stop(){reason}; spawn a new mesh")
        if mesh._key in _stopped_here:
            raise exc.MeshActorDiedError(class_name=f"actor mesh {mesh._name!r}",
                                         cause=f"it was stopped with stop() ({_stopped_here[mesh._key]}); spawn it "
                                               f"again to call it")
        self._checker.check(args, kwargs)

    def _send(self, ranks: list[int], args: tuple, kwargs: dict, reply_to=None, unanswered: bool = False) -> list:
        """One call per target process; arguments serialized once. ``reply_to``: a Port
        each actor sends its result to (``send(..., port=)``); the calls resolve to None.
        ``unanswered``: nobody awaits them (``broadcast``): an actor they raise in fails."""
        mesh = self._mesh
        options = {**(self._options or {}), UNANSWERED: True} if unanswered else self._options
        core = state.core()
        extent = mesh._shape.extent
        labels, sizes = extent.labels, extent.sizes
        args = tuple(big_bytes_out_of_band(a) for a in args)  # large bytes: one copy, out of band
        here = core.host_id
        remote = [mesh._hosts[r] != here for r in ranks]
        # Large arguments: stored once, each call refers to them (small ones are cheaper
        # pickled into each message). Many targets on this host map the one copy; from
        # the driver, each other host's agent pulls it once through the tensor engine
        # (lending.py) instead of receiving the bytes inside every message.
        big = _nbytes(args, kwargs) >= SHM_THRESHOLD
        shared = big and ((len(ranks) > 1 and not any(remote)) or (any(remote) and core.is_driver))
        if shared:
            try:
                packed = core.put((args, kwargs))
            except TypeError:
                name_bad_argument(args, kwargs, f"{mesh._name}.{self._name}(...)", "the actor")
                raise
        elif big:  # (nested in the call's arguments, a large bytes still goes out of band)
            packed = (tuple(map(big_bytes_out_of_band, args)),
                      {key: big_bytes_out_of_band(value) for key, value in kwargs.items()})
        else:
            packed = (args, kwargs)
        procs = mesh._procs
        local = mesh._shape.ranks() if len(ranks) != len(mesh._shape) else None
        # Calls from the spawning process queue behind its constructor calls (same
        # sender, FIFO); anyone else's call waits until the constructor has run, by
        # depending on its result.
        spawned = mesh._spawned if mesh._state is None else None
        where = mesh._origin_index() if spawned else None
        batch = len(ranks) > 1 and any(remote)  # one frame per agent
        # A call without arguments sends the same bytes to a rank every time: pickled once.
        reuse = (mesh.__dict__.setdefault("_no_args", {})
                 if not args and not kwargs and not spawned and options is None and reply_to is None else None)
        extra = (options, reply_to) if options is not None or reply_to is not None else ()
        calls = []
        for i, rank in enumerate(ranks):
            message_rank = i if local is None else local.index(rank)
            ready = spawned[where[rank]] if spawned else None
            # To another host a stored value goes as [ref], fetched on arrival: a bare
            # (top-level) ref would be resolved here and its bytes sent in the message.
            sent = [packed] if shared and remote[i] else packed
            call_args = (mesh._key, self._name, message_rank, labels, sizes, sent, ready, *extra)
            pickled = None
            if reuse is not None:
                key = (self._target, self._name, message_rank, labels, sizes, remote[i])
                pickled = reuse.get(key)
                if pickled is None:
                    pickled = reuse[key] = core.pack_args(call_args, {}, self._name, remote[i])[0]
            calls.append((call_args, remote[i], pickled))
        refs = []
        try:
            if batch:  # (one frame per agent, written from this thread: fanout_calls.py)
                return core.call_actors([procs[rank] for rank in ranks], self._target, calls)
            for rank, (call_args, inline, pickled) in zip(ranks, calls, strict=True):
                refs.append(core.call_actor(procs[rank], self._target, call_args, {}, 1, inline=inline,
                                            packed=pickled))
        except TypeError:
            if not refs:  # (every rank packs the same arguments: the first fails, before any send)
                name_bad_argument(args, kwargs, f"{mesh._name}.{self._name}(...)", "the actor")
            raise
        return refs

    def call(self, *args, **kwargs) -> Future:
        """Every actor; resolves to a ValueMesh of replies."""
        self._check(args, kwargs)
        mesh = self._mesh
        refs = self._send(mesh._shape.ranks(), args, kwargs)
        dense = mesh._dense()
        return _gather(mesh, refs, mesh._points(), self._name, build=lambda values: ValueMesh(dense, values))

    def call_one(self, *args, **kwargs) -> Future:
        """The mesh must hold exactly one actor; resolves to its reply."""
        mesh = self._mesh
        if len(mesh) != 1:
            raise ValueError(f"call_one() needs a mesh of exactly one actor, but {mesh._name!r} has "
                             f"{len(mesh)} {mesh.extent}; slice it first, e.g. mesh.slice(...)")
        self._check(args, kwargs)
        ref = self._send(mesh._shape.ranks(), args, kwargs)[0]
        return _one(mesh, ref, mesh._points()[0], self._name)

    def choose(self, *args, **kwargs) -> Future:
        """One actor: of those not known dead, the one this process has the fewest calls
        outstanding with (ties at random); resolves to its reply."""
        self._check(args, kwargs)
        mesh = self._mesh
        rank = self._least_loaded()
        ref = self._send([rank], args, kwargs)[0]
        return _one(mesh, ref, mesh._points()[mesh._shape.ranks().index(rank)], self._name)

    def _least_loaded(self) -> int:
        mesh = self._mesh
        ranks = mesh._shape.ranks()
        core = state.core()
        # (all dead: one of them is called anyway, and the call says how it died)
        live = [r for r in ranks if not core.known_dead(mesh._procs[r]._actor_id)] or ranks
        best, best_n = [], None
        for r in live:
            n = core.outstanding_calls(mesh._procs[r]._actor_id)
            if best_n is None or n < best_n:
                best, best_n = [r], n
            elif n == best_n:
                best.append(r)
        return random.choice(best)

    def broadcast(self, *args, **kwargs) -> None:
        """Every actor, no replies; a failure goes to the mesh's supervisor."""
        self._post(args, kwargs, None, "all")

    def _post(self, args: tuple, kwargs: dict, port, selection: str) -> None:
        """Every actor (``selection="all"``) or one (``"choose"``), with no reply to the
        caller: each result goes to ``port`` when given (its ``recv()`` raises what an
        actor raised or how it died); otherwise a failure goes to the mesh's supervisor.
        (``meshrt.send`` and ``broadcast``.)"""
        self._check(args, kwargs)
        mesh = self._mesh
        ranks = mesh._shape.ranks()
        points = mesh._points()
        if selection != "all":
            rank = self._least_loaded()
            ranks, points = [rank], [points[ranks.index(rank)]]
        refs = self._send(ranks, args, kwargs, port, unanswered=port is None)
        core = state.core()
        owner = _owner(mesh) if port is None else None
        for ref, point, rank in zip(refs, points, ranks, strict=True):
            core.concurrent_future(ref).add_done_callback(
                lambda f, point=point, proc=mesh._procs[rank]: _unanswered_done(mesh, point, proc, owner, port,
                                                                                self._name, f))

    def stream(self, *args, **kwargs):
        """Every actor; yields one Future per reply, in the order replies arrive."""
        self._check(args, kwargs)
        mesh = self._mesh
        refs = self._send(mesh._shape.ranks(), args, kwargs)
        arrivals = _Arrivals(len(refs))
        core = state.core()
        for ref, point in zip(refs, mesh._points(), strict=True):
            core.concurrent_future(ref, owned=True).add_done_callback(  # (the client's own values, as in Monarch)
                lambda f, point=point: arrivals.arrived(f, _relabel(mesh, point, self._name)))
        return (arrivals.future(k) for k in range(len(refs)))

    def __repr__(self) -> str:
        return f"<endpoint {self._mesh._name}.{self._name}>"


def _nbytes(args: tuple, kwargs: dict) -> int:
    """Roughly how big the top-level arguments are (arrays, tensors, bytes)."""
    total = 0
    for value in (*args, *kwargs.values()):
        try:
            size = getattr(value, "nbytes", None)
        except RuntimeError:  # (a sparse torch tensor has no nbytes: it raises)
            size = None
        if size is None and isinstance(value, (bytes, bytearray, memoryview)):
            size = len(value)
        elif size is None and hasattr(value, "element_size"):  # a torch tensor
            size = value.element_size() * value.numel()
        total += size if isinstance(size, int) else 0
    return total


# -- futures over replies ------------------------------------------------------------------

def _one(mesh: ActorMesh, ref, point: Point, endpoint: str | None) -> Future:
    async def aget():
        try:
            return await ref
        except exc.RayActorError as err:
            raise _relabel(mesh, point, endpoint)(err) from None

    def get(timeout):
        try:
            return state.core().get([ref], timeout)[0]
        except exc.RayActorError as err:
            raise _relabel(mesh, point, endpoint)(err) from None
        except exc.GetTimeoutError:
            raise _timed_out(mesh, endpoint, f"the reply from {point}", timeout) from None

    return Future(aget, get)


def _gather(mesh: ActorMesh, refs: list, points: list, endpoint: str | None, build=None) -> Future:
    """All the replies, in mesh order; the first failure is raised as soon as it arrives
    (as asyncio.gather does), not after the slowest reply."""
    build = build or list

    def raise_first_failure(core) -> None:
        entries = core.table.entries
        for ref, point in zip(refs, points, strict=True):
            entry = entries.get(ref._id)
            if entry is not None and failed(entry):
                try:
                    core.get([ref], 0)
                except exc.RayActorError as err:
                    raise _relabel(mesh, point, endpoint)(err) from None

    def values_in_order(core) -> list:
        try:
            return core.get(refs, 0)  # all at once; on a failure, find which point failed
        except Exception:  # noqa: BLE001
            pass
        values = []
        for ref, point in zip(refs, points, strict=True):
            try:
                values.append(core.get([ref], 0)[0])
            except exc.RayActorError as err:
                raise _relabel(mesh, point, endpoint)(err) from None
        return values

    async def aget():
        core = state.core()
        await core.wait_all_async(refs, fail_fast=True)  # one wake-up for all the replies
        raise_first_failure(core)
        return build(values_in_order(core))

    def get(timeout):
        core = state.core()
        try:
            core.wait_all_or_failure(refs, timeout)  # one wake-up for all the replies
        except exc.GetTimeoutError:
            entries = core.table.entries
            late = sum(1 for r in refs if (e := entries.get(r._id)) is not None and e.payload is None)
            raise _timed_out(mesh, endpoint, f"{late} of {len(refs)} replies", timeout) from None
        raise_first_failure(core)
        return build(values_in_order(core))

    return Future(aget, get)


def _bounded_stop(name: str, stopped: Future, refs: list, points: list, timeout: float) -> Future:
    """``stopped``, given up on ``timeout`` s after stop(): an actor stuck in a call (a
    sync one cannot be interrupted) must not leave stop() waiting for ever."""
    deadline = time.monotonic() + timeout

    def give_up() -> None:
        entries = state.core().table.entries
        busy = [str(p) for r, p in zip(refs, points, strict=True) if (e := entries.get(r._id)) is None or e.payload is None]
        if busy:
            log.warning("meshrt: stop() of actor mesh %r: the actor(s) at %s have not stopped %s s after stop() (a "
                        "call or their __cleanup__ still runs); no longer waiting for them (their process mesh's "
                        "stop() ends them)", name, ", ".join(busy), timeout)

    async def aget():
        try:
            return await asyncio.wait_for(stopped._aget(), max(deadline - time.monotonic(), 0))
        except asyncio.TimeoutError:
            give_up()

    def get(wait_s):
        left = max(deadline - time.monotonic(), 0)
        try:
            return stopped._get(left if wait_s is None else min(wait_s, left))
        except exc.GetTimeoutError:
            if wait_s is not None and wait_s < left:
                raise
            give_up()

    return Future(aget, get)


def _timed_out(mesh: ActorMesh, endpoint: str | None, what: str, timeout) -> exc.GetTimeoutError:
    where = f"{mesh._name}.{endpoint}()" if endpoint else f"actor mesh {mesh._name!r}"
    return exc.GetTimeoutError(f"{where}: {what} not here after {timeout} s; give get() "
                               f"a larger timeout= (or None to wait as long as it takes)")


def _relabel(mesh: ActorMesh, point: Point, endpoint: str | None):
    """ActorDiedError from a mesh process, reworded to name the mesh and the point (a
    MeshActorDiedError)."""

    def convert(err: BaseException) -> BaseException:
        if isinstance(err, exc.TaskError) or not isinstance(err, exc.RayActorError):
            return err  # an endpoint raised: already named by the process that ran it
        what = f"{mesh._class_name} of actor mesh {mesh._name!r} at {point}"
        if endpoint:
            what += f" (calling {endpoint})"
        # (a dead one: also Monarch's SupervisionError)
        cls = exc.MeshActorDiedError if type(err) is exc.ActorDiedError else type(err)
        return cls(err.actor_id, what, err.cause, err.stderr_tail, err.creation_error)

    return convert


class _Arrivals:
    """The k-th future gets the k-th reply to arrive (filled from the core loop)."""

    def __init__(self, n: int) -> None:
        import concurrent.futures

        self.slots = [concurrent.futures.Future() for _ in range(n)]
        self.next = 0
        self.lock = threading.Lock()

    def arrived(self, done, convert) -> None:
        with self.lock:
            slot = self.slots[self.next]
            self.next += 1
        err = done.exception()
        if err is not None:
            slot.set_exception(convert(err))
        else:
            slot.set_result(done.result())

    def future(self, k: int) -> Future:
        from .future import from_concurrent

        return from_concurrent(self.slots[k])


def _owner(mesh: ActorMesh):
    from .actor import current_owner

    if mesh._state is not None and mesh._state.owner is not None:
        return mesh._state.owner
    return current_owner()


def _watcher_reports(mesh: ActorMesh, err: BaseException) -> bool:
    """Whether the spawner of the mesh's processes reports this death (supervision._proc_died):
    always from another process; here, unless its callers handle deaths or it never started."""
    st = mesh._state
    return st is None or not (st.callers_handle_deaths or getattr(err, "creation_error", None) is not None)


def _unanswered_done(mesh: ActorMesh, point: Point, proc, owner, port, endpoint: str, done) -> None:
    """A call nobody awaits has ended (``post``): its failure goes to the port, if
    any, or else to the mesh's supervisor."""
    err = done.exception()
    if err is None:
        return
    if isinstance(err, (exc.RayActorError, exc.RuntimeNotInitializedError)) and not isinstance(err, exc.TaskError):
        if (mesh._state is not None and mesh._state.stopping) or STOPPED in str(err):
            return  # (stopped on purpose: from here, or by the process that spawned it and passed it here)
        core = state.core_or_none()
        if getattr(core, "closing", True):
            return  # (meshrt.shutdown() ended it: not a failure to report)
        if port is None and str(getattr(err, "cause", "")).startswith(ENDED_ITSELF):
            return  # (the actor ended before this call: that end was reported, once)
        if port is None and core.known_dead(proc._actor_id) and _watcher_reports(mesh, err):
            return  # (its process died: its spawner's supervision.watch reports that, once)
    err = _relabel(mesh, point, endpoint)(err)
    if port is not None:
        port.exception(err)
        return
    cause = str(err).split("\n", 1)[0] if isinstance(err, exc.TaskError) else str(err)
    supervision.report(supervision.MeshFailure(mesh._name, point, cause, f"{mesh._name}.{endpoint}", err), owner)

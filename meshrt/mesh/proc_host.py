"""ProcHost: the actor that is one process of a ProcMesh.

Each process of a mesh is an ordinary meshrt actor running ProcHost, so meshes get
the runtime's direct calls, per-caller FIFO order, death detection and object store
for free. ProcHost holds the mesh actors spawned on the process (several meshes may
share one process, as in Monarch) and runs their endpoints: an Actor's ``async def``
endpoints on the process's loop, one at a time in arrival order (``_take_turn``); each
actor's plain ``def`` endpoints to completion on a helper thread of its own (lanes.py),
one at a time, in arrival order; an ``async def`` call starts after the plain calls to
its actor that arrived before it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import dataclasses
import inspect
import logging
import os
import threading
import traceback
import weakref
from typing import Any

from .. import exceptions as exc
from .._private import context as rt_context
from .._private import debug_sessions, workspace_files
from ..objstore import serialization
from ..objstore.serialization import loads_code
from . import distributed
from .actor import (
    ENDPOINT_MARK,
    Actor,
    ActorInstance,
    Context,
    OwnerCell,
    reset_context,
    set_context,
)
from .channel import Port
from .response_port import ResponsePort
from .shape import Extent, Point

# How a process ended by stop() says it ended (its death is no failure to supervise,
# whoever called stop()).
STOPPED = "its processes were stopped with stop()"
# The option a call nobody awaits carries (broadcast, send without a port): an endpoint
# that raises in it fails its actor, as in Monarch (its caller reports the failure).
UNANSWERED = "unanswered"
# How an actor that ended itself says so in its later calls' errors (reported once, as it ended).
ENDED_ITSELF = ("it stopped itself", "it aborted", "it was killed", "it failed")


class _Hosted:
    __slots__ = ("instance", "info", "error", "owner", "error_tb", "turn", "holder", "failures", "ending",
                 "failed", "reported", "running_sync", "running_async", "span_names")

    def __init__(self, instance, info: ActorInstance, error: BaseException | None, owner: OwnerCell,
                 error_tb: str = "", failures: Port | None = None) -> None:
        self.instance = instance
        self.info = info
        self.error = error
        self.owner = owner
        self.error_tb = error_tb  # the constructor's traceback, for every later call's error
        self.span_names: dict[str, str] = {}  # endpoint -> "mesh.endpoint", its calls' name in meshrt.timeline()
        # An Actor's async endpoints take turns, as in Monarch (a Ray-style class's interleave, as in Ray)
        self.turn = asyncio.Lock() if isinstance(instance, Actor) else None
        self.holder: int | None = None  # the call whose turn it is
        self.failures = failures  # the spawner's port for this actor's abort() (supervision.failure_port)
        self.ending: str | None = None  # how it ended itself (actor_instance.stop/abort/kill): later calls fail
        self.failed = False  # ended by abort()/kill() or an unanswered call that raised, not stop()
        self.reported = False  # its failure is reported by the caller (an unanswered call raised)
        # Its calls running now, on its lane's thread and on the loop (each written by that thread
        # only): an actor that ended itself finishes once both are 0 (_finish_end).
        self.running_sync = 0
        self.running_async = 0


class ProcHost:
    # Methods that wait for every actor's thread here (a plain endpoint blocking on one
    # of them would wait for itself: refused, see executor.runs_after_me).
    __meshrt_waits_for_lanes__ = frozenset({"stop"})

    def __init__(self, mesh_name: str, labels: tuple, sizes: tuple, rank: int, env: dict,
                 executor=None, bootstrap: bytes | None = None) -> None:
        """``executor``: given for the driver's own process (driver_actors.py), which is
        not a worker. ``bootstrap``: spawn_procs(bootstrap=fn), run first (``_bootstrap``)."""
        from .._private import cpu_threads

        cpu_threads.undo()  # (a mesh process keeps its threads, as Monarch's do)
        if executor is None:  # (its values are its own, as in Monarch: arrays writable; in the
            serialization.own_values_here()  # driver, only its mesh actors' arguments)
        else:
            executor.deserialize_args = serialization.deserialize_owned
        os.environ.update(env)
        self.mesh_name = mesh_name
        self.point = Point(rank, Extent(labels, sizes))
        if bootstrap is not None:  # (as Monarch's: current_rank() is the process's point, in actor "setup")
            tokens = set_context(Context(ActorInstance("setup", self.point, rank, f"setup[{rank}]"), self.point), None)
            try:
                _bootstrap(bootstrap)
            finally:
                reset_context(tokens)
        # Keyed by each spawn's own key ("name#id"), not by name: calls made through a
        # mesh whose spawn failed (a name already taken here) must never reach the actor
        # that holds the name.
        self.actors: dict[str, _Hosted] = {}
        self.constructing: set[str] = set()  # keys of actors whose constructor runs now
        self.classes: dict[bytes, type] = {}
        self._extents: dict[tuple, Extent] = {}
        self._loop = asyncio.get_running_loop()  # constructed on the process's loop
        from .._private import state

        self.in_driver = executor is not None
        self._executor = executor or state.core().executor
        self.ended: dict[str, str] = {}  # key -> how an actor that ended itself ended (for later calls' errors)
        self._early_ends: dict[str, tuple] = {}  # key -> (how, reason): ended in its constructor
        self.stopping: str | None = None  # how stop() ends this process: calls not started by then fail
        self._end_lock = threading.Lock()
        _hosts_here.add(self)

    def spawn(self, name: str, key: str, class_blob: bytes, labels: tuple, sizes: tuple, rank: int,
              args: tuple, kwargs: dict, failures: Port | None = None) -> None:
        """``failures``: where this actor reports that it aborted (its spawner's port)."""
        point = Point(rank, Extent(labels, sizes))
        info = ActorInstance(name, point, self.point.rank, f"{name}[{rank}]", key=key)
        owner = OwnerCell()
        self.constructing.add(key)  # (several meshes may share a name here, as in Monarch: keys differ)
        cls = self.classes.get(class_blob)
        tokens = None
        try:
            if cls is None:
                cls = self.classes[class_blob] = loads_code(class_blob)
            info = dataclasses.replace(info, class_name=f"{cls.__module__}.{cls.__qualname__}")
            tokens = set_context(Context(info, point), owner)
            instance = owner.value = cls(*args, **kwargs)
        except BaseException as err:
            self._early_ends.pop(key, None)
            tb = err.__traceback__.tb_next if err.__traceback__ is not None else None  # (not this frame)
            hosted = self.actors[key] = _Hosted(None, info, err, owner,
                                                "".join(traceback.format_exception(type(err), err, tb)))
            self._executor.lanes.retire(key)
            _label(err, f"{getattr(cls, '__name__', 'the class')}.__init__ of actor mesh {name!r} at {point}")
            if failures is not None:  # (a failure of the mesh, as in Monarch: its owner's __supervise__, else
                failures.send((name, point, f"its constructor raised {err!r}\n{hosted.error_tb}".rstrip()))  # the hook)
            raise
        finally:
            self.constructing.discard(key)
            if tokens is not None:
                reset_context(tokens)
        self.actors[key] = _Hosted(instance, info, None, owner, failures=failures)
        early = self._early_ends.pop(key, None)
        if early is not None:  # (it ended itself in its constructor)
            self.end_actor(key, *early)

    async def call(self, key: str, method: str, message_rank: int, labels: tuple, sizes: tuple,
                   packed: tuple, ready: Any = None, options: dict | None = None, reply_to: Port | None = None) -> Any:
        """An ``async def`` endpoint, on this process's loop: an Actor's run one at a time
        in arrival order, as in Monarch (``_take_turn``). ``options``: as_endpoint's, for a
        method without ``@endpoint``. ``reply_to``: the Port of ``meshrt.send(..., port=)``,
        which gets the result (or the error)."""
        task_id = rt_context.current_call().task_id
        if self._executor.helper_busy(key):
            # Calls to this actor that arrived before this one (its spawn, plain-def
            # endpoints) run on its helper thread: let them finish first, so one
            # caller's calls start in the order it made them; unless the plain call
            # running there is blocked waiting for this very call.
            await self._executor.helper_turn(task_id, key)
        hosted = self._hosted(key)
        _name_span(hosted, method)
        fn = getattr(hosted.instance, method)
        turn = await self._take_turn(hosted, fn, task_id)
        hosted.running_async += 1
        try:
            if hosted.ending is not None:  # (it waited for its turn behind the call that ended the actor)
                raise self._ended_error(hosted.info, hosted.ending)
            if self.stopping is not None:  # (or behind a call that was running when stop() came)
                raise self._stopped_error(hosted, key)
            args, kwargs = (await packed[0]) if type(packed) is list else packed
            tokens = set_context(Context(hosted.info, Point(message_rank, self._extent(labels, sizes))), hosted.owner)
            port = self._response_port(fn, hosted, method, options, reply_to)
            try:
                result = fn(port, *args, **kwargs) if port is not None else fn(*args, **kwargs)
                if inspect.isawaitable(result):
                    result = await result
                return _outcome(result, port, reply_to)
            except BaseException as err:
                if _ends_without(err, port, reply_to, f"{hosted.info.name}.{method} at {hosted.info.rank}"):
                    return port if reply_to is None else None
                self._fail_if_unanswered(key, hosted, method, options, err)
                raise
            finally:
                reset_context(tokens)
        finally:
            hosted.running_async -= 1
            if turn is not None:
                hosted.holder = None
                turn.release()
            if hosted.ending is not None:
                self._finish_end(key, hosted)

    async def _take_turn(self, hosted: _Hosted, fn, task_id: int) -> asyncio.Lock | None:
        """Wait for an Actor's turn to run an ``async def`` endpoint: Monarch runs them one
        at a time, in arrival order, so one may change the actor's state across ``await``
        safely. None when the call takes no turn: a ``@concurrent_endpoint``, any async
        method of a ``@meshrt.remote`` class (they interleave, as in Ray), and a call made
        by the endpoint whose turn it is (it would otherwise wait for its own caller)."""
        turn = hosted.turn
        if turn is None or (getattr(fn, ENDPOINT_MARK, None) or {}).get("concurrent"):
            return None
        holder = hosted.holder
        if holder is not None and task_id in self._executor.core.children.get(holder, ()):
            return None
        await turn.acquire()
        hosted.holder = task_id
        return turn

    def call_sync(self, key: str, method: str, message_rank: int, labels: tuple, sizes: tuple,
                  packed: tuple, ready: Any = None, options: dict | None = None, reply_to: Port | None = None) -> Any:
        """A plain ``def`` endpoint: runs on the process's helper thread, one at a time in
        arrival order, so it may block (``meshrt.get``, collectives) without stalling
        the async endpoints."""
        hosted = self._hosted(key)
        _name_span(hosted, method)
        fn = getattr(hosted.instance, method)
        # [ref]: arguments stored by a caller on another host, fetched here (its agent
        # pulls them once per host); a bare ref would have travelled inside the message.
        args, kwargs = _fetch(packed[0]) if type(packed) is list else packed
        tokens = set_context(Context(hosted.info, Point(message_rank, self._extent(labels, sizes))), hosted.owner)
        port = self._response_port(fn, hosted, method, options, reply_to)
        hosted.running_sync += 1
        try:
            return _outcome(fn(port, *args, **kwargs) if port is not None else fn(*args, **kwargs), port, reply_to)
        except BaseException as err:
            if _ends_without(err, port, reply_to, f"{hosted.info.name}.{method} at {hosted.info.rank}"):
                return port if reply_to is None else None
            self._fail_if_unanswered(key, hosted, method, options, err)
            raise
        finally:
            reset_context(tokens)
            hosted.running_sync -= 1
            if hosted.ending is not None:
                self._finish_end(key, hosted)

    def _response_port(self, fn, hosted: _Hosted, method: str, options: dict | None,
                       reply_to: Port | None) -> ResponsePort | Port | None:
        """For an ``@endpoint(explicit_response_port=True)``: the port it answers through
        (the sender's own, when it gave one)."""
        options = getattr(fn, ENDPOINT_MARK, None) or options
        if not options or not options.get("explicit_response_port"):
            return None
        if reply_to is not None:
            return reply_to
        return ResponsePort(self._loop, f"{hosted.info.name}.{method} at {hosted.info.rank}")

    def describe_call(self, key: str, method: str, *_rest) -> str:
        """``mesh.endpoint at Point(...)``: how errors name a call made with these arguments."""
        hosted = self.actors.get(key)
        if hosted is None:
            return f"{key.partition('#')[0]}.{method}"
        return f"{hosted.info.name}.{method} at {hosted.info.rank}"

    def _extent(self, labels: tuple, sizes: tuple) -> Extent:
        """The called mesh's extent, built once per shape rather than per message."""
        key = (labels, sizes)
        extent = self._extents.get(key)
        if extent is None:
            extent = self._extents[key] = Extent(labels, sizes)
        return extent

    def _hosted(self, key: str) -> _Hosted:
        hosted = self.actors.get(key)
        if self.stopping is not None:
            raise self._stopped_error(hosted, key)
        if hosted is not None and hosted.ending is not None:
            raise self._ended_error(hosted.info, hosted.ending)
        if hosted is None:
            name = key.partition("#")[0]
            if key in self.ended:
                raise _plain(exc.MeshActorDiedError(class_name=f"mesh actor {name!r} on process {self.point}",
                                                    cause=self.ended[key]))
            raise _plain(exc.MeshActorDiedError(class_name=f"mesh actor {name!r}",
                                                cause=f"process {self.point} of mesh {self.mesh_name!r} hosts no "
                                                      f"actor by that name (it was stopped, or never spawned here)"))
        if hosted.error is not None:
            raise _plain(exc.MeshActorDiedError(class_name=f"mesh actor {hosted.info.name!r} at {hosted.info.rank}",
                                                cause=f"its constructor raised {hosted.error!r}\n{hosted.error_tb}".rstrip(),
                                                creation_error=hosted.error))
        return hosted

    def stop_actor(self, key: str) -> None:
        """Drop a mesh actor from this process, running its ``__cleanup__`` first (on the
        actor's own helper thread, which then ends)."""
        self._executor.lanes.retire(key)  # (what was queued there before still runs)
        with self._end_lock:  # (against an actor that ended itself finishing at the same time)
            hosted = self.actors.pop(key, None)
        if hosted is not None:
            self._clean_up(hosted)

    def _clean_up(self, hosted: _Hosted, error: BaseException | None = None) -> None:
        """Run the actor's ``__cleanup__``, if it has one, as Monarch does when an actor
        stops: given the exception it stops with (None: stopped on purpose) when it
        takes one (one written without that parameter is called without it)."""
        stop = getattr(hosted.instance, "__cleanup__", None)
        if stop is None:
            return
        ctx = Context(hosted.info, hosted.info.rank)
        tokens = set_context(ctx, hosted.owner)
        try:
            result = stop(error) if _takes_an_argument(stop) else stop()
        finally:
            reset_context(tokens)
        if inspect.isawaitable(result):  # an async __cleanup__ runs on the loop, as its actor's context
            async def finish():
                inner = set_context(ctx, hosted.owner)
                try:
                    await result
                finally:
                    reset_context(inner)

            asyncio.run_coroutine_threadsafe(finish(), self._loop).result()

    def _fail_if_unanswered(self, key: str, hosted: _Hosted, method: str, options: dict | None,
                            err: BaseException) -> None:
        """An endpoint raised in a call nobody awaits: its actor fails (later calls to it
        raise), as in Monarch; the caller reports the failure to the mesh's supervisor."""
        if options is None or not options.get(UNANSWERED) or not isinstance(err, Exception) or hosted.ending:
            return  # (an actor that ended itself already: that end stands)
        hosted.reported = True
        self.end_actor(key, "fail", f"{hosted.info.name}.{method} raised {err!r} in a call nobody awaited "
                                    f"(broadcast, or send without a port)")

    # -- an actor ending itself: context().actor_instance.stop() / abort() / kill() -------------

    def end_actor(self, key: str, how: str, reason: str | None) -> None:
        """Mark the actor ended: calls that start from now on fail (Monarch fails the ones
        queued behind too); it finishes (``_finish_end``) once its calls running now return."""
        hosted = self.actors.get(key)
        if hosted is None:
            if key in self.constructing:  # (in its constructor: it ends once that returns)
                self._early_ends.setdefault(key, (how, reason))
            return
        if hosted.ending is not None:
            return  # (ended already: the first way stands)
        said = reason if reason is not None else "no reason given"
        hosted.failed = how != "stop"
        hosted.ending = self.ended[key] = {
            "stop": f"{ENDED_ITSELF[0]} (actor_instance.stop()): {said}",
            "abort": f"{ENDED_ITSELF[1]} (actor_instance.abort()): {said}",
            "kill": f"{ENDED_ITSELF[2]} (actor_instance.kill()): {said}",
            "fail": f"{ENDED_ITSELF[3]}: {said}",
        }[how]
        self._finish_end(key, hosted)

    def _finish_end(self, key: str, hosted: _Hosted) -> None:
        """Any thread, once an ended actor may have no call running: drop it, free its
        name, and on its own thread run ``__cleanup__``, report an abort to its spawner and
        stop the process meshes it spawned; that thread then ends."""
        if hosted.running_sync or hosted.running_async:
            return
        with self._end_lock:
            if self.actors.get(key) is not hosted:
                return  # (finished already, or stopped from outside meanwhile)
            del self.actors[key]
        lanes = self._executor.lanes
        lanes.route(key).helper.post(self._after_end, hosted)
        lanes.retire(key)  # (its thread ends after that)

    def _after_end(self, hosted: _Hosted) -> None:
        error = self._ended_error(hosted.info, hosted.ending) if hosted.failed else None
        try:
            self._clean_up(hosted, error)
        except Exception:  # noqa: BLE001 - the end goes on: reported, its meshes stopped
            logging.getLogger("meshrt").exception("meshrt: __cleanup__ of %s raised", hosted.info.actor_id)
        if hosted.failed and not hosted.reported and hosted.failures is not None:
            hosted.failures.send((hosted.info.name, hosted.info.rank, hosted.ending))
        from .meshes import stop_owned_by

        stop_owned_by(hosted.owner, f"the actor that spawned them ended: {hosted.ending}")

    def _ended_error(self, info: ActorInstance, how: str) -> exc.ActorDiedError:
        return _plain(exc.MeshActorDiedError(class_name=f"mesh actor {info.name!r} at {info.rank}", cause=how))

    def _stopped_error(self, hosted: _Hosted | None, key: str) -> exc.ActorDiedError:
        """A call that had not started when stop() came: it fails (as in Monarch) rather
        than holding the stop up."""
        who = f"{hosted.info.name!r} at {hosted.info.rank}" if hosted is not None else repr(key.partition("#")[0])
        return _plain(exc.MeshActorDiedError(class_name=f"mesh actor {who}",
                                             cause=f"{self.stopping}, before this call started"))

    async def init_torch_distributed(self, env: dict, backend: str | None, labels: tuple,
                                     sizes: tuple) -> str:
        os.environ.update(env)
        # init_process_group blocks until every rank joins: off the loop, so the
        # process keeps answering other calls meanwhile.
        return await asyncio.to_thread(distributed.bring_up, backend, labels, sizes)

    def set_log_level(self, level: int) -> None:
        """ProcMesh.logging_option(level=...): this process's root logger level, with a
        handler to stderr if it has none (Python's fallback shows only warnings). The
        driver's own logging stays the user's to set."""
        if self.in_driver:
            return
        root = logging.getLogger()
        root.setLevel(level)
        if not root.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
            root.addHandler(handler)

    def install_workspace(self, items: list) -> list:
        """HostMesh.sync_workspace: write the packages on this host (one process per host)."""
        return workspace_files.install(self._executor.core, items)

    def refresh_workspace(self, items: list, reload: bool) -> list:
        """HostMesh.sync_workspace: import from the synced copies (``items``: relative
        destination, local source, changed file names); with ``reload``, reload the
        modules loaded from a changed file, here or at its source (the driver's host
        imports from the originals). What failed to reload ("module (file): error")."""
        if self.in_driver:  # (the driver's own code is the user's to reload)
            return []
        workspace_files.enter([rel for rel, _src, _names in items])
        if not reload:
            return []
        base = workspace_files.root()
        files = [path for rel, src, names in items for name in names
                 for path in (os.path.join(base, rel, name), os.path.join(src, name))]
        return workspace_files.reload_changed(files)

    def free_port(self) -> int:
        return distributed.free_port("")

    def stop(self, reason: str = "") -> None:
        if self.in_driver:
            raise RuntimeError(
                "stop() of this_proc() in the driver: that process is the driver itself, which "
                "stop() does not end; stop the actor meshes spawned there (mesh.stop()) or call "
                "meshrt.shutdown()")
        from .._private.executor import ActorExit

        self.stopping = f"{STOPPED} ({reason})" if reason else STOPPED
        self._executor.lanes.drain_others()  # (each actor first finishes the calls running now, and the
        self._finish_async_calls()  # ones queued behind fail: its plain endpoints' thread, its async ones here)
        for key in list(self.actors):  # (then each cleans up, as in Monarch)
            hosted = self.actors.pop(key)
            if hosted.error is None:
                try:
                    self._clean_up(hosted)
                except Exception:  # noqa: BLE001 - the others still clean up, and the process still ends
                    logging.getLogger("meshrt").exception("meshrt: __cleanup__ of %s raised", hosted.info.actor_id)
        raise ActorExit(self.stopping)

    def _finish_async_calls(self) -> None:
        """Wait (on stop's thread) for the ``async def`` calls running or queued on the
        process's loop; the driver's stop(timeout=) kills a process stuck in one."""
        executor = self._executor
        me = rt_context.current_call().task_id
        running = [task for task_id, task in list(executor.async_tasks.items()) if task_id != me]
        if running and executor.user_loop is not None:  # (none of them waits on this stop: only the
            # process that spawned these processes stops them, ProcMesh._check_owned)
            asyncio.run_coroutine_threadsafe(asyncio.wait(running), executor.user_loop).result()


_hosts_here: weakref.WeakSet = weakref.WeakSet()  # this process's ProcHosts


def end_actor_here(instance: ActorInstance, how: str, reason: str | None) -> None:
    """``context().actor_instance.stop()`` and its kin: end that actor, which must run in
    this process."""
    for host in list(_hosts_here):
        if instance.key in host.actors or instance.key in host.constructing:
            host.end_actor(instance.key, how, reason)
            return
        if instance.key in host.ended:
            return  # (ended already)
    raise RuntimeError(f"actor_instance.{how}() ends the actor running this code, in its own process; "
                       f"{instance.actor_id} does not run here. From outside, stop a mesh with "
                       f"mesh.stop(reason)")


def _bootstrap(blob: bytes) -> None:
    """A process's ``spawn_procs(bootstrap=fn)``: ``fn()`` before anything else here. An
    ``async def`` one runs on a loop of its own, on a thread of its own: the process's
    loop is busy constructing this ProcHost, and nothing else may run here before it."""
    result = loads_code(blob)()
    if inspect.iscoroutine(result):
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="meshrt-bootstrap") as pool:
            pool.submit(contextvars.copy_context().run, asyncio.run, result).result()


def _takes_an_argument(fn) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # (no signature to read: Monarch's form)
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params)


def _outcome(result: Any, port, reply_to: Port | None) -> Any:
    """What a call returns once its endpoint returned ``result``. With the sender's port
    (``send(..., port=)``): nothing, the result going there (unless the endpoint was given
    that port and answered through it). With a response port: the port, whose reply
    executor.py waits for (the endpoint's own return value is dropped, as in Monarch).
    Otherwise the result."""
    if reply_to is not None:
        if port is None:
            reply_to.send(result)
        return None
    return result if port is None else port


def _ends_without(err: BaseException, port, reply_to: Port | None, where: str) -> bool:
    """An endpoint raised ``err``. True when its call ends without it: the reply was sent
    before (``_replied_already``), or the sender's port takes the error (``send(...,
    port=)``). Otherwise ``err`` is named ``where`` for the executor, to be re-raised."""
    if _replied_already(port, err):
        return True
    _label(err, where)
    if reply_to is not None and isinstance(err, Exception):
        reply_to.exception(err)
        return True
    return False


def _replied_already(port: ResponsePort | Port | None, err: BaseException) -> bool:
    """An endpoint that sent its reply and then raised: the reply stands (the first one
    wins, as in Monarch); the error is logged here, in the actor's process."""
    if type(port) is not ResponsePort or not port.settled or not isinstance(err, Exception):
        return False
    logging.getLogger("meshrt").error("meshrt: %r raised after sending its reply (the reply stands)",
                                      port, exc_info=err)
    return True


def _plain(err: BaseException) -> BaseException:
    """Mark an error raised by meshrt itself, not by the user's endpoint: the caller gets
    it as it is, not wrapped in a TaskError with ProcHost's traceback."""
    err.__meshrt_plain__ = True
    return err


def _label(err: BaseException, where: str) -> None:
    """Tell the executor how to name this failure (and to hide ProcHost's own frame)."""
    try:
        err.__meshrt_where__ = where
        if debug_sessions.post_mortem_wanted():  # (the actor and rank, for `meshrt debug`: rpdb.stop_at)
            err.__meshrt_actor__ = debug_sessions.mesh_actor()
    except (AttributeError, TypeError):  # an exception type that refuses attributes
        pass


def _fetch(ref) -> Any:
    from .._private import state

    return state.core().get([ref], None)[0]


def _name_span(hosted: _Hosted, method: str) -> None:
    """The running call shows in meshrt.timeline() as the endpoint it runs (call_record.py)."""
    call = rt_context.current_call()
    if call is not None:
        name = hosted.span_names.get(method)
        if name is None:  # (made once per endpoint, not per call)
            name = hosted.span_names[method] = f"{hosted.info.name}.{method}"
        call.span = name

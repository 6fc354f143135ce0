"""Supervision: failures in a mesh, reported to the mesh's owner.

A caller waiting on a reply gets the error itself. As in Monarch, the death of a mesh
process (whether or not a caller was waiting on it), an endpoint that raised in a call
nobody awaits (``broadcast``) and an actor's ``abort()`` also go to the mesh's owner:
``owner.__supervise__(failure)`` when the mesh was spawned by an actor that defines it
(return True = handled), else the process's ``meshrt.unhandled_fault_hook``. An
unhandled failure ends the owner's process, loudly, so it travels up to whoever
spawned that (Monarch's supervision tree) and never leaves a driver waiting forever.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..exceptions import SupervisionError
from .shape import Point

log = logging.getLogger("meshrt")


@dataclass(frozen=True)
class MeshFailure:
    """What failed: the mesh, the point, and how."""

    mesh_name: str
    point: Point | None
    cause: str
    endpoint: str | None = None
    error: BaseException | None = None

    @property
    def rank(self) -> int | None:
        return None if self.point is None else self.point.rank

    def report(self) -> str:
        where = f"mesh {self.mesh_name!r}" + (f" at {self.point}" if self.point is not None else "")
        if self.endpoint:
            return f"{where}: endpoint {self.endpoint} failed: {self.cause}"
        return f"{where}: {self.cause}"  # (its process died: ..., it aborted: ...)

    def as_error(self) -> SupervisionError:
        return SupervisionError(f"unhandled failure in {self.report()}")

    def __str__(self) -> str:
        return self.report()


def failure_port(owner):
    """(Port, keeper): where the actors of a mesh spawned from here report that they ended
    with a failure (``actor_instance.abort()``), handed to ``owner``'s supervision like a
    crash. One per process mesh this process spawned (kept on its MeshState), else one
    per actor mesh; the port stays open while ``keeper`` is held."""
    from ..exceptions import MeshActorDiedError
    from .channel import open_handler

    def handle(note) -> None:
        name, point, cause = note
        err = MeshActorDiedError(class_name=f"mesh actor {name!r} at {point}", cause=cause)
        report(MeshFailure(name, point, cause, None, err), owner)

    return open_handler(handle)


def failure_port_for(mesh_state, key: str, owner_here) -> Any:
    """The port the actors of a new actor mesh (spawn ``key``) report an abort() to:
    its process mesh's, when that was spawned from here (kept on its MeshState), else
    its own, for ``owner_here()``, kept until the actor mesh is stopped from here."""
    if mesh_state is not None:
        if mesh_state.failures is None:
            mesh_state.failures = failure_port(mesh_state.owner)
        return mesh_state.failures[0]
    port, keeper = failure_port(owner_here())
    _spawn_ports[key] = keeper
    return port


def forget_failure_port(key: str) -> None:
    """The actor mesh was stopped from here: its own failure port closes."""
    _spawn_ports.pop(key, None)


# Spawn key -> the keeper of the failure port of an actor mesh spawned on a process mesh
# that was spawned elsewhere.
_spawn_ports: dict = {}


def watch(core, procs: tuple, mesh_state) -> None:
    """Loop: route each death of a process of a mesh spawned here to supervision."""
    for rank, handle in enumerate(procs):
        client = core.actor_client(handle._actor_id, "ProcHost")
        client.on_death = partial(_proc_died, core, mesh_state, rank)


def _proc_died(core, mesh_state, rank: int, death, observed: bool) -> None:
    """One report per actor mesh spawned from here that had an actor there (as Monarch
    reports each actor that failed), naming it; the process mesh's name when none had."""
    from .._private.host_directory import SHUT_DOWN
    from ..actor import EXIT_ACTOR
    from ..objstore.serialization import error_from_payload
    from .proc_host import STOPPED

    if mesh_state.stopping or core.closing or core.closed:
        return
    err = error_from_payload(death)
    cause = str(getattr(err, "cause", ""))
    if STOPPED in cause or SHUT_DOWN in cause or EXIT_ACTOR in cause:
        return  # on purpose: stopped with stop() by the process that spawned it, its host shut down, or exit_actor()
    if observed and (mesh_state.callers_handle_deaths or getattr(err, "creation_error", None) is not None):
        return  # (it never started, its bootstrap raised: its callers hear it, as in Monarch)
    how = str(err).split(" is dead: ", 1)[-1]  # (how it died, with the last lines of its stderr)
    cause = "its process died: " + ("it " + how[len("its process "):] if how.startswith("its process ") else how)
    hit = [(name, Point(ranks.index(rank), extent))
           for name, ranks, extent in list(mesh_state.actor_meshes.values()) if rank in ranks]
    for name, point in hit or [(mesh_state.name, Point(rank, mesh_state.extent))]:
        report(MeshFailure(name, point, cause, None, err), mesh_state.owner)


def unhandled_fault_hook(failure: MeshFailure) -> None:
    """Default: a failure nobody handled ends the program.

    Replace it with ``meshrt.unhandled_fault_hook = my_hook``; a hook that returns
    normally marks the failure handled, one that raises ends the program: as Monarch
    does, the driver's main thread gets a KeyboardInterrupt (so ``finally`` blocks and
    atexit handlers run: a checkpoint saved there is saved); a process that is not a
    driver, or whose SIGINT Python does not handle, exits with code 1 at once.
    """
    raise failure.as_error()


def report(failure: MeshFailure, owner) -> None:
    """Hand a failure to the owner's ``__supervise__`` or the unhandled-fault hook (any
    thread); ``owner`` is the OwnerCell of the actor that spawned the mesh, or None."""
    instance = getattr(owner, "value", None)
    supervise = getattr(instance, "__supervise__", None) if instance is not None else None
    if supervise is None:
        threading.Thread(target=_unhandled, args=(failure,), name="meshrt-supervision", daemon=True).start()
        return
    loop = _owner_loop(instance)
    if loop is not None:
        loop.call_soon_threadsafe(lambda: loop.create_task(_supervise_async(supervise, failure)))
    else:
        threading.Thread(target=_supervise_sync, args=(supervise, failure), daemon=True).start()


async def _supervise_async(supervise, failure: MeshFailure) -> None:
    try:
        handled = supervise(failure)
        if inspect.isawaitable(handled):
            handled = await handled
    except BaseException as err:  # noqa: BLE001 - a raising supervisor escalates
        _escalate(failure, f"__supervise__ raised {err!r}")
        return
    if not handled:
        _escalate(failure, "__supervise__ did not handle it")


def _supervise_sync(supervise, failure: MeshFailure) -> None:
    try:
        handled = supervise(failure)
    except BaseException as err:  # noqa: BLE001
        _escalate(failure, f"__supervise__ raised {err!r}")
        return
    if not handled:
        _escalate(failure, "__supervise__ did not handle it")


def _unhandled(failure: MeshFailure) -> None:
    import meshrt

    hook = getattr(meshrt, "unhandled_fault_hook", unhandled_fault_hook)
    try:
        hook(failure)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
        _end_program(f"meshrt: unhandled mesh failure ({failure.report()})", code)
    except BaseException as err:  # noqa: BLE001
        _end_program(f"meshrt: unhandled mesh failure: {err}\n", 1)


def _end_program(message: str, code: int) -> None:
    """In a driver whose main thread takes SIGINT as Python does: a KeyboardInterrupt
    there, as Monarch delivers it (the interpreter runs ``finally`` blocks and atexit
    handlers only as its main thread ends). Elsewhere: exit now."""
    from .._private import state

    core = state.core_or_none()
    driver = core is None or core.is_driver or getattr(core, "is_client", False)
    main = threading.main_thread()
    if driver and main.is_alive() and callable(signal.getsignal(signal.SIGINT)):
        if core is not None and core.__dict__.get("_fault_interrupted"):
            _say(f"{message.rstrip()} (the main thread was interrupted already)")  # (once: its finally blocks run)
            return
        if core is not None:
            core.__dict__["_fault_interrupted"] = True
        _say(f"{message.rstrip()}; interrupting the main thread (KeyboardInterrupt)")
        signal.pthread_kill(main.ident, signal.SIGINT)
        return
    _die(f"{message.rstrip()}; exiting with code {code}", code)


def _escalate(failure: MeshFailure, why: str) -> None:
    from .._private import state

    core = state.core_or_none()
    if core is not None and core.is_driver:  # an actor on the driver's this_proc(): up to the driver's hook
        _unhandled(failure)
        return
    _die(f"meshrt: unhandled mesh failure ({why}): {failure.report()}; this actor exits", 1)


def _say(message: str) -> None:
    if log.hasHandlers():  # (with none, logging would print it to stderr a second time)
        log.error(message)
    try:
        print(message, file=sys.stderr, flush=True)
        sys.stdout.flush()
    except Exception:  # noqa: BLE001 - ending anyway
        pass


def _die(message: str, code: int) -> None:
    _say(message)
    from .._private import state

    core = state.core_or_none()
    if core is not None and not core.is_driver and not core.io.in_loop():
        # A worker: send what is already queued (a Port reply from __supervise__...)
        # before going, from the loop that owns the connections.
        core.io.post(core._leave, code)
        threading.Event().wait(10)
    os._exit(code)


def _owner_loop(instance) -> asyncio.AbstractEventLoop | None:
    from .._private import state

    core = state.core_or_none()
    if core is not None and core.is_driver:  # an actor on this_proc() of the driver, or none
        return core.driver_actors.loop_of(instance)
    executor = getattr(core, "executor", None)
    return getattr(executor, "user_loop", None)

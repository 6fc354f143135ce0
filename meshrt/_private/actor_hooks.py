"""The hooks of an actor's class that Ray honours. Its own ``__repr__`` prefixes what it
prints (``own_repr``). As it ends gracefully (its handles all dropped,
``__ray_terminate__``, ``exit_actor()``, ``sys.exit()`` in a method), its
``__ray_shutdown__()`` runs, then the ``atexit`` handlers of its process (meshrt's
workers leave with ``os._exit``, which skips them): ``end_gracefully``. Not on
``kill()`` or a crash, where Ray runs nothing either. The process leaves once they
return, or raise (even ``sys.exit()``), or after ``MESHRT_ACTOR_SHUTDOWN_TIMEOUT_S``
(30 s) if they hang: its resources are not held for ever (Ray's graceful shutdown has
a timeout too)."""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
import traceback
from collections.abc import Callable


def end_gracefully(executor, leave: Callable[[], None]) -> None:
    """Run the hooks, then ``leave()`` (once, whichever comes first: they end or time out).
    Last, the executor lets go of its instance, so that its ``__del__`` runs as in Ray
    (where nothing else holds it: a call still running does)."""
    from ..mesh.proc_host import ProcHost

    instance = executor.instance

    lock, left = threading.Lock(), []

    def leave_once() -> None:
        with lock:
            if left:
                return
            left.append(True)
        leave()

    if isinstance(instance, ProcHost) or instance is None:  # (a mesh's process: its actors' __cleanup__
        leave_once()  # is Monarch's hook, run as they stop)
        return
    timer = threading.Timer(_timeout_s(), leave_once)
    timer.daemon = True
    timer.start()
    try:
        hook = getattr(type(instance), "__ray_shutdown__", None)
        if hook is not None:
            try:
                hook(instance)
            except BaseException:  # noqa: BLE001 - the actor ends anyway (sys.exit() there too); its log says why
                print(f"{type(instance).__name__}.__ray_shutdown__() raised:", file=sys.stderr)
                traceback.print_exc()
        atexit._run_exitfuncs()  # (each handler's error is printed by atexit itself)
        instance = executor.instance = None
        gc.collect()  # (__del__ of an instance in a cycle too; an error there is printed by Python)
    finally:
        timer.cancel()
        leave_once()


def terminate_fn(method: str, spec) -> Callable[[], None]:
    """The call behind ``__ray_terminate__`` (and ``__meshrt_release__``): a graceful end."""
    from .executor import ActorExit

    reason = end_reason(method, spec)

    def terminate():
        raise ActorExit(reason)
    return terminate


def end_reason(method: str, spec) -> str:
    """Why the actor ended, for its callers' ActorDiedError (``__meshrt_release__``: its
    handles were all dropped; a named one's callers learn why the name did not keep it)."""
    if method != "__meshrt_release__":
        return "it was terminated with __ray_terminate__()"
    if spec is None or not spec.name:
        return "all handles to it went out of scope"
    return ("all handles to it went out of scope; its name does not keep it, nor do handles from "
            "get_actor(): keep a handle its creator made, or create it with lifetime=\"detached\"")


def _timeout_s() -> float:
    text = os.environ.get("MESHRT_ACTOR_SHUTDOWN_TIMEOUT_S", "30")
    try:
        return max(float(text), 0.0)
    except ValueError:
        print(f"meshrt: MESHRT_ACTOR_SHUTDOWN_TIMEOUT_S={text!r} is not a number of seconds; using 30",
              file=sys.stderr)
        return 30.0


def own_repr(instance) -> str | None:
    """``repr(instance)`` where its class defines ``__repr__`` (Ray prefixes the actor's
    output with it, to tell the actors of a pool apart), else None."""
    if type(instance).__repr__ is object.__repr__:
        return None
    try:
        text = repr(instance)
    except Exception:  # noqa: BLE001 - (then the class name, as without one)
        return None
    return text[:200] if isinstance(text, str) and text else None

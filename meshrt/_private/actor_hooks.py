"""The hooks of an actor's class that Ray honours. Its own ``__repr__`` prefixes what it
prints (``own_repr``). As it ends gracefully (its handles all dropped,
``__ray_terminate__``, ``exit_actor()``, ``sys.exit()`` in a method), its
``__ray_shutdown__()`` runs, then the ``atexit`` handlers of its process (meshrt's
workers leave with ``os._exit``, which skips them): ``run_exit_hooks``. Not on
``kill()`` or a crash, where Ray runs nothing either."""

from __future__ import annotations

import atexit
import sys
import traceback


def run_exit_hooks(instance) -> None:
    from ..mesh.proc_host import ProcHost

    if isinstance(instance, ProcHost):
        return  # (a mesh's process: its actors' __cleanup__ is Monarch's hook, run as they stop)
    hook = getattr(type(instance), "__ray_shutdown__", None) if instance is not None else None
    if hook is not None:
        try:
            hook(instance)
        except Exception:  # noqa: BLE001 - the actor ends anyway; its log says why the hook failed
            print(f"{type(instance).__name__}.__ray_shutdown__() raised:", file=sys.stderr)
            traceback.print_exc()
    atexit._run_exitfuncs()  # (each handler's error is printed by atexit itself)


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

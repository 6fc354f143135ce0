"""Actor helpers under Ray's module name: ``ray.actor.exit_actor()`` keeps working."""

from __future__ import annotations

from ._private.api import ActorClass, ActorHandle, ActorMethod, method
from ._private.executor import ActorExit

__all__ = ["exit_actor", "method", "ActorHandle", "ActorClass", "ActorMethod", "ActorClassInheritanceException"]


class ActorClassInheritanceException(TypeError):
    """A class statement named an actor class (``@meshrt.remote``'s result) as a base."""

EXIT_ACTOR = "exit_actor() was called"  # (how such an actor ended: on purpose, no failure to supervise)


def exit_actor() -> None:
    """Leave the current actor on purpose: callers of this method see the actor die,
    calls queued behind it fail with ActorDiedError, and it is not restarted."""
    from ._private import context, state

    core = state.core_or_none()
    if core is not None and hasattr(core, "driver_actors") and context.current_call() is not None:
        raise RuntimeError("exit_actor() in an actor on the driver's this_proc(): that process is the driver, "
                           "which does not exit this way; stop the actor's mesh with mesh.stop() instead")
    if core is None or core.is_driver or context.process.get("actor_id") is None:
        raise TypeError("exit_actor() can only be called inside an actor method")
    raise ActorExit(EXIT_ACTOR)

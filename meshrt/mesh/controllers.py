"""``get_or_spawn_controller`` (Monarch's name): one actor per name for the whole job,
spawned by the first process that asks for it; every later ask, from the driver or
from any actor on any host, gets that same actor.

The names are kept by a registry: a detached Ray-style actor on the head host, which
the first caller creates by name with ``get_if_exists`` (the head's actor directory
makes that atomic, so two processes asking at once still make one registry). Each
controller gets a process of its own on the head host, as Monarch's run beside its
client: one that crashes or blocks takes no other controller with it. They live until
the job ends.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .._private.api import remote
from .future import Future
from .meshes import checked_class, this_host

REGISTRY_NAME = "controllers"
REGISTRY_NAMESPACE = "meshrt"  # (apart from the user's own names)


@remote(num_cpus=0, max_restarts=0)
class ControllerRegistry:
    """Name -> its controller's one-actor mesh."""

    def __init__(self) -> None:
        self.meshes: dict[str, Any] = {}
        self.spawning: dict[str, asyncio.Lock] = {}

    async def get_or_spawn(self, name: str, actor_class: Any, args: tuple, kwargs: dict):
        async with self.spawning.setdefault(name, asyncio.Lock()):  # (two first asks: one spawn)
            mesh = self.meshes.get(name)
            if mesh is None:
                procs = this_host().spawn_procs(name=f"controller-{name}")
                mesh = self.meshes[name] = procs.spawn(name, actor_class, *args, **kwargs)
        return mesh

    def __supervise__(self, failure) -> bool:
        """A controller's process died or it failed: the others serve on (this registry
        is their owner: unhandled, it would exit and take them all); the next ask for
        that name spawns it again."""
        self.meshes.pop(failure.mesh_name, None)
        logging.getLogger("meshrt").error("meshrt: controller %r failed: %s", failure.mesh_name, failure.report())
        return True

    async def names(self) -> list:
        return sorted(self.meshes)


def get_or_spawn_controller(name: str, Class: Any, *args: Any, **kwargs: Any) -> Future:  # noqa: N803 - Monarch's name
    """The controller named ``name``: spawned as ``Class(*args, **kwargs)`` in a process
    of its own on the head host if no process asked for it before (later asks get the
    same actor, whatever class and arguments they pass). A Future of an ActorMesh of
    one actor: ``ctl = get_or_spawn_controller("name", Cls).get()``, then
    ``ctl.endpoint.call_one(...)``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"get_or_spawn_controller(name, Class, ...): name must be a non-empty str, got {name!r}")
    checked_class("get_or_spawn_controller", name, Class, args, kwargs)
    registry = ControllerRegistry.options(name=REGISTRY_NAME, namespace=REGISTRY_NAMESPACE, get_if_exists=True,
                                          lifetime="detached").remote()
    ref = registry.get_or_spawn.remote(name, Class, args, kwargs)

    async def aget():
        return await ref

    def get(timeout):
        from .._private import state

        return state.core().get([ref], timeout)[0]

    return Future(aget, get)

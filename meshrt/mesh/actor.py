"""The actor side of meshes: ``Actor``, ``@endpoint`` and who-am-I inside an actor.

``current_rank()``, ``current_size()`` and ``context()`` read a ContextVar that the
process hosting the actor sets around each message, so concurrent async endpoints
of different meshes in one process each see their own values.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
from dataclasses import dataclass, field
from typing import Any

from .shape import Extent, Point

ENDPOINT_MARK = "__meshrt_endpoint__"


class Actor:
    """Base class of mesh actors: subclass it and mark methods with ``@endpoint``.

    Define ``__supervise__(self, failure)`` to handle failures of meshes this actor
    spawned (return True when handled); unhandled ones end this actor and travel up
    to whoever spawned it.
    """

    @functools.cached_property
    def logger(self) -> logging.Logger:
        """As Monarch's ``self.logger``: a logger named after the actor's class, at DEBUG."""
        named = logging.getLogger(type(self).__name__)
        named.setLevel(logging.DEBUG)
        return named


ENDPOINT_OPTIONS = frozenset({"propagate", "explicit_response_port", "instrument"})


def endpoint(fn=None, **options):
    """Mark an Actor method callable through the mesh: ``mesh.method.call(...)``."""
    unknown = set(options) - ENDPOINT_OPTIONS
    if unknown:
        raise TypeError(f"@endpoint got unknown option(s) {sorted(unknown)}")

    def mark(f):
        if isinstance(f, (staticmethod, classmethod)):  # (@endpoint above @staticmethod)
            setattr(f.__func__, ENDPOINT_MARK, dict(options))
            return f
        if not callable(f):
            raise TypeError(f"@endpoint needs a method, got {type(f).__name__}")
        setattr(f, ENDPOINT_MARK, dict(options))
        return f

    return mark(fn) if fn is not None else mark


def concurrent_endpoint(method=None, **options):
    """Monarch's ``@concurrent_endpoint``: an ``async def`` endpoint that does not take
    the actor's turn (an Actor's other async endpoints run one at a time): its calls
    start in arrival order and interleave at ``await`` with everything else on the
    process's loop. Unlike Monarch, an error the body raises goes to its caller (as from
    any endpoint), not to the actor's supervisor."""
    unknown = set(options) - ENDPOINT_OPTIONS
    if unknown:
        raise TypeError(f"@concurrent_endpoint got unknown option(s) {sorted(unknown)}")

    def mark(f):
        inner = f.__func__ if isinstance(f, (staticmethod, classmethod)) else f
        if not (inspect.iscoroutinefunction(inner) or inspect.isasyncgenfunction(inner)):
            raise TypeError(f"@concurrent_endpoint runs an async def endpoint concurrently with others; "
                            f"{getattr(inner, '__qualname__', inner)!r} is not async def: mark it @endpoint")
        marked = endpoint(f, **options)
        getattr(inner, ENDPOINT_MARK)["concurrent"] = True  # (ProcHost._take_turn reads it)
        return marked

    return mark(method) if method is not None else mark


def endpoint_names(cls: type) -> dict[str, bool]:
    """name -> is_async for the callable endpoints of an Actor subclass or a plain class.

    A subclass of Actor exposes its ``@endpoint`` methods; any other class (a
    ``@meshrt.remote`` class) exposes its public methods, as its Ray handle would.
    """
    marked = issubclass(cls, Actor)
    out = {}
    for name, member in inspect.getmembers(cls):
        if not callable(member) or inspect.isclass(member):
            continue
        if marked and not hasattr(member, ENDPOINT_MARK):
            continue
        if not marked and name.startswith("_"):
            continue
        out[name] = inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member)
    return out


def plain_method_names(cls: type, endpoints) -> dict[str, bool]:
    """name -> is_async for the public methods of an Actor subclass that are not among
    its ``endpoints``: ``mesh.method`` names them, and ``as_endpoint(mesh.method)`` calls them."""
    if not issubclass(cls, Actor):
        return {}
    return {name: inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member)
            for name, member in inspect.getmembers(cls)
            if callable(member) and not inspect.isclass(member) and not name.startswith("_") and name not in endpoints}


@dataclass(frozen=True)
class ActorInstance:
    """This actor within its mesh: ``rank`` is its Point in the mesh it was spawned as."""

    name: str
    rank: Point
    proc_rank: int
    actor_id: str
    class_name: str = ""  # module.Class, as Monarch names it
    key: str = field(default="", repr=False, compare=False)  # its spawn's own name in its process

    @property
    def extent(self) -> Extent:
        return self.rank.extent

    def stop(self, reason: str | None = None) -> None:
        """End this actor on purpose, as in Monarch: the call running now still returns,
        ``__cleanup__(None)`` runs once it has, and every later call to this actor fails
        with ActorDiedError naming ``reason``. Its owner sees no failure; the process
        meshes it spawned are stopped too. The other actors of its process go on."""
        self._end("stop", reason)

    def abort(self, reason: str | None = None) -> None:
        """End this actor with a failure, as in Monarch: as ``stop()``, but
        ``__cleanup__`` gets the error, and the failure goes to whoever spawned the actor
        (its ``__supervise__``, or ``meshrt.unhandled_fault_hook`` in the driver)."""
        self._end("abort", reason)

    def kill(self, reason: str | None = None) -> None:
        """End this actor with a failure: the same as ``abort()`` (Monarch's two names)."""
        self._end("kill", reason)

    def _end(self, how: str, reason: str | None) -> None:
        if reason is not None and not isinstance(reason, str):
            raise TypeError(f"actor_instance.{how}(reason=...): give the reason as a str, or None; got {reason!r}")
        if self == _CLIENT:  # (a copy of it too: pickled to another process, say)
            raise RuntimeError(f"actor_instance.{how}() ends the mesh actor running this code; this code runs "
                               f"outside one (the driver, or a thread of its own): stop a mesh with "
                               f"mesh.stop(reason)")
        from .proc_host import end_actor_here

        end_actor_here(self, how, reason)

    @property
    def proc(self):
        """The process this actor runs in, as a one-process ProcMesh (Monarch's name;
        ``this_proc()`` inside the actor)."""
        from .meshes import this_proc

        return this_proc()


@dataclass(frozen=True)
class Context:
    """What ``context()`` returns inside an endpoint: the actor and this message's rank
    within the (possibly sliced) mesh the caller addressed."""

    actor_instance: ActorInstance
    message_rank: Point


_current: contextvars.ContextVar = contextvars.ContextVar("meshrt_mesh_context", default=None)
_instance: contextvars.ContextVar = contextvars.ContextVar("meshrt_mesh_instance", default=None)
_NO_EXTENT = Extent((), ())
# Outside every mesh actor (the driver, a thread the program started), context() still
# has an actor instance, as in Monarch: the client's, rank 0 of an empty extent.
_CLIENT = ActorInstance("client", Point(0, _NO_EXTENT), 0, "client", class_name="client")
_OUTSIDE = Context(_CLIENT, Point(0, _NO_EXTENT))


class OwnerCell:
    """The mesh actor running some code, filled in once its constructor returns (so a
    mesh spawned inside ``__init__`` still finds its owner's ``__supervise__``)."""

    __slots__ = ("value",)

    def __init__(self, value: Any = None) -> None:
        self.value = value


def set_context(ctx: Context, owner: OwnerCell | None) -> tuple:
    return _current.set(ctx), _instance.set(owner)


def reset_context(tokens: tuple) -> None:
    for var, token in zip((_current, _instance), tokens, strict=True):
        try:
            var.reset(token)
        except ValueError:  # set in another context (a thread hand-off): just clear
            var.set(None)


def context() -> Context:
    """The current actor and message; outside any mesh actor, the client's instance (named
    "client") and rank 0 of an empty extent."""
    return _current.get() or _OUTSIDE


def current_rank() -> Point:
    """This message's Point within the mesh the caller addressed (``.rank`` is the flat
    index), as in Monarch: an actor called through ``mesh.slice(gpus=slice(2, 4))``
    is rank 0 or 1 of that slice. In a constructor, the actor's Point in the mesh it
    was spawned as; that stays at ``context().actor_instance.rank``."""
    return context().message_rank


def current_size() -> dict[str, int]:
    """The sizes of the mesh the caller addressed, by dimension name (as in Monarch)."""
    return dict(context().message_rank.extent)


def current_actor_name() -> str:
    """This actor's name in its mesh, with its rank: ``"trainers[3]"``; outside any mesh
    actor, ``"client"`` (as Monarch names the driver's)."""
    return context().actor_instance.actor_id


def current_owner() -> OwnerCell | None:
    """The mesh actor running this code, if any (the owner of meshes it spawns)."""
    return _instance.get()

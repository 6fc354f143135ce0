"""Monarch's free functions over endpoints: ``send`` (a call whose results go to a
Port, or nowhere) and ``as_endpoint`` (a method without ``@endpoint``, called as one)."""

from __future__ import annotations

from typing import Any

from .actor_mesh import Endpoint, NotAnEndpoint
from .channel import Port

SELECTIONS = ("all", "choose")


def send(endpoint: Endpoint, args: tuple, kwargs: dict, port: Port | None = None, selection: str = "all") -> None:
    """Call ``endpoint`` on every actor of its mesh (``selection="all"``) or on one
    (``"choose"``: the least loaded, as ``choose()`` picks) and return at once. Each
    actor sends its result to ``port`` (``Channel.open()``); an actor that raised, or
    died, makes the receiver's ``recv()`` raise. Without a port nothing comes back and a
    failure goes to the mesh's supervisor, as after ``broadcast``."""
    if not isinstance(endpoint, Endpoint):
        hint = " (make it one with as_endpoint(mesh.method))" if isinstance(endpoint, NotAnEndpoint) else ""
        raise TypeError(f"send(endpoint, args, kwargs): the first argument is an actor mesh's endpoint, "
                        f"mesh.method; got {endpoint!r}{hint}")
    if not isinstance(args, tuple):
        raise TypeError(f"send({endpoint!r}, args, kwargs): args is the tuple of positional arguments, "
                        f"e.g. (x,) or (); got {type(args).__name__}")
    if not isinstance(kwargs, dict):
        raise TypeError(f"send({endpoint!r}, args, kwargs): kwargs is the dict of keyword arguments, "
                        f"e.g. {{}}; got {type(kwargs).__name__}")
    if port is not None and not isinstance(port, Port):
        raise TypeError(f"send(..., port=...): give the Port of Channel.open(), or None; got {port!r}")
    if selection not in SELECTIONS:
        raise ValueError(f"send(..., selection={selection!r}): give \"all\" (every actor) or \"choose\" (one)")
    endpoint._post(args, kwargs, port, selection)


def as_endpoint(not_an_endpoint: Any, *, propagate: Any = None, explicit_response_port: bool = False) -> Endpoint:
    """``mesh.method`` of a method without ``@endpoint``, as an Endpoint with the usual
    adverbs: ``as_endpoint(mesh.method).call(...)``. The options are ``@endpoint``'s."""
    if isinstance(not_an_endpoint, Endpoint):
        raise ValueError(f"as_endpoint({not_an_endpoint!r}): it is an @endpoint already; call its adverbs "
                         f"directly (mesh.method.call(...))")
    if not isinstance(not_an_endpoint, NotAnEndpoint):
        raise ValueError(f"as_endpoint() takes a method of a spawned actor mesh, as as_endpoint(mesh.method); "
                         f"got {not_an_endpoint!r}")
    if not isinstance(explicit_response_port, bool):
        raise TypeError(f"as_endpoint(..., explicit_response_port=...): give True or False, got "
                        f"{explicit_response_port!r}")
    mesh, name = not_an_endpoint._mesh, not_an_endpoint._name
    checker, is_async = mesh._plain[name]
    options = {"propagate": propagate, "explicit_response_port": explicit_response_port}
    if explicit_response_port:
        checker = checker.without_first()
    return Endpoint(mesh, name, checker, is_async, options)

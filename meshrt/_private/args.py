"""Arguments at the call site: signature checks and packing into one payload.

Top-level ObjectRef arguments are dependencies: the caller resolves them before the
call goes out and the callee receives their values (Ray's rule). Refs nested inside
lists or dicts travel as refs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ..objstore.serialization import INBAND_LIMIT, Payload, big_bytes_out_of_band, serialize
from .refs import ObjectRef

_HAS_DEFAULT = object()
EMPTY_ARGS, _ = serialize(((), {}))


class CallChecker:
    """Checks ``(args, kwargs)`` against a signature at ``.remote()``, as Ray does.

    Picklable (defaults and annotations are dropped), so actor handles carry one per
    method to every process that receives them.
    """

    __slots__ = ("name", "sig", "call", "simple", "names", "n_required", "index")

    def __init__(self, name: str, sig: inspect.Signature | None, call: str = ".remote()") -> None:
        self.name = name
        self.sig = sig
        self.call = call  # how the call looks to its caller, for the error message
        self.simple = False
        self.names: tuple = ()
        self.n_required = 0
        self.index: dict = {}
        if sig is not None:
            params = list(sig.parameters.values())
            if all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params):
                self.simple = True
                self.names = tuple(p.name for p in params)
                self.index = {n: i for i, n in enumerate(self.names)}
                self.n_required = sum(1 for p in params if p.default is p.empty)
                if any(p.default is p.empty for p in params[self.n_required :]):
                    self.simple = False  # required after optional cannot happen; be safe

    @classmethod
    def for_callable(cls, fn: Callable, name: str, drop_self: bool = False, call: str = ".remote()") -> CallChecker:
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            return cls(name, None, call)
        params = list(sig.parameters.values())
        if drop_self and params and params[0].kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            params = params[1:]
        params = [
            p.replace(annotation=p.empty, default=_HAS_DEFAULT if p.default is not p.empty else p.empty)
            for p in params
        ]
        return cls(name, inspect.Signature(params), call)

    def without_first(self) -> CallChecker:
        """This check for the method called with its first argument given by meshrt (the
        response port of ``as_endpoint(..., explicit_response_port=True)``)."""
        if self.sig is None:
            return self
        return CallChecker(self.name, self.sig.replace(parameters=list(self.sig.parameters.values())[1:]), self.call)

    def __getstate__(self):
        return (self.name, self.sig, self.call)

    def __setstate__(self, state):
        self.__init__(*state)

    def check(self, args: tuple, kwargs: dict) -> None:
        if self.sig is None:
            return
        if self.simple and self._fast_ok(args, kwargs):
            return
        try:
            self.sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}{self.call}: {exc}; it takes {self.parameters()}") from None

    def parameters(self) -> str:
        """The parameters as the caller passes them: ``(x, y=..., *args, **kwargs)``."""
        shown = []
        for p in self.sig.parameters.values():
            if p.kind is p.VAR_POSITIONAL:
                shown.append(f"*{p.name}")
            elif p.kind is p.VAR_KEYWORD:
                shown.append(f"**{p.name}")
            else:
                if p.kind is p.KEYWORD_ONLY and not any(x.startswith("*") for x in shown):
                    shown.append("*")
                shown.append(f"{p.name}=..." if p.default is not p.empty else p.name)
        return f"({', '.join(shown)})"

    def _fast_ok(self, args: tuple, kwargs: dict) -> bool:
        n = len(args)
        if n > len(self.names):
            return False
        if kwargs:
            index = self.index
            for key in kwargs:
                at = index.get(key)
                if at is None or at < n:
                    return False
        if n < self.n_required:
            for i in range(n, self.n_required):
                if self.names[i] not in kwargs:
                    return False
        return True


# Types that are never a ref or a large bytes (checked first: a mesh
# call packs seven such values per actor)
_PLAIN = frozenset({str, int, float, bool, type(None), tuple})


def pack(args: tuple, kwargs: dict, what: str, place=None, lend=None) -> tuple[Payload, list, list]:
    """Serialize a call's arguments; returns (payload, [(position, dep_ref)], pins).

    Each call stores its own copy of a large argument (as Ray does): a value written
    between two calls must reach each call as it was when that call was made, and
    writes through numpy, ``.data`` or ``from_numpy`` leave no trace to check. To
    share one copy, ``put`` it once and pass the ref.

    ``pins`` are every ObjectRef the payload mentions: the caller keeps them alive
    until the call has finished, so the values cannot be freed under the callee.
    Raises TypeError naming the argument that cannot be serialized.
    """
    if not args and not kwargs:
        return EMPTY_ARGS, [], []
    deps: list = []
    big: list = []
    for i, value in enumerate(args):
        t = type(value)
        if t is ObjectRef:
            deps.append((i, value))
        elif t in _PLAIN:
            continue
        elif (t is bytes or t is bytearray) and len(value) >= INBAND_LIMIT:
            big.append(i)
    if kwargs:
        for key, value in kwargs.items():
            t = type(value)
            if t is ObjectRef:
                deps.append((key, value))
            elif (t is bytes or t is bytearray) and len(value) >= INBAND_LIMIT:
                big.append(key)
    if big:  # one copy into the store instead of through the pickle stream
        args, kwargs = list(args), dict(kwargs)
        for pos in big:
            if isinstance(pos, int):
                args[pos] = big_bytes_out_of_band(args[pos])
            else:
                kwargs[pos] = big_bytes_out_of_band(kwargs[pos])
        args = tuple(args)
    if deps:
        args = list(args)
        kwargs = dict(kwargs)
        for pos, _ in deps:
            if isinstance(pos, int):
                args[pos] = None
            else:
                kwargs[pos] = None
        args = tuple(args)
    try:
        payload, pins = serialize((args, kwargs), place, lend)
    except TypeError:
        _name_bad_argument(args, kwargs, what)
        raise
    if deps:
        pins = pins + [ref for _, ref in deps]
    return payload, deps, pins


def _name_bad_argument(args: tuple, kwargs: dict, what: str, made_in: str = "the task") -> None:
    for label, value in [(f"argument {i}", v) for i, v in enumerate(args)] + [
        (f"keyword argument {k!r}", v) for k, v in kwargs.items()
    ]:
        try:
            serialize(value)
        except TypeError as exc:
            raise TypeError(
                f"{what}: {label} of type {type(value).__qualname__} cannot be serialized "
                f"to send to another process ({exc.__cause__ or exc}); pass something picklable, "
                f"or create it inside {made_in} instead (meshrt.util.inspect_serializability(value) "
                f"shows which part of it cannot be pickled)"
            ) from None


def name_bad_argument(args: tuple, kwargs: dict, what: str, made_in: str) -> None:
    """Raise TypeError naming the first argument that cannot be serialized, if any."""
    _name_bad_argument(args, kwargs, what, made_in)


class FetchedThere:
    """A dependency whose value sits in the caller's host store, sent to a callee on
    another host as its ref: the callee fetches it (a pull through the tensor engine)."""

    __slots__ = ("ref",)

    def __init__(self, ref) -> None:
        self.ref = ref

    def __reduce__(self):
        return (FetchedThere, (self.ref,))


async def fetched_async(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """An async actor's arguments with FetchedThere values awaited (not fetched by
    blocking its event loop)."""
    if any(type(v) is FetchedThere for v in args):
        args = tuple([(await v.ref) if type(v) is FetchedThere else v for v in args])
    if any(type(v) is FetchedThere for v in kwargs.values()):
        kwargs = {k: (await v.ref) if type(v) is FetchedThere else v for k, v in kwargs.items()}
    return args, kwargs


def fetched_there(ref) -> Payload:
    """The caller's side: the payload standing for ``ref``'s value (its caller keeps the
    ref pinned until the call is over)."""
    return serialize(FetchedThere(ref))[0]


def unpack(payload: Payload, deps: tuple, deserialize: Callable[[Payload], Any],
           fetch: bool = True) -> tuple[tuple, dict]:
    """The callee's side of :func:`pack`: arguments with dependency values put back.
    ``fetch=False`` leaves FetchedThere in place for ``fetched_async``."""
    args, kwargs = deserialize(payload)
    if deps:
        args = list(args)
        for pos, value_payload in deps:
            value = deserialize(value_payload)
            if fetch and type(value) is FetchedThere:
                from . import state

                value = state.core().get([value.ref], None)[0]
            if isinstance(pos, int):
                args[pos] = value
            else:
                kwargs[pos] = value
    return args, kwargs

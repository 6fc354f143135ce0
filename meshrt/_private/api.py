"""What ``@meshrt.remote`` makes: RemoteFunction, ActorClass, ActorHandle, ActorMethod."""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import pickle
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import exceptions as exc
from ..objstore.serialization import dumps_code
from . import concurrency_groups, id_types, ids, placement, state
from .args import CallChecker
from .options import (
    ActorOptions,
    TaskOptions,
    int_option,
    num_returns_value,
    retry_exceptions_value,
)
from .refs import ObjectRef

_METHOD_OPTIONS = concurrency_groups.METHOD_OPTIONS


def _new_code_id() -> int:
    return secrets.randbits(63)


class RemoteFunction:
    """A function made remote: call ``f.remote(...)`` to run it in a worker."""

    def __init__(self, function: Callable, options: dict, code_id: int | None = None, blob: bytes | None = None):
        if not callable(function):
            raise TypeError(f"@remote needs a function or a class, got {type(function).__name__}")
        self._function = function
        self._options = dict(options)
        self._name = getattr(function, "__name__", "function")
        self._is_generator = inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function)
        if inspect.iscoroutinefunction(function):
            raise TypeError(
                f"@remote on async function {self._name}: tasks are plain functions; "
                "use an actor with async def methods for asyncio code"
            )
        self._opts = TaskOptions.build(self._options, self._name, self._is_generator)
        self._checker = CallChecker.for_callable(function, self._name)
        self.code_id = code_id if code_id is not None else _new_code_id()
        self._blob = blob
        self.__name__ = self._name
        self.__qualname__ = getattr(function, "__qualname__", self._name)
        self.__module__ = getattr(function, "__module__", None)
        self.__doc__ = getattr(function, "__doc__", None)
        self.__wrapped__ = function

    def __call__(self, *args, **kwargs):
        raise TypeError(
            f"remote functions cannot be called directly: instead of {self._name}(...), "
            f"use {self._name}.remote(...) and get() the result"
        )

    def remote(self, *args, **kwargs):
        """Submit a call; returns an ObjectRef (or refs / a generator, by num_returns)."""
        self._checker.check(args, kwargs)
        core = state.core()
        if self._opts.affinity is not None:
            placement.check_task(core, self._opts.affinity, self._opts.resources, f"task {self._opts.name}")
        elif self._opts.labels:
            placement.check_labels(core, self._opts.labels, f"task {self._opts.name}", exc.TaskUnschedulableError,
                                   self._opts.fallback_labels)
        if core.is_driver:
            core.check_feasible(self._opts.resources, f"task {self._opts.name}")
        return core.submit_task(self, args, kwargs, self._opts)

    def bind(self, *args, **kwargs):
        """A node of a lazy call graph (``meshrt.dag``): this call, made when the graph
        is executed."""
        from ..dag.nodes import FunctionNode

        return FunctionNode(self, args, kwargs, self._options)

    def options(self, **options) -> RemoteFunction:
        """A copy with some options changed (``f.options(num_cpus=2).remote()``)."""
        merged = {**self._options, **options}
        return RemoteFunction(self._function, merged, self.code_id, self._blob)

    def code_blob(self) -> bytes:
        if self._blob is None:
            self._blob = dumps_code(self._function)
        return self._blob

    def __reduce__(self):
        # (The checker travels as built here: a function sent by value that calls itself
        # is rebuilt before its defaults are filled in, which a checker built there would miss.)
        return (RemoteFunction, (self._function, _as_checked(self._options, self._opts), self.code_id),
                {"_checker": self._checker})

    def __repr__(self) -> str:
        return f"<meshrt remote function {self.__qualname__}>"


@dataclass
class MethodMeta:
    num_returns: int
    checker: CallChecker
    is_async: bool
    retry_exceptions: Any = False  # (as options.retry_exceptions_value gives it)
    is_generator: bool = False
    max_task_retries: int | None = None  # (@meshrt.method's; None: the actor's)


@dataclass
class ActorMeta:
    """What a handle needs to validate calls: travels with every handle."""

    class_name: str
    methods: dict
    is_async: bool
    max_task_retries: int
    max_pending_calls: int = -1  # (-1: no limit)
    groups: tuple = ()  # the concurrency groups it defines, by name


def _method_meta(cls: type, class_name: str) -> tuple[dict, bool]:
    methods: dict[str, MethodMeta] = {}
    any_async = False
    for name, member in inspect.getmembers(cls):
        if not (inspect.isfunction(member) or inspect.ismethod(member)):
            continue
        if name in ("__init__", "__new__", "__init_subclass__", "__class_getitem__", "__subclasshook__"):
            continue
        static = isinstance(inspect.getattr_static(cls, name, None), staticmethod)
        opts = getattr(member, _METHOD_OPTIONS, {})
        is_async = inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member)
        is_gen = inspect.isgeneratorfunction(member) or inspect.isasyncgenfunction(member)
        any_async = any_async or is_async
        nr = num_returns_value(opts.get("num_returns"), f"{class_name}.{name}", is_gen)
        checker = CallChecker.for_callable(member, f"{class_name}.{name}",
                                           drop_self=not static and not inspect.ismethod(member))
        retry = retry_exceptions_value(opts.get("retry_exceptions"), f"{class_name}.{name}")
        methods[name] = MethodMeta(nr, checker, is_async, retry, is_gen, opts.get("max_task_retries"))
    for builtin in ("__ray_ready__", "__ray_terminate__"):
        methods.setdefault(builtin, MethodMeta(1,  # (a ref: Ray's terminate call has one too)
                                               CallChecker(builtin, inspect.Signature()), False))
    methods.setdefault("__ray_call__", MethodMeta(1, CallChecker("__ray_call__", None), False))
    # (an ``async def __init__`` makes an async actor, as in Ray: it runs on the actor's loop)
    return methods, any_async or inspect.iscoroutinefunction(getattr(cls, "__init__", None))


class ActorClass:
    """A class made remote: ``Cls.remote(...)`` starts an actor and returns its handle."""

    def __init__(self, cls: type, options: dict, code_id: int | None = None, blob: bytes | None = None,
                 meta: tuple | None = None):
        self._cls = cls
        self._options = dict(options)
        self._name = cls.__name__
        if meta is None:
            methods, is_async = _method_meta(cls, self._name)
        else:
            methods, is_async = meta
        self._methods = methods
        self._is_async = is_async
        self._opts = ActorOptions.build(self._options, self._name, is_async)
        self._groups_checked = False
        self._meta = ActorMeta(self._name, methods, is_async, self._opts.max_task_retries,
                               self._opts.max_pending_calls, tuple(name for name, _ in self._opts.concurrency_groups))
        self._meta_blob = pickle.dumps(self._meta, protocol=5)
        init = cls.__dict__.get("__init__") or getattr(cls, "__init__", None)
        if inspect.isfunction(init):
            self._init_checker = CallChecker.for_callable(init, f"{self._name}.__init__", drop_self=True)
        elif init is object.__init__ and cls.__new__ is object.__new__:  # (no constructor: takes nothing)
            self._init_checker = CallChecker(f"{self._name}.__init__", inspect.Signature([]))
        else:
            self._init_checker = CallChecker(self._name, None)
        self.code_id = code_id if code_id is not None else _new_code_id()
        self._blob = blob
        self.__name__ = self._name
        self.__qualname__ = cls.__qualname__
        self.__module__ = cls.__module__
        self.__doc__ = cls.__doc__

    def __call__(self, *args, **kwargs):
        raise TypeError(
            f"actor classes cannot be instantiated directly: instead of {self._name}(...), "
            f"use {self._name}.remote(...)"
        )

    def __getattr__(self, name: str):
        """The class's static and class methods, callable here as in Ray (``Cls.helper(2)``)."""
        cls = self.__dict__.get("_cls")
        if cls is None or name.startswith("__"):
            raise AttributeError(name)
        if isinstance(inspect.getattr_static(cls, name, None), (staticmethod, classmethod)):
            return getattr(cls, name)
        hint = (f": {name}() runs in the actor; call it on a handle, {self._name}.remote().{name}.remote(...)"
                if callable(getattr(cls, name, None)) else "")
        raise AttributeError(f"actor class {self._name} has no attribute {name!r}{hint}")

    def __mro_entries__(self, bases):
        """``class Sub(SomeActor)``: refused with Ray's error, naming what to do instead."""
        from ..actor import ActorClassInheritanceException

        raise ActorClassInheritanceException(
            f"a class cannot inherit from the actor class {self._name}: keep {self._name} a plain class, "
            f"subclass that, and make each class you start as an actor remote (@meshrt.remote, or "
            f"meshrt.remote(Cls))")

    def remote(self, *args, **kwargs) -> ActorHandle:
        """Start the actor; returns its handle at once (calls queue until it is up)."""
        self._init_checker.check(args, kwargs)
        if not self._groups_checked:
            _check_groups(self._cls, self._opts.concurrency_groups, self._name)
            self._groups_checked = True
        core = state.core()
        what = f"actor {self._name}"
        opts = placement.actor_options(core, placement.capture(self._opts, what), what)
        if self._options.get("lifetime") is None and core.config.get("default_actor_lifetime") == "detached":
            opts = dataclasses.replace(opts, detached=True)  # (JobConfig(default_actor_lifetime="detached"))
        if core.is_driver and not opts.host:  # (another host's own resources are checked as it is placed)
            core.check_feasible(opts.resources, what, actor=True)
        return core.create_actor(self, args, kwargs, opts)

    def bind(self, *args, **kwargs):
        """A node of a lazy call graph (``meshrt.dag``): an actor created when the
        graph is executed; ``node.method.bind(...)`` calls it."""
        from ..dag.nodes import ClassNode

        return ClassNode(self, args, kwargs, self._options)

    def options(self, **options) -> ActorClass:
        merged = {**self._options, **options}
        return ActorClass(self._cls, merged, self.code_id, self._blob, (self._methods, self._is_async))

    def code_blob(self) -> bytes:
        if self._blob is None:
            self._blob = dumps_code(self._cls)
        return self._blob

    def __reduce__(self):
        # (Methods and constructor checks travel as found here: a class sent by value that
        # refers to itself is rebuilt before its methods are filled in.)
        return (ActorClass, (self._cls, _as_checked(self._options, self._opts), self.code_id, None,
                             (self._methods, self._is_async)), {"_init_checker": self._init_checker})

    def __repr__(self) -> str:
        return f"<meshrt actor class {self.__qualname__}>"


def _as_checked(options: dict, opts) -> dict:
    """The options to send along: a runtime_env as checked (and packed) here, not checked
    again where it lands (runtime_env.Requested)."""
    if opts.runtime_env is None:
        return options
    return {**options, "runtime_env": opts.runtime_env}


_META_CACHE: dict[int, ActorMeta] = {}


class ActorHandle:
    """A reference to a live actor; picklable, so tasks and other actors can call it too."""

    def __init__(self, actor_id: int, meta: ActorMeta, handle_ref: ObjectRef | None, meta_blob: bytes | None = None):
        self._actor_id = id_types.ActorID(actor_id)
        self._meta = meta
        self._meta_blob = meta_blob
        self._handle_ref = handle_ref
        self._class_name = meta.class_name
        self._max_task_retries = meta.max_task_retries
        self._generation = state.generation  # (the runtime it was made or received in)

    def __getattr__(self, name: str) -> ActorMethod:
        if name.startswith("_") and not name.startswith("__ray_"):
            methods = self.__dict__.get("_meta")
            if methods is None or name not in methods.methods:
                raise AttributeError(name)
        meta = self.__dict__["_meta"].methods.get(name)
        if meta is None:
            known = [n for n in self._meta.methods if not n.startswith("__")]
            hint = difflib.get_close_matches(name, known, n=1)
            extra = f"; did you mean {hint[0]!r}?" if hint else f"; it has {', '.join(sorted(known)) or 'no methods'}"
            raise AttributeError(f"actor {self._class_name} has no method {name!r}{extra}")
        # Not cached on the handle: a method pointing back at its handle would make a
        # cycle, and the actor must end as soon as its last handle is dropped.
        return ActorMethod(self, name, meta.num_returns, meta.checker, meta.retry_exceptions,
                           max_retries=getattr(meta, "max_task_retries", None))

    def __dir__(self):
        """The actor's methods too (tab completion finds them, as on Ray's handles)."""
        return sorted(set(super().__dir__()) | {n for n in self._meta.methods if not n.startswith("_")})

    def __reduce__(self):
        blob = self._meta_blob or pickle.dumps(self._meta, protocol=5)
        return (_rebuild_handle, (int(self._actor_id), blob, self._handle_ref))

    def __hash__(self) -> int:
        return hash(self._actor_id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActorHandle) and other._actor_id == self._actor_id

    def __repr__(self) -> str:
        return f"Actor({self._class_name}, {self._actor_id:x})"

    @property
    def _ray_actor_id(self):
        return self._actor_id


def _check_groups(cls: type, groups: tuple, class_name: str) -> None:
    """Every ``@meshrt.method(concurrency_group=...)`` names a group the actor defines."""
    names = {name for name, _ in groups}
    for attr, member in inspect.getmembers(cls, callable):
        group = concurrency_groups.group_of(member)
        if group is not None and group not in names:
            raise ValueError(f"{class_name}.{attr} is in concurrency group {group!r}, which the actor does not "
                             f"define: pass concurrency_groups={{{group!r}: N, ...}} to @meshrt.remote or .options()")


def _check_current(handle: ActorHandle, core) -> None:
    """A handle this process made in a runtime since shut down names an actor that is
    gone: say so at once (a call to it would wait for an actor that never comes)."""
    if handle._generation != state.generation:
        raise exc.ActorDiedError(ids.to_hex(handle._actor_id), handle._class_name,
                                 "its handle was made before meshrt.shutdown(); actors end with the runtime, "
                                 "so create it again after meshrt.init()")


def _rebuild_handle(actor_id: int, meta_blob: bytes, handle_ref) -> ActorHandle:
    meta = _META_CACHE.get(actor_id)
    if meta is None:
        meta = _META_CACHE[actor_id] = pickle.loads(meta_blob)
    return ActorHandle(actor_id, meta, handle_ref, meta_blob)


class ActorMethod:
    """``handle.method``: call ``.remote(...)`` on it."""

    __slots__ = ("_handle", "_name", "_num_returns", "_checker", "_retry", "_group", "_task_name", "_max_retries")

    def __init__(self, handle: ActorHandle, name: str, num_returns: int, checker: CallChecker,
                 retry_exceptions: Any = False, group: str | None = None, task_name: str | None = None,
                 max_retries: int | None = None):
        self._handle = handle
        self._name = name
        self._num_returns = num_returns
        self._checker = checker
        self._retry = retry_exceptions  # (retried up to the actor's max_task_retries, as in Ray)
        self._group = group  # (.options(concurrency_group=): else the method's own)
        self._task_name = task_name  # (.options(name=): the calls' name in list_tasks and the timeline)
        self._max_retries = max_retries  # (the method's max_task_retries; None: the actor's)

    def remote(self, *args, **kwargs):
        self._checker.check(args, kwargs)
        core = state.core()
        _check_current(self._handle, core)
        limit = self._handle._meta.max_pending_calls
        if limit >= 0 and getattr(core, "calls_out", {}).get(self._handle._actor_id, 0) >= limit:
            raise exc.PendingCallsLimitExceeded(
                f"{self._handle._class_name}.{self._name}.remote(): this process already has {limit} calls to "
                f"the actor unanswered (max_pending_calls={limit}); wait for some (meshrt.get / meshrt.wait) "
                f"before sending more, or raise max_pending_calls")
        if getattr(core, "host_id", 0):  # Ray-style actors run on the head host: from
            # another host, large arguments are lent to it, not put in this host's store
            return core.call_actor(self._handle, self._name, args, kwargs, self._num_returns, inline=True,
                                   retry_exceptions=self._retry, concurrency_group=self._group,
                                   name=self._task_name, max_retries=self._max_retries)
        return core.call_actor(self._handle, self._name, args, kwargs, self._num_returns,
                               retry_exceptions=self._retry, concurrency_group=self._group, name=self._task_name,
                               max_retries=self._max_retries)

    def bind(self, *args, **kwargs):
        """A node of a lazy call graph (``meshrt.dag``): this method call, made when
        the graph is executed (or compiled: ``experimental_compile()``)."""
        from ..dag.nodes import ClassMethodNode, check_bind

        check_bind(self._checker, args, kwargs)
        options = {} if self._num_returns == self._handle._meta.methods[self._name].num_returns else {
            "num_returns": self._num_returns}
        return ClassMethodNode(self._handle, self._name, args, kwargs, options, method=self)

    def options(self, num_returns: Any = None, **other) -> ActorMethod:
        unknown = set(other) - {"name", "concurrency_group", "max_task_retries", "retry_exceptions",
                                "enable_task_events", "tensor_transport"}
        if unknown:
            raise ValueError(f"invalid option(s) {sorted(unknown)} for actor method {self._name}")
        group = other.get("concurrency_group", self._group)
        if group is not None and group not in self._handle._meta.groups:
            defined = ", ".join(map(repr, self._handle._meta.groups)) or "none"
            raise ValueError(f"{self._handle._class_name}.{self._name}.options(concurrency_group={group!r}): the "
                             f"actor defines no such group (it defines {defined}); pass concurrency_groups="
                             f"{{{group!r}: N, ...}} to @meshrt.remote or .options() of the class")
        from .options import task_name as task_name_value

        meta = self._handle._meta.methods.get(self._name)
        nr = self._num_returns if num_returns is None else num_returns_value(
            num_returns, f"{self._handle._class_name}.{self._name}", getattr(meta, "is_generator", None))
        retry = (self._retry if "retry_exceptions" not in other
                 else retry_exceptions_value(other["retry_exceptions"], f"{self._handle._class_name}.{self._name}"))
        task_name = (self._task_name if "name" not in other
                     else task_name_value(other["name"], f"{self._handle._class_name}.{self._name}.options(name=...)"))
        retries = (self._max_retries if "max_task_retries" not in other else int_option(
            other, "max_task_retries", None, f"{self._handle._class_name}.{self._name}.options()"))
        return ActorMethod(self._handle, self._name, nr, self._checker, retry, group, task_name, retries)

    def __call__(self, *args, **kwargs):
        raise TypeError(
            f"actor methods cannot be called directly: instead of {self._name}(...), "
            f"use .{self._name}.remote(...)"
        )

    def __repr__(self) -> str:
        return f"<meshrt actor method {self._handle._class_name}.{self._name}>"


# Ray's other @ray.method keywords: accepted so Ray programs run unchanged, not applied
_METHOD_OPTIONS_ACCEPTED = {"_generator_backpressure_num_objects", "_num_objects_per_yield", "enable_task_events",
                            "tensor_transport"}


def method(fn: Callable | None = None, *, num_returns: Any = None, concurrency_group: str | None = None,
           retry_exceptions: Any = None, max_task_retries: int | None = None, **_ray_options: Any):
    """Set per-method options: ``@meshrt.method(num_returns=2)``; ``retry_exceptions=True``
    (or a list of exception classes) retries the call when the method raises, up to
    ``max_task_retries`` (the method's, else the actor's), as in Ray. ``@meshrt.method``
    alone changes nothing."""
    unknown = sorted(set(_ray_options) - _METHOD_OPTIONS_ACCEPTED)
    if unknown:  # (a typo, num_return=2, would otherwise surface far away)
        raise ValueError(f"@meshrt.method() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; "
                        f"it takes num_returns, concurrency_group, retry_exceptions, max_task_retries (and Ray's "
                        f"{', '.join(sorted(_METHOD_OPTIONS_ACCEPTED))}, accepted and not applied)")
    if concurrency_group is not None and (not isinstance(concurrency_group, str) or not concurrency_group):
        raise ValueError(f"@meshrt.method(concurrency_group=...): give a group name, got {concurrency_group!r}")
    retry_exceptions_value(retry_exceptions, "@meshrt.method(retry_exceptions=...)")  # (bad values: here)
    int_option({"max_task_retries": max_task_retries}, "max_task_retries", None, "@meshrt.method()")

    def decorate(fn):
        setattr(fn, _METHOD_OPTIONS, {"num_returns": num_returns, "retry_exceptions": retry_exceptions,
                                      "concurrency_group": concurrency_group, "max_task_retries": max_task_retries})
        return fn

    return decorate if fn is None else decorate(fn)



def remote(*args, **options):
    """``@remote`` or ``@remote(num_cpus=..., ...)`` on a function or a class."""
    if len(args) == 1 and not options and callable(args[0]):
        return _make_remote(args[0], {})
    if args:
        raise TypeError("remote() takes options as keyword arguments only, e.g. @meshrt.remote(num_cpus=2)")

    def decorate(target):
        return _make_remote(target, options)

    return decorate


def _make_remote(target, options: dict):
    if inspect.isclass(target):
        return ActorClass(target, options)
    if callable(target):
        return RemoteFunction(target, options)
    raise TypeError(f"@remote needs a function or a class, got {type(target).__name__}")

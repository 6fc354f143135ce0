"""Every error meshrt raises, rooted at :class:`MeshrtError`.

Each class says who raises it and when; the message is built in the constructor
and names the thing to change. Ray's names are kept as aliases at the bottom so
``except ray.exceptions.RayActorError`` keeps working after ``import meshrt as ray``.
"""

from __future__ import annotations

import signal
import traceback as _traceback
from typing import Any

__all__ = [
    "MeshrtError",
    "TaskError",
    "ActorDiedError",
    "MeshActorDiedError",
    "ActorNameTakenError",
    "ActorNotFoundError",
    "GetTimeoutError",
    "ObjectLostError",
    "OwnerDiedError",
    "ObjectStoreFullError",
    "TaskCancelledError",
    "WorkerCrashedError",
    "TaskUnschedulableError",
    "ActorUnschedulableError",
    "AuthenticationError",
    "RuntimeNotInitializedError",
    # Ray's names
    "RayError",
    "RayTaskError",
    "RayActorError",
    "ActorUnavailableError",
    "ObjectFreedError",
    "ActorAlreadyExistsError",
    "ActorHandleNotFoundError",
]


class MeshrtError(Exception):
    """Base of every error meshrt raises on purpose."""


class TaskError(MeshrtError):
    """A remote task or actor method raised; re-raised where its result was read.

    ``get`` and ``await`` raise an instance whose class also derives from the
    original exception's class, so ``except ValueError`` still catches a remote
    ``ValueError``. ``cause`` holds the original exception (None when it could not
    be pickled; ``traceback_str`` always holds its text).
    """

    def __init__(
        self,
        cause: BaseException | None,
        traceback_str: str | None = None,
        function_name: str = "<unknown>",
        pid: int | None = None,
        cause_repr: str | None = None,
        message: str | None = None,
    ) -> None:
        if traceback_str is None:  # (built by user code, as Monarch's ActorError(exception, message=...))
            traceback_str = "".join(_traceback.format_exception(cause)) if cause is not None else ""
        self.cause = cause
        self.traceback_str = traceback_str
        if message is not None:
            self.__dict__["message"] = message
        self.function_name = function_name
        self.pid = pid
        self.cause_repr = cause_repr if cause_repr is not None else _describe(cause)
        where = f"{function_name} (pid={pid})" if pid is not None else function_name
        message = (
            f"{self.cause_repr}\n\n{where} raised it; remote traceback:\n"
            f"{traceback_str.rstrip()}"
        )
        # Not super(): in the class built per cause, the next __init__ in the MRO is the
        # cause's own, which would run with our message as its arguments.
        Exception.__init__(self, message)

    def __str__(self) -> str:
        return self.args[0] if self.args else ""

    def __getattr__(self, name: str) -> Any:
        # Attributes of the original exception (``err.code``) read through.
        cause = self.__dict__.get("cause")
        if cause is not None and not name.startswith("__"):
            return getattr(cause, name)
        raise AttributeError(name)

    def __reduce__(self):
        return (
            _rebuild_task_error,
            (self.cause, self.traceback_str, self.function_name, self.pid, self.cause_repr),
        )

    @property
    def exception(self) -> BaseException | None:
        """Monarch's name (``ActorError.exception``) for the original exception: ``cause``."""
        return self.cause

    @property
    def exception_formatted(self) -> str:
        """Monarch's name for the remote traceback's text: ``traceback_str``."""
        return self.traceback_str

    @property
    def message(self) -> str:
        """As Monarch's ``ActorError.message``: what failed (the cause's own ``message``
        where it has one, as attributes of the cause read through)."""
        given = self.__dict__.get("message")
        if given is not None:
            return given
        own = getattr(self.__dict__.get("cause"), "message", None)
        return own if isinstance(own, str) else f"A remote call to {self.function_name} failed."

    def as_instanceof_cause(self) -> TaskError:
        """Ray's spelling; ours already is an instance of the cause's class."""
        return self

    @classmethod
    def for_cause(
        cls,
        cause: BaseException | None,
        traceback_str: str,
        function_name: str = "<unknown>",
        pid: int | None = None,
        cause_class: type | None = None,
        cause_repr: str | None = None,
    ) -> TaskError:
        """Build the error as an instance of both TaskError and the cause's class."""
        klass = _task_error_class(cause_class or (type(cause) if cause is not None else None))
        try:
            err = klass.__new__(klass)  # OSError and friends insist on their own __new__
        except Exception:
            err = TaskError.__new__(TaskError)
        TaskError.__init__(err, cause, traceback_str, function_name, pid, cause_repr)
        return err


_TASK_ERROR_CLASSES: dict[type, type] = {}


def _task_error_class(cause_class: type | None) -> type:
    if cause_class is None or not issubclass(cause_class, BaseException):
        return TaskError
    if issubclass(cause_class, TaskError) or not issubclass(cause_class, Exception):
        return TaskError
    klass = _TASK_ERROR_CLASSES.get(cause_class)
    if klass is None:
        try:
            klass = type(
                f"TaskError({cause_class.__name__})",
                (TaskError, cause_class),
                {"__module__": __name__, "__init__": TaskError.__init__, "__str__": TaskError.__str__},
            )
        except TypeError:  # incompatible layouts (rare C exception types)
            klass = TaskError
        _TASK_ERROR_CLASSES[cause_class] = klass
    return klass


def _rebuild_task_error(cause, traceback_str, function_name, pid, cause_repr):
    return TaskError.for_cause(cause, traceback_str, function_name, pid, cause_repr=cause_repr)


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "Exception"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class RayActorError(MeshrtError):
    """A call could not be served by its actor (Ray's base of ActorDiedError and
    ActorUnavailableError, under Ray's name).

    ``cause`` says how it died (exit code, signal, ``kill()``, constructor error),
    ``stderr_tail`` holds the last lines it wrote to stderr.
    """

    def __init__(
        self,
        actor_id: str = "",
        class_name: str = "",
        cause: str = "the actor died",
        stderr_tail: tuple[str, ...] | list[str] = (),
        creation_error: BaseException | None = None,
    ) -> None:
        self.actor_id = actor_id
        self.class_name = class_name
        self.cause = cause
        self.stderr_tail = tuple(stderr_tail)
        self.creation_error = creation_error
        # (a class name, or a description that names the actor already: "mesh actor 'x'")
        who = (class_name if " actor" in f" {class_name}" else f"actor {class_name}") if class_name else "the actor"
        if actor_id:
            who += f" ({actor_id})"
        message = f"{who} is dead: {cause}"
        if self.stderr_tail:
            message += "\nlast lines of its stderr:\n" + "\n".join(
                "    " + line for line in self.stderr_tail
            )
        super().__init__(message)
        self.error_msg = message

    @property
    def actor_init_failed(self) -> bool:
        """Ray's flag: the actor's constructor raised (``creation_error``)."""
        return self.creation_error is not None

    @property
    def preempted(self) -> bool:
        """Ray's flag for a node taken back by its cloud; meshrt has no such nodes."""
        return False

    def __reduce__(self):
        return (
            type(self),
            (self.actor_id, self.class_name, self.cause, self.stderr_tail, self.creation_error),
        )


class ActorDiedError(RayActorError):
    """The actor behind a handle is gone for good: raised by calls pending on it or made after."""


class ActorUnavailableError(RayActorError):
    """The actor's process died while it has restarts left (as Ray): the calls it had
    were lost with it; the next calls go to the restarted actor (``max_task_retries``
    re-sends them instead)."""


class ActorNameTakenError(MeshrtError, ValueError):
    """Raised at ``.options(name=...).remote()`` when the name is in use in that namespace."""

    def __init__(self, name: str, namespace: str) -> None:
        self.name = name
        self.namespace = namespace
        super().__init__(
            f"an actor named {name!r} already exists in namespace {namespace!r}; "
            "pick another name, or pass get_if_exists=True to reuse it"
        )

    def __reduce__(self):
        return (type(self), (self.name, self.namespace))


class ActorNotFoundError(MeshrtError, ValueError):
    """Raised by ``get_actor`` when no live actor has that name in that namespace."""

    def __init__(self, name: str, namespace: str) -> None:
        self.name = name
        self.namespace = namespace
        super().__init__(
            f"no actor named {name!r} in namespace {namespace!r}; create it with "
            f".options(name={name!r}).remote() first, or pass namespace= to get_actor"
        )

    def __reduce__(self):
        return (type(self), (self.name, self.namespace))


class GetTimeoutError(MeshrtError, TimeoutError):
    """Raised by ``get(..., timeout=)`` when the values are not ready in time."""


class ObjectLostError(MeshrtError):
    """The value behind a ref can no longer be had (its owner died, or it was freed)."""

    def __init__(self, object_ref_hex: str = "", reason: str = "the object was lost") -> None:
        self.object_ref_hex = object_ref_hex
        self.reason = reason
        super().__init__(f"object {object_ref_hex}: {reason}" if object_ref_hex else reason)

    def __reduce__(self):
        return (type(self), (self.object_ref_hex, self.reason))


class OwnerDiedError(ObjectLostError):
    """The process that created the ref (its owner) died, taking the value with it."""


class ObjectFreedError(ObjectLostError):
    """The value was freed explicitly while a ref to it was still used."""


class ObjectStoreFullError(MeshrtError, MemoryError):
    """Raised by ``put`` (or a task return) when the object store cannot hold a value."""

    def __init__(self, message: str = "the object store is full") -> None:
        super().__init__(message)


class TaskCancelledError(MeshrtError):
    """Raised by ``get`` on the result of a task that ``cancel()`` stopped."""

    def __init__(self, task_id: str = "", detail: str = "") -> None:
        self.task_id = task_id
        self.detail = detail
        message = f"task {task_id} was cancelled" if task_id else "the task was cancelled"
        if detail:
            message += f": {detail}"
        super().__init__(message)

    def __reduce__(self):  # (the detail travels too: it says who cancelled it and why)
        return (type(self), (self.task_id, self.detail))


class WorkerCrashedError(MeshrtError):
    """The worker running a task died and the task had no retries left."""


class TaskUnschedulableError(MeshrtError, ValueError):
    """Raised at ``.remote()`` when no node could ever satisfy the resource request."""

    def __init__(self, what: str, resource: str, requested: float, largest: float) -> None:
        self.resource = resource
        self.requested = requested
        self.largest = largest
        if resource.startswith("accelerator_type:"):  # (accelerator_type=: a GPU model, not an amount)
            model = resource.split(":", 1)[1]
            super().__init__(
                f"{what} asks for accelerator_type={model!r}, but no node has {model} GPUs (meshrt.nodes() and "
                f"cluster_resources() show each node's accelerator_type:<model>); drop accelerator_type= or name a "
                f"model a node has, or declare it: init(resources={{{resource!r}: 1}})"
            )
            return
        super().__init__(
            f"{what} asks for {resource}={_num(requested)}, but the largest node has "
            f"{resource}={_num(largest)}; lower the request in @remote(...)/.options(...) "
            f"or start the runtime with more (init({_init_kwarg(resource)}=...))"
        )

    def __reduce__(self):
        return (_rebuild_unschedulable, (type(self), self.args[0], self.resource, self.requested, self.largest))

    @classmethod
    def on_no_single_node(cls, what: str, request: dict):
        """Every resource asked for is on some node, but no one node has them all."""
        asked = ", ".join(f"{name}={_num(amount)}" for name, amount in request.items())
        return _rebuild_unschedulable(cls, f"{what} asks for {asked}, and no single node has all of that; "
                                           "meshrt.nodes() shows what each offers", None, 0.0, 0.0)

    @classmethod
    def because(cls, what: str, reason: str):
        """Placement failed for a reason other than amounts (its placement group is gone, say)."""
        return _rebuild_unschedulable(cls, f"{what} cannot be scheduled: {reason}", None, 0.0, 0.0)


def _rebuild_unschedulable(klass, message, resource, requested, largest):
    err = klass.__new__(klass)
    Exception.__init__(err, message)
    err.resource, err.requested, err.largest = resource, requested, largest
    return err


class ActorUnschedulableError(TaskUnschedulableError):
    """Raised at ``Cls.remote()`` when no node could ever host the actor."""


class AuthenticationError(MeshrtError, ConnectionError):
    """A peer failed the cluster-token handshake (wrong or missing ``MESHRT_TOKEN``)."""


class SupervisionError(MeshrtError, RuntimeError):
    """A failure in an actor mesh that nobody handled: an endpoint called with
    ``broadcast`` raised, or a mesh process died while no call waited on it.

    Raised by the default ``meshrt.unhandled_fault_hook`` (which ends the process
    that owns the mesh) and carried by ``MeshFailure.as_error()``. A RuntimeError, as
    Monarch's is; calls to a dead mesh actor raise one too (MeshActorDiedError).
    """


class MeshActorDiedError(ActorDiedError, SupervisionError):
    """An actor of a mesh is gone (its process died or was stopped, or the actor ended
    itself): an ActorDiedError, as meshrt and Ray name it, and a SupervisionError, as
    Monarch's callers catch it, so either's ``except`` clause works."""


class RuntimeNotInitializedError(MeshrtError, RuntimeError):
    """An API that needs a running runtime was used before ``init()`` or after ``shutdown()``."""


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _init_kwarg(resource: str) -> str:
    return {"CPU": "num_cpus", "GPU": "num_gpus"}.get(resource, "resources")


def describe_exit(returncode: int | None) -> str:
    """Say in words how a process ended, from a Popen-style return code."""
    if returncode is None:
        return "its process disappeared"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        text = f"its process was killed by {name} ({-returncode})"
        if -returncode == signal.SIGKILL:
            text += "; if nobody killed it, the out-of-memory killer may have"
        elif -returncode == signal.SIGSEGV:
            text += " (a segmentation fault)"
        return text
    return f"its process exited with code {returncode}"


# Ray's names, so ``except ray.exceptions.X`` keeps working after the import swap.
RayError = MeshrtError
RayTaskError = TaskError
ActorAlreadyExistsError = ActorNameTakenError
ActorHandleNotFoundError = ActorNotFoundError


# Ray raises these where meshrt reports the same event under another name (a node or
# process lost: ActorDiedError / WorkerCrashedError; a full store: ObjectStoreFullError)
# or for features meshrt does not have (runtime envs, placement groups). They exist so
# that Ray code naming them in ``except`` still imports and runs.
class RaySystemError(MeshrtError):
    """Ray's internal system error; meshrt raises it, as Ray does, for a compiled graph
    that was torn down or lost an actor (meshrt.dag), and for ``cluster_resources()``,
    ``available_resources()`` or ``nodes()`` asked before ``init()``."""


class NodeDiedError(MeshrtError):
    """Ray: the node running a task died; meshrt says ActorDiedError / WorkerCrashedError."""


class LocalRayletDiedError(MeshrtError):
    """Ray: the local raylet died; meshrt has no raylet."""


class ObjectFetchTimedOutError(ObjectLostError):
    """Ray: fetching an object from another node timed out; meshrt says ObjectLostError."""


class ObjectReconstructionFailedError(ObjectLostError):
    """Ray: lineage reconstruction failed; meshrt does not reconstruct (ObjectLostError)."""


class OutOfMemoryError(MeshrtError):
    """Ray: a task was killed by its memory monitor; meshrt names the SIGKILL in the crash error."""


class OutOfDiskError(MeshrtError):
    """Ray: the object store could not spill; meshrt says ObjectStoreFullError."""


class PendingCallsLimitExceeded(MeshrtError):
    """Raised at ``.remote()`` on an actor created with ``max_pending_calls=N`` when this
    process already has N calls to it unanswered (Ray's back-pressure)."""


class RuntimeEnvSetupError(MeshrtError):
    """Ray: a runtime_env could not be set up (its packages could not be installed, its
    directories unpacked, the job's setup hook raised): the calls given to that worker fail."""


class ActorEnvSetupError(ActorDiedError, RuntimeEnvSetupError):
    """An actor whose runtime_env could not be set up: dead (an ActorDiedError, as meshrt
    said before), and a RuntimeEnvSetupError, which Ray's callers of its methods catch."""


class TaskPlacementGroupRemoved(TaskUnschedulableError):
    """A task's placement group was removed before the task ran (Ray's name); a
    TaskUnschedulableError too, as meshrt raised before."""


class ActorPlacementGroupRemoved(ActorDiedError):
    """An actor's placement group was removed (Ray's name): the actor is gone."""


class AsyncioActorExit(MeshrtError):
    """Ray's internal signal that an async actor exits; ``exit_actor()`` is how to end one."""


class CrossLanguageError(MeshrtError):
    """Ray: a call to or from another language failed; meshrt is Python only."""


class ReferenceCountingAssertionError(ObjectLostError):
    """Ray: an object was freed while still referenced (a bug); meshrt says ObjectLostError."""


class UnserializableException(MeshrtError):
    """An exception a remote call raised that could not be pickled to its caller (Ray's
    name); meshrt sends its type name and text in a TaskError instead."""


class RayDirectTransportError(RaySystemError):
    """Ray: a tensor sent over its GPU transport failed; meshrt.tensor raises its own errors."""


class PlasmaObjectNotAvailable(MeshrtError):
    """Ray's internal 'not in the object store yet'; meshrt's get waits instead."""


class RayChannelError(RaySystemError):
    """A compiled graph's channel failed (meshrt.dag)."""


class RayChannelTimeoutError(RayChannelError, TimeoutError):
    """A compiled graph's ``execute()`` could not hand its inputs over within
    ``_submit_timeout`` (the graph's first actors took nothing for that long)."""


class RayCgraphCapacityExceeded(RaySystemError):
    """Raised by a compiled graph's ``execute()`` with ``_max_inflight_executions``
    executions whose results have not come back, or by a read that would keep more than
    ``_max_buffered_results`` results unread (meshrt.dag; Ray's limits and defaults)."""


__all__ += ["RaySystemError", "NodeDiedError", "LocalRayletDiedError", "ObjectFetchTimedOutError",
            "ObjectReconstructionFailedError", "OutOfMemoryError", "OutOfDiskError",
            "PendingCallsLimitExceeded", "RuntimeEnvSetupError", "RayCgraphCapacityExceeded",
            "RayChannelError", "RayChannelTimeoutError", "TaskPlacementGroupRemoved", "ActorPlacementGroupRemoved",
            "AsyncioActorExit", "CrossLanguageError", "ReferenceCountingAssertionError", "UnserializableException",
            "RayDirectTransportError", "PlasmaObjectNotAvailable"]


_RAY_ERROR_TYPES = (  # most specific first: Ray's ErrorType names, as its state API shows them
    (TaskPlacementGroupRemoved, "TASK_PLACEMENT_GROUP_REMOVED"),
    (ActorPlacementGroupRemoved, "ACTOR_PLACEMENT_GROUP_REMOVED"),
    (TaskCancelledError, "TASK_CANCELLED"),
    (ActorUnavailableError, "ACTOR_UNAVAILABLE"),
    (RayActorError, "ACTOR_DIED"),
    (WorkerCrashedError, "WORKER_DIED"),
    (OwnerDiedError, "OWNER_DIED"),
    (ObjectFreedError, "OBJECT_FREED"),
    (ObjectLostError, "OBJECT_LOST"),
    (ActorUnschedulableError, "ACTOR_UNSCHEDULABLE_ERROR"),
    (TaskUnschedulableError, "TASK_UNSCHEDULABLE_ERROR"),
    (RuntimeEnvSetupError, "RUNTIME_ENV_SETUP_FAILED"),
    (OutOfMemoryError, "OUT_OF_MEMORY"),
)


def ray_error_type(err: BaseException) -> str:
    """Ray's ErrorType name for ``err`` (``list_tasks()``'s ``error_type``): what failed,
    where the user's own code raising is TASK_EXECUTION_EXCEPTION."""
    if isinstance(err, TaskError):  # (whatever it raised, a lost object's error too, as Ray says)
        return "TASK_EXECUTION_EXCEPTION"
    for klass, kind in _RAY_ERROR_TYPES:
        if isinstance(err, klass):
            return kind
    return "TASK_EXECUTION_EXCEPTION"

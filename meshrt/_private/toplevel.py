"""The module-level API (``meshrt.get``, ``put``, ``wait`` ...): argument checks at the
call site, then one call into this process's core."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

from .. import exceptions as exc
from ..scheduler import bundles
from . import context, id_types, lanes, runtime_env, state
from .api import ActorHandle
from .refs import ObjectRef, ObjectRefGenerator


def _check_timeout(timeout, what: str) -> None:
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError(f"{what}: timeout must be a number of seconds or None, got {timeout!r}")
        if timeout < 0:
            raise ValueError(f"{what}: timeout must be >= 0, got {timeout}")


def _warn_if_in_event_loop(what: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    if _in_plain_method():  # (of an async actor, on its loop as in Ray: `await` is not there to use)
        return
    warnings.warn(
        f"meshrt.{what}() blocks the running asyncio event loop; use `await ref` "
        "(or asyncio.gather over refs) in async code",
        RuntimeWarning,
        stacklevel=3,
    )


def _in_plain_method() -> bool:
    call = context.current_call()
    executor = getattr(state.core_or_none(), "executor", None)
    if call is None or call.is_task or executor is None or executor.instance is None:
        return False
    return executor.kind_of(lanes.split(call.method)[0]) != "async"


def get(object_refs, *, timeout: float | None = None) -> Any:
    """The value(s) behind a ref or a list of refs, blocking until ready.

    Raises the task's error (a TaskError that is also an instance of the original
    exception class), ActorDiedError, TaskCancelledError, or GetTimeoutError.
    """
    _check_timeout(timeout, "get()")
    if isinstance(object_refs, ObjectRef):
        _warn_if_in_event_loop("get")
        return state.core().get([object_refs], timeout)[0]
    if isinstance(object_refs, (list, tuple)):
        for i, ref in enumerate(object_refs):
            if not isinstance(ref, ObjectRef):
                if all(_compiled(r) for r in object_refs):  # (a compiled graph's several results)
                    return [r.get(timeout) for r in object_refs]
                raise TypeError(
                    f"get() expects ObjectRefs, but item {i} of the list is a "
                    f"{type(ref).__qualname__}: {ref!r:.80}"
                )
        _warn_if_in_event_loop("get")
        values = state.core().get(list(object_refs), timeout)
        return values
    if _compiled(object_refs):  # (a compiled graph's result: meshrt.dag)
        return object_refs.get(timeout)
    if isinstance(object_refs, ObjectRefGenerator):  # (Ray's get() gives it back: code that gets what
        return object_refs  # a generator's call returned, as with num_returns="dynamic", goes on)
    raise TypeError(
        f"get() expects an ObjectRef or a list of ObjectRefs, got a "
        f"{type(object_refs).__qualname__}: {object_refs!r:.80}"
    )


def _compiled(ref: Any) -> bool:
    return getattr(type(ref), "_meshrt_compiled_ref", False)


def put(value: Any, *, _owner: Any = None) -> ObjectRef:
    """Store a value once and get a ref that any task or actor can read."""
    return state.core().put(value)


def wait(object_refs: list, *, num_returns: int = 1, timeout: float | None = None,
         fetch_local: bool = True) -> tuple[list, list]:
    """Split refs into (ready, not_ready) once ``num_returns`` are ready or on timeout; a
    streaming generator is ready once its next ref is (or it has ended), as in Ray."""
    if isinstance(object_refs, ObjectRef):
        raise TypeError("wait() expects a list of ObjectRefs, not a single ObjectRef: wait([ref])")
    if not isinstance(object_refs, (list, tuple)):
        raise TypeError(f"wait() expects a list of ObjectRefs, got {type(object_refs).__qualname__}")
    refs = list(object_refs)
    if not refs:  # (as Ray: nothing to wait for)
        return [], []
    for i, ref in enumerate(refs):
        if not isinstance(ref, (ObjectRef, ObjectRefGenerator)):
            raise TypeError(f"wait() expects ObjectRefs (or streaming generators), but item {i} is a "
                            f"{type(ref).__qualname__}")
    if len(set(refs)) != len(refs):
        raise ValueError("wait() got the same ObjectRef more than once; pass each ref once")
    if isinstance(num_returns, bool) or not isinstance(num_returns, int) or num_returns < 1:
        if not refs and num_returns == 0:
            return [], []
        raise ValueError(f"wait(): num_returns must be a positive int, got {num_returns!r}")
    if num_returns > len(refs):
        raise ValueError(f"wait(): num_returns={num_returns} but only {len(refs)} refs were given")
    _check_timeout(timeout, "wait()")
    return state.core().wait(refs, num_returns, timeout)


def kill(actor: ActorHandle, *, no_restart: bool = True) -> None:
    """Stop an actor now; with ``no_restart=False`` its max_restarts still apply."""
    if not isinstance(actor, ActorHandle):
        raise TypeError(f"kill() expects an actor handle, got {type(actor).__qualname__}")
    state.core().kill_actor(actor._actor_id, no_restart)


def cancel(ref, *, force: bool = False, recursive: bool = True) -> None:
    """Cancel the task behind ``ref``: dropped if queued, interrupted if running
    (``force=True`` kills its worker). ``get`` then raises TaskCancelledError."""
    from . import ids

    if isinstance(ref, ObjectRefGenerator):
        task_id = ref._task_id
    elif isinstance(ref, ObjectRef):
        task_id = ids.task_of(ref._id)
    else:
        raise TypeError(f"cancel() expects an ObjectRef, got {type(ref).__qualname__}")
    state.core().cancel(task_id, force, recursive)


def get_actor(name: str, namespace: str | None = None) -> ActorHandle:
    """The handle of the live actor created with ``.options(name=...)``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"get_actor() needs a non-empty actor name, got {name!r}")
    return state.core().get_actor(name, namespace)


def available_resources() -> dict:
    return _started("available_resources()").request_sync("available_resources")


def cluster_resources() -> dict:
    return _started("cluster_resources()").request_sync("cluster_resources")


def nodes() -> list:
    return _started("nodes()").request_sync("nodes")


def _started(what: str):
    """The runtime, for a question about it: asking does not start one, as in Ray (a
    cluster started just to be described would describe nothing of the program's)."""
    core = state.core_or_none()
    if core is None:
        raise exc.RaySystemError(f"{what}: meshrt is not running in this process; call meshrt.init() first")
    return core


def get_gpu_ids() -> list:
    """GPU ids assigned to the current task or actor (physical ids; [] in the driver)."""
    core = state.core_or_none()
    if core is None or core.is_driver:
        return []
    return context.gpu_ids()


class RuntimeContext:
    """What ``get_runtime_context()`` returns: ids of the job, task, actor, node, worker."""

    def get_job_id(self) -> str | None:
        return context.process.get("job_id")

    def get_node_id(self) -> str | None:
        return context.process.get("node_id")

    def get_worker_id(self) -> str:
        return f"{context.process.get('worker_id', 0):08x}"

    def get_task_id(self) -> str | None:
        call = context.current_call()
        return context.hex_or_none(call.task_id if call is not None else None)

    def get_actor_id(self) -> str | None:
        return context.hex_or_none(context.process.get("actor_id"))

    def get_actor_name(self) -> str | None:
        """The actor's name: '' for an unnamed actor, None outside an actor (as Ray's)."""
        if context.process.get("actor_id") is None:
            return None
        return context.process.get("actor_name") or ""

    def get_assigned_resources(self) -> dict:
        """What the running task or actor asked for (``{"CPU": 1.0}`` by default)."""
        call = context.current_call()
        found = context.resources_of(call.spec) if getattr(call, "is_task", False) else context.process.get("resources")
        return {name: float(amount) for name, amount in (found or {}).items()}  # (Ray's are floats: 1.0)

    def get_placement_group_id(self) -> str | None:
        """The id (hex) of the placement group the running task or actor is in, or None."""
        call = context.current_call()
        spec = call.spec if getattr(call, "is_task", False) else None
        found = bundles.bundle_of(spec.resources if spec is not None else context.process.get("units", ()))
        return found[0] if found is not None else None

    def get_accelerator_ids(self) -> dict:
        return {"GPU": [str(g) for g in get_gpu_ids()]}

    def get_resource_ids(self) -> dict:
        """Ray's older name for get_accelerator_ids()."""
        return self.get_accelerator_ids()

    def get_task_name(self) -> str | None:
        """The running task's name (``.options(name=...)``, else the function's), or the
        actor method's (``Class.method``; a mesh endpoint's ``mesh.endpoint``); None in the driver."""
        call = context.current_call()
        if call is None or getattr(call, "task_id", 0) <= 0:
            return None
        return getattr(call, "span", None) or getattr(call, "name", None)

    def get_task_function_name(self) -> str | None:
        """The running task's function or actor method as ``module.qualname``; None in the driver."""
        call = context.current_call()
        executor = getattr(state.core_or_none(), "executor", None)
        if call is None or getattr(call, "task_id", 0) <= 0 or executor is None:
            return None
        if getattr(call, "is_task", False):
            fn = executor.load(call.spec.code_id)
            return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', call.name)}"
        cls = type(executor.instance)
        method = call.name.rpartition(".")[2]
        return f"{cls.__module__}.{cls.__qualname__}.{method}"

    def is_canceled(self) -> bool:
        """Whether ``meshrt.cancel()`` was asked for the running task (Ray's check from
        inside a task that wants to stop on its own)."""
        call = context.current_call()
        executor = getattr(state.core_or_none(), "executor", None)
        if call is None or getattr(call, "task_id", 0) <= 0 or executor is None:
            raise RuntimeError("is_canceled() is only available inside a task or actor method")
        return call.task_id in executor.cancel_requested or call.task_id in executor.interrupted

    def get_session_name(self) -> str:
        return str(getattr(state.core_or_none(), "config", {}).get("session") or context.process.get("session", ""))

    def get_temp_dir(self) -> str:
        """Where this session keeps its files (the workers' logs: meshrt.util.state.get_log)."""
        import os

        from . import temp_root
        from .log_files import SESSIONS

        root = getattr(state.core_or_none(), "config", {}).get("temp_dir") or temp_root.root()
        return os.path.join(root, SESSIONS, f"session_{self.get_session_name()}")

    def get_node_labels(self) -> dict:
        """The labels of the node this runs on (init(labels=...), meshrt agent --labels,
        and ``ray.io/node-id``), as meshrt.nodes() gives them."""
        core = state.core_or_none()
        controller = getattr(core, "controller", None)
        if controller is not None:
            return dict(controller.labels)
        config = getattr(core, "config", None) or {}
        if "node_labels" in config:
            return dict(config["node_labels"])
        from . import labels

        return labels.of_node(config.get("labels", {}), self.get_node_id(), config.get("resources", {}))

    @property
    def current_placement_group_id(self) -> str | None:
        return self.get_placement_group_id()

    @property
    def should_capture_child_tasks_in_placement_group(self) -> bool:
        return context.capturing_group() is not None

    def get_pid(self) -> int:
        import os

        return os.getpid()

    @property
    def runtime_env(self) -> dict:
        """The environment the running task or actor was given (merged with the job's), as
        Ray shows it: local directories appear as the packages they were sent as."""
        from ..runtime_env import RuntimeEnv

        return RuntimeEnv(**runtime_env.current())

    def get_runtime_env_string(self) -> str:
        import json

        return json.dumps(runtime_env.current())

    @property
    def namespace(self) -> str:
        return context.process.get("namespace") or "default"

    def get_namespace(self) -> str:
        return self.namespace

    @property
    def was_current_actor_reconstructed(self) -> bool:
        return context.process.get("incarnation", 0) > 0

    @property
    def current_actor(self) -> ActorHandle:
        """A handle to the actor this code runs in (to give out, or to call itself)."""
        import pickle

        actor_id = context.process.get("actor_id")
        if actor_id is None:
            raise RuntimeError("current_actor is only available inside an actor method")
        blob = context.process["actor_meta"]
        return ActorHandle(actor_id, pickle.loads(blob), None, blob)

    @property
    def job_id(self):
        """Ray's JobID (get_job_id() is its hex)."""
        return _id_or_none(id_types.JobID, self.get_job_id())

    @property
    def node_id(self):
        return _id_or_none(id_types.NodeID, self.get_node_id())

    @property
    def task_id(self):
        return _id_or_none(id_types.TaskID, self.get_task_id())

    @property
    def actor_id(self):
        return _id_or_none(id_types.ActorID.from_hex, self.get_actor_id())

    def get(self) -> dict:
        return {"job_id": self.get_job_id(), "node_id": self.get_node_id(),
                "task_id": self.get_task_id(), "actor_id": self.get_actor_id(),
                "namespace": self.namespace}


def get_runtime_context() -> RuntimeContext:
    state.core()  # starts the runtime if needed, as Ray does
    return RuntimeContext()


def _id_or_none(make, hex_text: str | None):
    return None if hex_text is None else make(hex_text)

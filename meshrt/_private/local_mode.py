"""``init(local_mode=True)``: the same API, run in the driver process, eagerly.

Every ``.remote()`` runs the task or method at once on the calling thread, so a
debugger and print statements just work, and unit tests of user code need no
processes. Arguments and results still go through serialization, so code that
passes something unpicklable, or mutates an argument expecting to change the
caller's copy, fails here as it would on a cluster. Async actor methods run on one
background event loop. Not simulated: worker crashes, restarts and resource waits.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
import time
from typing import Any

from .. import exceptions as exc
from ..objstore.serialization import error_payload, serialize, system_error_payload
from ..scheduler.bundles import base_request, bundle_of
from ..scheduler.bundles import summed as bundle_sum
from ..scheduler.resources import NodeResources, from_units, normalize
from . import args as argpack
from . import call_record, context, ids, labels
from .core import Core
from .executor import ActorExit
from .pending import PendingTask
from .portal import LoopThread


class _LocalCall:
    """Enough of executor.Call for the runtime context."""

    def __init__(self, task_id: int) -> None:
        self.task_id = task_id


class _LocalActor:
    def __init__(self, instance, meta, lock) -> None:
        self.instance = instance
        self.meta = meta
        self.lock = lock
        self.dead: Any = None


class LocalCore(Core):
    is_driver = True
    local_mode = True

    def __init__(self, config: dict) -> None:
        io = LoopThread("meshrt-local")
        super().__init__(0, io, b"")
        self.config = config
        self.node = NodeResources.create(config["resources"])
        self.actors: dict[int, _LocalActor] = {}
        self.names: dict[tuple[str, str], int] = {}
        self.lock = threading.RLock()
        io.post(self.start_timers)

    # -- plumbing that has nothing to talk to ---------------------------------------------

    def send_controller(self, msg) -> None:
        pass

    def send_to(self, peer: int, msg) -> None:
        pass

    def define_code(self, code_id: int, blob_fn) -> None:
        pass

    def drain(self) -> None:
        with self.lock:
            super().drain()

    def check_feasible(self, units: tuple, what: str, actor: bool = False) -> None:
        found = bundle_of(units)
        group = self.__dict__.get("_groups", {}).get(found[0]) if found else None
        if found and (group is None or group["state"] == "REMOVED"):
            raise exc.TaskUnschedulableError.because(what, f"its placement group {found[0]} was removed")
        self.node.check_feasible(base_request(units), what, actor)

    async def request(self, method: str, *args):
        if method == "timeline":  # (no other process: the driver's own calls are the timeline)
            from .timeline_table import driver_process

            return driver_process(self.config["node_id"])
        if method in ("cluster_resources", "available_resources"):
            return self.node.as_floats("total")
        if method == "nodes":
            return [{"NodeID": self.config["node_id"], "Alive": True, "NodeManagerAddress": "127.0.0.1",
                     "Resources": self.node.as_floats("total"), "alive": True, "DeathReason": 0,
                     "DeathReasonMessage": "",
                     "Labels": labels.of_node(self.config.get("labels", {}), self.config["node_id"],
                                              self.config["resources"])}]
        if method == "host_of_node":  # (one node here: another is one that is not in the cluster)
            node_id, soft = args[0], args[1]
            if soft or node_id == self.config["node_id"]:
                return 0
            raise ValueError(f"NodeAffinitySchedulingStrategy(node_id={node_id!r}): no node of the cluster has "
                             "that id (local mode has one node: meshrt.nodes()), or pass soft=True")
        if "placement_group" in method:
            return self._placement_groups(method, *args)
        raise ValueError(f"{method} is not available in local mode")

    def _placement_groups(self, method: str, *args):
        """Local mode runs everything in this process, one call at a time: a group is
        reserved as soon as each bundle fits the node, and reserves nothing."""
        groups = self.__dict__.setdefault("_groups", {})
        namespaces = self.__dict__.setdefault("_group_namespaces", {})
        if method == "create_placement_group":
            pg_id, bundles, strategy, name, namespace, selectors, _detached = args
            mine = labels.of_node(self.config.get("labels", {}), self.config["node_id"], self.config["resources"])
            if any(not labels.matches(mine, wanted) for wanted in selectors):
                raise ValueError(f"placement_group(bundle_label_selector=...) can never be placed: local mode's one "
                                 f"node has the labels {mine}")
            if strategy == "STRICT_SPREAD" and len(bundles) > 1:
                raise ValueError(f"placement_group(strategy='STRICT_SPREAD') can never be placed: it needs a host per "
                                 f"bundle ({len(bundles)} bundles), and local mode has one")
            self.node.check_feasible(bundle_sum(bundles), "placement_group (all its bundles, on local mode's one node)")
            groups[pg_id] = {"placement_group_id": pg_id, "name": name, "strategy": strategy, "state": "CREATED",
                             "bundles": {i: {k: from_units(v) for k, v in b} for i, b in enumerate(bundles)},
                             "bundles_to_node_id": {i: self.config["node_id"] for i in range(len(bundles))}}
            namespaces[pg_id] = namespace
            return None
        if method in ("remove_placement_group", "wait_placement_group") and args[0] not in groups:
            raise ValueError(f"placement group {args[0]} is not one of this cluster's")
        if method == "remove_placement_group":
            groups[args[0]]["state"] = "REMOVED"
            return None
        if method == "wait_placement_group":
            return groups[args[0]]["state"] == "CREATED"
        if method == "placement_group_table":
            return groups.get(args[0], {}) if args[0] is not None else dict(groups)
        name, namespace = args
        for pg_id, g in groups.items():
            if g["name"] == name and namespaces[pg_id] == namespace and g["state"] != "REMOVED":
                return pg_id, [normalize(b) for b in g["bundles"].values()]
        raise ValueError(f"get_placement_group({name!r}): no placement group of that name")

    # -- running things now ------------------------------------------------------------------

    def _resolved_args(self, payload, deps):
        """Deserialize arguments, putting dependency values in; None if a dependency failed."""
        dep_payloads = []
        for pos, ref in deps:
            entry = self.table.entries.get(ref._id) or self._entry_for_unknown(ref)
            if entry.payload is None:
                raise RuntimeError("local mode: a dependency is not ready (awaited inside an async method?)")
            if entry.payload.is_error:
                return entry.payload
            dep_payloads.append((pos, entry.payload))
        from ..objstore.serialization import deserialize

        return argpack.unpack(payload, tuple(dep_payloads), deserialize)

    def _deliver(self, pt: PendingTask, fn, args, kwargs, name: str, kind: str = call_record.TASK) -> None:
        started = time.time_ns()
        token = context.enter(_LocalCall(pt.task_id), self)
        try:
            result = fn(*args, **kwargs)
            if pt.num_returns == -1:
                index = 0
                for value in result:
                    self._stream_value(pt, index, value)
                    index += 1
                self._finish_stream(pt, None)
            else:
                self._resolve(pt, self._pack(pt, result, name))
        except ActorExit:
            raise
        except BaseException as err:  # noqa: BLE001 - handed to whoever reads the ref
            self._fail(pt, error_payload(err, name, os.getpid(), skip_frames=1))
        finally:
            context.leave(token)
            call_record.note(pt.label or name, pt.task_id, kind, started, func=name if pt.label else None)

    def _pack(self, pt: PendingTask, result, name: str) -> list:
        n = pt.num_returns
        if n == 0:
            return []
        if n == 1:
            return [serialize(result)]
        if not isinstance(result, (tuple, list)) or len(result) != n:
            raise ValueError(f"{name} returned {type(result).__name__}, but num_returns={n} "
                             f"expects a tuple or list of {n} values")
        return [serialize(v) for v in result]

    def _resolve(self, pt: PendingTask, packed: list) -> None:
        with self.lock:
            self.pending.pop(pt.task_id, None)
            for entry, (payload, held) in zip(pt.entries, packed, strict=False):
                self.table.resolve(entry, payload, held)
                self._check.append(entry)

    def _fail(self, pt: PendingTask, error) -> None:
        with self.lock:
            if pt.stream is not None:
                self._finish_stream(pt, error)
                return
            self.pending.pop(pt.task_id, None)
            for entry in pt.entries:
                self.table.resolve(entry, error)
                self._check.append(entry)

    def _stream_value(self, pt: PendingTask, index: int, value) -> None:
        from . import messages as m

        payload, held = serialize(value)
        with self.lock:
            self.on_stream_item(None, m.StreamItem(pt.task_id, index, payload))

    def _finish_stream(self, pt: PendingTask, error) -> None:
        with self.lock:
            self.pending.pop(pt.task_id, None)
            stream = self.streams.get(pt.task_id)
            if stream is not None:
                stream.end(self, error)

    # -- the API -------------------------------------------------------------------------------

    def submit_task(self, fn, args: tuple, kwargs: dict, opts) -> Any:
        payload, deps, pins = argpack.pack(args, kwargs, f"{opts.name}.remote()")
        pt = PendingTask(ids.new_task_id(), opts.name, payload, deps, pins, opts.num_returns)
        result = self._make_returns(pt, opts.num_returns)
        self.pending[pt.task_id] = pt
        resolved = self._resolved_args(payload, deps)
        if not isinstance(resolved, tuple):
            self._fail(pt, resolved)
            return result
        self._deliver(pt, fn._function, *resolved, opts.name)
        return result

    def create_actor(self, actor_cls, args: tuple, kwargs: dict, opts) -> Any:
        from .api import ActorHandle

        payload, deps, _ = argpack.pack(args, kwargs, f"{actor_cls._name}.remote()")
        actor_id = ids.new_task_id()
        namespace = opts.namespace or self.namespace()
        if opts.name is not None:
            existing = self.names.get((namespace, opts.name))
            if existing is not None and self.actors[existing].dead is None:
                if opts.get_if_exists:
                    return ActorHandle(existing, self.actors[existing].meta, None)
                raise exc.ActorNameTakenError(opts.name, namespace)
            self.names[(namespace, opts.name)] = actor_id
        resolved = self._resolved_args(payload, deps)
        actor = _LocalActor(None, actor_cls._meta, threading.RLock())
        self.actors[actor_id] = actor
        try:
            if not isinstance(resolved, tuple):
                raise RuntimeError("a constructor argument failed")
            cls = actor_cls._cls
            if actor_cls._is_async:
                async def construct():
                    return cls(*resolved[0], **resolved[1])

                actor.instance = asyncio.run_coroutine_threadsafe(construct(), self.io.loop).result()
            else:
                actor.instance = cls(*resolved[0], **resolved[1])
        except BaseException as err:  # noqa: BLE001
            actor.dead = system_error_payload(exc.ActorDiedError(
                ids.to_hex(actor_id), actor_cls._name, f"its constructor raised {type(err).__name__}: {err}"))
        return ActorHandle(actor_id, actor_cls._meta, None)

    def call_actor(self, handle, method: str, args: tuple, kwargs: dict, num_returns: int,
                   retry_exceptions: Any = False, concurrency_group: str | None = None,
                   name: str | None = None, max_retries: int | None = None) -> Any:
        """(``retry_exceptions``, ``max_retries``: local mode runs each call once, as it simulates no retries;
        ``concurrency_group``: and one at a time. ``name``: the call's in the timeline.)"""
        payload, deps, pins = argpack.pack(args, kwargs, f"{handle._class_name}.{method}.remote()")
        label, name = name, f"{handle._class_name}.{method}"
        pt = PendingTask(ids.new_task_id(), name, payload, deps, pins, num_returns)
        pt.kind = "call"
        pt.label = label  # (its name in the timeline: errors name the method)
        result = self._make_returns(pt, num_returns)
        self.pending[pt.task_id] = pt
        actor = self.actors.get(handle._actor_id)
        if actor is None or actor.dead is not None:
            self._fail(pt, actor.dead if actor is not None else system_error_payload(
                exc.ActorDiedError(ids.to_hex(handle._actor_id), handle._class_name, "it is unknown here")))
            return result
        resolved = self._resolved_args(payload, deps)
        if not isinstance(resolved, tuple):
            self._fail(pt, resolved)
            return result
        if method == "__ray_ready__":
            fn = lambda: True  # noqa: E731
        elif method in ("__ray_terminate__", "__meshrt_release__"):
            self._kill(handle._actor_id, actor, "it was terminated with __ray_terminate__()")
            self._fail(pt, actor.dead)
            return result
        else:
            fn = getattr(actor.instance, method)
        if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
            self._run_async(pt, fn, resolved, name, handle._actor_id, actor)
        else:
            with actor.lock:
                try:
                    self._deliver(pt, fn, *resolved, name, call_record.ACTOR_CALL)
                except ActorExit:
                    self._kill(handle._actor_id, actor, "exit_actor() was called")
                    self._fail(pt, actor.dead)
        return result

    def _run_async(self, pt, fn, resolved, name, actor_id, actor) -> None:
        async def run():
            started = time.time_ns()
            token = context.enter(_LocalCall(pt.task_id), self)
            try:
                if pt.num_returns == -1:
                    index = 0
                    async for value in fn(*resolved[0], **resolved[1]):
                        self._stream_value(pt, index, value)
                        index += 1
                    self._finish_stream(pt, None)
                else:
                    self._resolve(pt, self._pack(pt, await fn(*resolved[0], **resolved[1]), name))
            except ActorExit:
                self._kill(actor_id, actor, "exit_actor() was called")
                self._fail(pt, actor.dead)
            except BaseException as err:  # noqa: BLE001
                self._fail(pt, error_payload(err, name, os.getpid(), skip_frames=1))
            finally:
                context.leave(token)
                call_record.note(pt.label or name, pt.task_id, call_record.ACTOR_CALL, started,
                                 func=name if pt.label else None)

        if self.io.in_loop():  # called from another async method: finish later
            self.io.loop.create_task(run())
        else:
            asyncio.run_coroutine_threadsafe(run(), self.io.loop).result()

    def _kill(self, actor_id: int, actor: _LocalActor, reason: str) -> None:
        if actor.dead is None:
            actor.dead = system_error_payload(exc.ActorDiedError(
                ids.to_hex(actor_id), actor.meta.class_name, reason))
        for key, value in list(self.names.items()):
            if value == actor_id:
                del self.names[key]

    def kill_actor(self, actor_id: int, no_restart: bool) -> None:
        actor = self.actors.get(actor_id)
        if actor is not None:
            self._kill(actor_id, actor, "it was killed by meshrt.kill()")

    def get_actor(self, name: str, namespace: str | None) -> Any:
        from .api import ActorHandle

        namespace = namespace or self.namespace()
        actor_id = self.names.get((namespace, name))
        if actor_id is None or self.actors[actor_id].dead is not None:
            raise exc.ActorNotFoundError(name, namespace)
        return ActorHandle(actor_id, self.actors[actor_id].meta, None)

    def cancel(self, task_id: int, force: bool, recursive: bool = True) -> None:
        pass  # every task has already run to completion

    def _note_child(self, task_id: int) -> None:
        pass  # nothing runs later, so there is nothing to cancel with its parent

    def shutdown(self) -> None:
        self.close()
        self.io.stop()

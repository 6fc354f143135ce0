"""``@remote(...)`` and ``.options(...)``: validated once per decoration, not per call.

Bad options raise at the decorator or ``.options()`` call, naming the option. Ray
options that change nothing here (``_metadata``, ``enable_task_events`` ...) are
accepted so Ray programs run unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cloudpickle

from ..scheduler import bundles
from ..scheduler.resources import normalize, validate_request
from . import concurrency_groups, labels
from .runtime_env import Requested
from .runtime_env import option as runtime_env_option

_RESOURCE_KEYS = {"num_cpus", "num_gpus", "resources", "memory", "accelerator_type"}
_IGNORED = {"_metadata", "enable_task_events", "_labels"}
_GROUP_KEYS = {"placement_group", "placement_group_bundle_index", "placement_group_capture_child_tasks"}
TASK_KEYS = _RESOURCE_KEYS | _IGNORED | _GROUP_KEYS | {"runtime_env", "num_returns", "max_retries", "retry_exceptions", "name",
                                         "max_calls", "scheduling_strategy", "label_selector", "fallback_strategy"}
ACTOR_KEYS = _RESOURCE_KEYS | _IGNORED | _GROUP_KEYS | {"runtime_env", "max_restarts", "max_task_retries", "max_concurrency", "name",
                                          "scheduling_strategy", "namespace", "lifetime", "get_if_exists", "max_pending_calls",
                                          "concurrency_groups", "allow_out_of_order_execution", "label_selector",
                                          "fallback_strategy",
                                          "_host", "_label", "_python"}
# (_host, _label, _python: a mesh process's host, its name in output, the interpreter it runs)
DEFAULT_TASK_RETRIES = 3
ACCELERATOR_PREFIX = "accelerator_type:"  # a host's resource naming its GPU model (driver._node_resources)
ACCELERATOR_SLIVER = 0.001
DEFAULT_ASYNC_CONCURRENCY = 1000


def check_keys(options: dict, allowed: set, what: str) -> None:
    for key in options:
        if key not in allowed:
            raise ValueError(f"invalid option {key!r} for {what}; valid options are "
                             f"{', '.join(sorted(k for k in allowed - _IGNORED if not k.startswith('_')))}")


def resource_units(options: dict, what: str, default_cpus: float) -> tuple:
    request: dict[str, Any] = {}
    cpus = options.get("num_cpus")
    request["CPU"] = default_cpus if cpus is None else cpus
    gpus = options.get("num_gpus")
    if gpus:
        request["GPU"] = gpus
    if options.get("memory"):
        request["memory"] = options["memory"]
    for name, amount in (options.get("resources") or {}).items():
        if name in ("CPU", "GPU"):
            raise ValueError(f"{what}: resources={{{name!r}: ...}}: use num_cpus=/num_gpus= for {name}")
        request[name] = amount
    accelerator = options.get("accelerator_type")
    if accelerator is not None:  # (as Ray: a sliver of the resource a host of that GPU model has one of)
        if not isinstance(accelerator, str) or not accelerator:
            raise ValueError(f"{what}: accelerator_type={accelerator!r}: give a GPU model as a str, e.g. \"H100\" "
                             f"(meshrt.util.accelerators names them)")
        request[f"{ACCELERATOR_PREFIX}{accelerator}"] = ACCELERATOR_SLIVER
    validate_request(request, what)
    return normalize(request)


def placement(options: dict, units: tuple, what: str) -> tuple[tuple, tuple | None]:
    """(resources, node affinity) from ``scheduling_strategy`` and the older
    ``placement_group=``/``placement_group_bundle_index=`` options: in a placement
    group, the request is renamed to its bundle's resources (scheduler/bundles.py)."""
    strategy = options.get("scheduling_strategy")
    group, index = options.get("placement_group"), options.get("placement_group_bundle_index")
    in_strategy = type(strategy).__name__ == "PlacementGroupSchedulingStrategy"
    if in_strategy:
        group, index = strategy.placement_group, strategy.placement_group_bundle_index
    elif group == "default":  # (Ray's value for "none")
        group = None
    if group is None:
        if index not in (None, -1):
            raise ValueError(f"{what}: placement_group_bundle_index={index!r} needs placement_group= as well")
        return units, None if in_strategy else node_affinity(strategy, what)
    from ..util.placement_group import PlacementGroup  # (meshrt.util imports this module)

    if not isinstance(group, PlacementGroup):
        raise ValueError(f"{what}: placement_group={group!r} is not a placement group; create one with "
                         "meshrt.util.placement_group([...])")
    index = -1 if index is None else index
    group.check_request(units, index, what)
    return bundles.request_in_bundle(units, group.id.hex(), index), None


def group_capture(options: dict) -> tuple[bool, bool | None]:
    """Ray's ``placement_group_capture_child_tasks``: (may this task or actor go in the
    group of the one that submits it, as it names no placement; does this one, placed
    in a group, put the tasks and actors it submits there: True, False, or None for as
    its parent does). placement.capture() applies it."""
    strategy = options.get("scheduling_strategy")
    capturable = strategy is None and options.get("placement_group") in (None, "default")
    if type(strategy).__name__ == "PlacementGroupSchedulingStrategy":
        flag = strategy.placement_group_capture_child_tasks
        return False, None if flag is None else bool(flag)
    flag = options.get("placement_group_capture_child_tasks")
    return capturable, None if flag is None else bool(flag)


def node_affinity(value: Any, what: str) -> tuple | None:
    """The ``scheduling_strategy`` option as (node_id, soft), or None where it leaves
    placement to meshrt ("DEFAULT", "SPREAD", None); a bad value is named."""
    # (imported here: meshrt.util imports this module)
    from ..util.scheduling_strategies import (
        NodeAffinitySchedulingStrategy,
        NodeLabelSchedulingStrategy,
    )

    if value is None or value in ("DEFAULT", "SPREAD") or isinstance(value, NodeLabelSchedulingStrategy):
        return None  # (labels: wanted_labels)
    if isinstance(value, NodeAffinitySchedulingStrategy):
        return (value.node_id, value.soft)
    raise ValueError(f"{what}: scheduling_strategy={value!r} is not one meshrt knows; use None, 'DEFAULT', "
                     "'SPREAD', meshrt.util.scheduling_strategies.NodeAffinitySchedulingStrategy(...), "
                     "NodeLabelSchedulingStrategy(...) or PlacementGroupSchedulingStrategy(...)")


def wanted_labels(options: dict, what: str) -> tuple[tuple, tuple]:
    """(hard, soft) label selectors (labels.py) from ``label_selector`` and a
    ``NodeLabelSchedulingStrategy``."""
    from ..util.scheduling_strategies import NodeLabelSchedulingStrategy

    hard = labels.selector(options.get("label_selector"), what)
    strategy = options.get("scheduling_strategy")
    if isinstance(strategy, NodeLabelSchedulingStrategy):
        return tuple(sorted(set(hard) | set(strategy._hard))), strategy._soft
    return hard, ()


def fallback_labels(options: dict, what: str) -> tuple:
    """Ray's ``fallback_strategy=[{"label_selector": {...}}, ...]``: selectors tried in
    turn where no node matches the task's or actor's own (host_choice.py)."""
    given = options.get("fallback_strategy")
    if given is None:
        return ()
    if not isinstance(given, (list, tuple)):
        raise TypeError(f"{what}: fallback_strategy is a list of dicts, e.g. "
                        f"[{{'label_selector': {{'zone': 'b'}}}}]; got {given!r}")
    out = []
    for item in given:
        if not isinstance(item, dict) or not item:
            raise ValueError(f"{what}: each fallback_strategy entry is a non-empty dict, e.g. "
                             f"{{'label_selector': {{'zone': 'b'}}}}; got {item!r}")
        unknown = set(item) - {"label_selector"}
        if unknown:
            raise ValueError(f"{what}: fallback_strategy entry {item!r}: only 'label_selector' is supported "
                             f"(as in Ray), not {sorted(unknown)}")
        out.append(labels.selector(item["label_selector"], f"{what}: fallback_strategy"))
    return tuple(out)


STREAMING = -1  # num_returns="streaming": the call gives an ObjectRefGenerator
DYNAMIC = -2  # num_returns="dynamic": one ref, to a DynamicObjectRefGenerator (streams.py)


def num_returns_value(value: Any, what: str, is_generator: bool | None) -> int:
    """``is_generator``: whether the function is one; None where that is not known here
    (an actor method's ``.options()``: its worker names a non-generator instead)."""
    if value is None:
        return STREAMING if is_generator else 1
    if value == "streaming":
        return STREAMING
    if value == "dynamic":
        if is_generator is False:  # (Ray refuses it here too)
            raise ValueError(f"{what}: num_returns='dynamic' can only be used with a generator function "
                             "(one that uses 'yield'); return a list with num_returns=N instead")
        return DYNAMIC
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what}: num_returns must be an int >= 0, 'streaming' or 'dynamic', got {value!r}")
    return value


def retry_exceptions_value(value: Any, what: str):
    """False/True, or the pickled tuple of exception classes a worker checks against."""
    if value is None or value is False:
        return False
    if value is True:
        return True
    if isinstance(value, type):
        value = [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, type) and issubclass(v, BaseException) for v in value):
        return cloudpickle.dumps(tuple(value))
    raise ValueError(f"{what}: retry_exceptions must be a bool or a list of exception classes, got {value!r}")


def task_name(value: Any, what: str) -> str | None:
    """A task's or an actor call's ``name`` option: its name in list_tasks and the timeline."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{what}: give the name as a str, got {value!r}")
    return value or None


def int_option(options: dict, key: str, default: int, what: str, minimum: int = -1) -> int:
    value = options.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{what}: {key} must be an int >= {minimum}, got {value!r}")
    return value


@dataclass(frozen=True)
class TaskOptions:
    name: str
    num_returns: int
    resources: tuple
    max_retries: int
    retry_exceptions: Any
    max_calls: int = 0  # a worker runs at most this many of these tasks, then exits (0: no limit)
    affinity: tuple | None = None  # (node id, soft): NodeAffinitySchedulingStrategy
    spread: bool = False  # scheduling_strategy="SPREAD": over the hosts, not the head first (host_choice.py)
    runtime_env: Requested | None = None  # runtime_env.py
    capturable: bool = True  # names no placement: may join its parent's placement group
    capture_children: bool | None = None  # in a group: what it submits joins it too (None: as its parent)
    labels: tuple = ()  # the node labels it must run on (labels.py)
    soft_labels: tuple = ()  # ... and would rather run on
    fallback_labels: tuple = ()  # selectors tried in turn where no node matches ``labels``
    func_name: str = ""  # the function's own name, where ``name=`` renamed the task

    @classmethod
    def build(cls, options: dict, default_name: str, is_generator: bool) -> TaskOptions:
        task_name(options.get("name"), f"{default_name}.options(name=...)")
        what = f"task {options.get('name') or default_name}"
        check_keys(options, TASK_KEYS, what)
        resources, affinity = placement(options, resource_units(options, what, 1), what)
        capturable, captures = group_capture(options)
        hard, soft = wanted_labels(options, what)
        return cls(
            name=options.get("name") or default_name,
            num_returns=num_returns_value(options.get("num_returns"), what, is_generator),
            resources=resources,
            max_retries=int_option(options, "max_retries", DEFAULT_TASK_RETRIES, what),
            retry_exceptions=retry_exceptions_value(options.get("retry_exceptions"), what),
            max_calls=int_option(options, "max_calls", 0, what, minimum=0),
            affinity=affinity,
            spread=options.get("scheduling_strategy") == "SPREAD",
            runtime_env=runtime_env_option(options.get("runtime_env"), what),
            capturable=capturable, capture_children=captures, labels=hard, soft_labels=soft,
            fallback_labels=fallback_labels(options, what),
            func_name=default_name if options.get("name") else "",
        )


@dataclass(frozen=True)
class ActorOptions:
    resources: tuple
    max_restarts: int
    max_task_retries: int
    max_concurrency: int
    name: str | None
    namespace: str | None
    detached: bool
    get_if_exists: bool
    host: int = 0
    label: str = ""  # what the driver prints before its output (default: the class name)
    max_pending_calls: int = -1  # calls one process may have unanswered before .remote() raises
    concurrency_groups: tuple = ()  # ((group, max concurrency), ...): concurrency_groups.py
    affinity: tuple | None = None  # (node id, soft): NodeAffinitySchedulingStrategy
    waits_for_host: bool = False  # placed on ``host`` by placement.py: waits there for free resources
    host_given: bool = False  # ``_host`` was given (a mesh's process): placement.py leaves it there
    spread: bool = False  # scheduling_strategy="SPREAD"
    host_policy: str = ""  # set by placement.py: "" starts it on ``host``; else the controller picks (host_choice.py)
    runtime_env: Requested | None = None  # runtime_env.py
    capturable: bool = True  # as TaskOptions's
    capture_children: bool | None = None
    python: str = ""  # the interpreter its process runs ('': the driver's; mesh/python_executable.py)
    labels: tuple = ()  # as TaskOptions's
    soft_labels: tuple = ()
    fallback_labels: tuple = ()

    @classmethod
    def build(cls, options: dict, class_name: str, is_async: bool) -> ActorOptions:
        what = f"actor {class_name}"
        check_keys(options, ACTOR_KEYS, what)
        name = options.get("name")
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"{what}: name must be a non-empty string, got {name!r}")
        namespace = options.get("namespace")
        if namespace is not None and not isinstance(namespace, str):
            raise ValueError(f"{what}: namespace must be a string, got {namespace!r}")
        lifetime = options.get("lifetime")
        if lifetime not in (None, "detached", "non_detached"):
            raise ValueError(f"{what}: lifetime must be None, 'detached' or 'non_detached', got {lifetime!r}")
        if options.get("get_if_exists") and name is None:
            raise ValueError(f"{what}: get_if_exists=True needs name= as well")
        default_concurrency = DEFAULT_ASYNC_CONCURRENCY if is_async else 1
        resources, affinity = placement(options, resource_units(options, what, 0), what)
        capturable, captures = group_capture(options)
        hard, soft = wanted_labels(options, what)
        return cls(
            resources=resources,
            max_restarts=int_option(options, "max_restarts", 0, what),
            max_task_retries=int_option(options, "max_task_retries", 0, what),
            max_concurrency=int_option(options, "max_concurrency", default_concurrency, what, 1),
            name=name,
            namespace=namespace,
            detached=lifetime == "detached",
            get_if_exists=bool(options.get("get_if_exists")),
            host=int(options.get("_host") or 0),
            host_given=options.get("_host") is not None,
            label=str(options.get("_label") or ""),
            python=str(options.get("_python") or ""),
            max_pending_calls=int_option(options, "max_pending_calls", -1, what),
            concurrency_groups=concurrency_groups.check(options.get("concurrency_groups"), what),
            affinity=affinity,
            spread=options.get("scheduling_strategy") == "SPREAD",
            runtime_env=runtime_env_option(options.get("runtime_env"), what),
            capturable=capturable, capture_children=captures, labels=hard, soft_labels=soft,
            fallback_labels=fallback_labels(options, what),
        )

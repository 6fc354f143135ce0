"""Ray's concurrency groups: an actor's methods split into groups, each with its own
limit on how many of its calls run at once (``concurrency_groups={"io": 2}`` on the
actor, ``@meshrt.method(concurrency_group="io")`` on a method). A threaded actor gets
a thread pool per group, an async actor a semaphore per group; methods naming no
group share the default one, sized by ``max_concurrency``.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

METHOD_OPTIONS = "__meshrt_method_options__"
_UNSET = object()


def check(groups: Any, what: str) -> tuple:
    """``{"io": 2, ...}`` -> ``(("io", 2), ...)``, or a clear error naming what to fix."""
    if not groups:
        return ()
    if not isinstance(groups, dict):
        raise ValueError(f"{what}: concurrency_groups must be a dict of group name -> max concurrency, got {groups!r}")
    for name, limit in groups.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"{what}: concurrency_groups: a group name must be a non-empty string, got {name!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"{what}: concurrency_groups[{name!r}] must be an int >= 1, got {limit!r}")
    return tuple(groups.items())


def group_of(fn: Any) -> str | None:
    """The group ``@meshrt.method(concurrency_group=...)`` put a method in, if any."""
    return (getattr(fn, METHOD_OPTIONS, None) or {}).get("concurrency_group")


class Groups:
    """One actor's groups, in its worker: where each method's calls run."""

    def __init__(self, groups: tuple, cls: type, is_async: bool) -> None:
        self._cls = cls
        self._of: dict[str, Any] = {}
        if is_async:
            self.semaphores = {name: asyncio.Semaphore(limit) for name, limit in groups}
        else:
            self.pools = {name: ThreadPoolExecutor(limit, thread_name_prefix=f"meshrt-{name}")
                          for name, limit in groups}

    def of(self, call) -> str | None:
        """The call's group: chosen for this call (``.options(concurrency_group=)``), else
        its method's."""
        if call.group is not None:
            return call.group
        group = self._of.get(call.method, _UNSET)
        if group is _UNSET:
            group = self._of[call.method] = group_of(getattr(self._cls, call.method, None))
        return group

    def pool(self, call, default):
        return self.pools.get(self.of(call), default)

    def semaphore(self, call, default):
        return self.semaphores.get(self.of(call), default)

"""Ray's concurrency groups: an actor's methods split into groups, each with its own
limit on how many of its calls run at once (``concurrency_groups={"io": 2}`` on the
actor, ``@meshrt.method(concurrency_group="io")`` on a method). A threaded actor gets
a thread pool per group; an async actor a semaphore per group and, as in Ray, an event
loop of its own per group, on a thread of its own, so a call that blocks its group's
loop holds up only that group. Methods naming no group share the default one (the
actor's own loop), sized by ``max_concurrency``.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .portal import LoopThread

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
        self.loops: dict[str, LoopThread | None] = {}
        if is_async:
            self.semaphores = {name: asyncio.Semaphore(limit) for name, limit in groups}
            self.loops = {name: None for name, _ in groups}  # (started with the group's first call)
        else:
            self.pools = {name: ThreadPoolExecutor(limit, thread_name_prefix=f"meshrt-{name}")
                          for name, limit in groups}

    def of(self, call) -> str | None:
        """The call's group: chosen for this call (``.options(concurrency_group=)``), else
        its method's."""
        return call.group if call.group is not None else self.of_method(call.method)

    def of_method(self, method: str) -> str | None:
        group = self._of.get(method, _UNSET)
        if group is _UNSET:
            group = self._of[method] = group_of(getattr(self._cls, method, None))
        return group

    def pool(self, call, default):
        return self.pools.get(self.of(call), default)

    def semaphore(self, call, default):
        return self.semaphores.get(self.of(call), default)

    def loop_of(self, call) -> LoopThread | None:
        """An async actor's loop for the call's group (None: the actor's own loop), on a
        thread of its own: the call goes straight there (executor.submit), so a busy
        actor loop holds none of them up. The core loop's thread only (it starts a
        group's loop on its first call)."""
        name = self.of(call)
        if name not in self.loops:
            return None
        loop = self.loops[name]
        if loop is None:
            loop = self.loops[name] = LoopThread(f"meshrt-group-{name}")
        return loop

    def thread_of(self, method: str, default_ident: int | None, group: str | None = None) -> int | None:
        """The thread a call of ``method`` (in ``group``, where it chose one) runs on in an
        async actor (None: not started)."""
        name = group if group is not None else self.of_method(method)
        if name not in self.loops:
            return default_ident
        loop = self.loops[name]
        return loop.thread_id if loop is not None else None


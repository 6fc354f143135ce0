"""ActorPool: spread calls over a fixed set of actors (Ray's ``ray.util.ActorPool``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .._private import toplevel
from .._private.refs import ObjectRef

__all__ = ["ActorPool"]


class ActorPool:
    """Run ``fn(actor, value)`` on whichever actor is free; collect results in
    submission order (``get_next``) or as they finish (``get_next_unordered``)."""

    def __init__(self, actors: Iterable[Any]) -> None:
        self._idle: list = list(actors)
        self._busy: dict[ObjectRef, tuple[int, Any]] = {}  # ref -> (index, actor)
        self._by_index: dict[int, ObjectRef] = {}
        self._backlog: list[tuple[Callable, Any]] = []
        self._submitted = 0
        self._returned = 0

    def map(self, fn: Callable, values: Iterable[Any]) -> Iterator[Any]:
        """Results of ``fn(actor, v)`` for every ``v``, in the order of ``values``."""
        self._drain_previous()
        for value in values:
            self.submit(fn, value)
        while self.has_next():
            yield self.get_next()

    def map_unordered(self, fn: Callable, values: Iterable[Any]) -> Iterator[Any]:
        """Like ``map``, yielding each result as soon as it is ready."""
        self._drain_previous()
        for value in values:
            self.submit(fn, value)
        while self.has_next():
            yield self.get_next_unordered()

    def _drain_previous(self) -> None:
        while self.has_next():
            self.get_next_unordered()

    def submit(self, fn: Callable, value: Any) -> None:
        """Start ``fn(actor, value)`` on a free actor, or queue it until one frees up."""
        if not self._idle:
            self._backlog.append((fn, value))
            return
        actor = self._idle.pop()
        ref = fn(actor, value)
        if not isinstance(ref, ObjectRef):
            raise TypeError(f"ActorPool: fn must return the ObjectRef of a call like a.m.remote(v), got {type(ref).__qualname__}")
        index = self._submitted
        self._submitted += 1
        self._busy[ref] = (index, actor)
        self._by_index[index] = ref

    def has_next(self) -> bool:
        return bool(self._busy) or bool(self._backlog)

    def get_next(self, timeout: float | None = None, ignore_if_timedout: bool = False) -> Any:
        """The next result in submission order."""
        if not self.has_next():
            raise StopIteration("ActorPool: no more results to get")
        # Skip results already taken by get_next_unordered.
        while self._returned not in self._by_index and self._returned < self._submitted:
            self._returned += 1
        ref = self._by_index[self._returned]
        if timeout is not None:
            ready, _ = toplevel.wait([ref], timeout=timeout)
            if not ready:
                if ignore_if_timedout:
                    del self._by_index[self._returned]
                    self._returned += 1
                    self._finish(ref)
                raise TimeoutError(f"ActorPool.get_next(): no result within {timeout} s")
        del self._by_index[self._returned]
        self._returned += 1
        self._finish(ref)
        return toplevel.get(ref)

    def get_next_unordered(self, timeout: float | None = None, ignore_if_timedout: bool = False) -> Any:
        """Whichever pending result is ready first."""
        if not self.has_next():
            raise StopIteration("ActorPool: no more results to get")
        ready, _ = toplevel.wait(list(self._busy), num_returns=1, timeout=timeout)
        if not ready:
            raise TimeoutError(f"ActorPool.get_next_unordered(): no result within {timeout} s")
        ref = ready[0]
        index, _ = self._busy[ref]
        self._by_index.pop(index, None)
        self._finish(ref)
        return toplevel.get(ref)

    def _finish(self, ref: ObjectRef) -> None:
        _, actor = self._busy.pop(ref)
        self._return_actor(actor)

    def _return_actor(self, actor: Any) -> None:
        self._idle.append(actor)
        if self._backlog:
            self.submit(*self._backlog.pop(0))

    def has_free(self) -> bool:
        return bool(self._idle) and not self._backlog

    def pop_idle(self) -> Any | None:
        return self._idle.pop() if self.has_free() else None

    def push(self, actor: Any) -> None:
        """Add an actor (new, or one taken with ``pop_idle``) to the pool."""
        if actor in self._idle or any(a == actor for _, a in self._busy.values()):
            raise ValueError("ActorPool.push(): that actor is already in the pool")
        self._return_actor(actor)

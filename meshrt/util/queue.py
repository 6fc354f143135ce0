"""A first-in first-out queue shared by tasks and actors (Ray's ``ray.util.queue``).

The items live in one async actor; the Queue object is a picklable handle to it, so
producers and consumers in any process can use it.
"""

from __future__ import annotations

import asyncio
import queue as _stdlib_queue
from typing import Any

from .. import exceptions
from .._private import api, toplevel

__all__ = ["Queue", "Empty", "Full"]


class Empty(_stdlib_queue.Empty):
    """Raised by ``get(block=False)`` / ``get(timeout=...)`` on an empty queue."""


class Full(_stdlib_queue.Full):
    """Raised by ``put(block=False)`` / ``put(timeout=...)`` on a full queue."""


class _QueueActor:
    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self.queue: asyncio.Queue = asyncio.Queue(maxsize)

    def qsize(self) -> int:
        return self.queue.qsize()

    def empty(self) -> bool:
        return self.queue.empty()

    def full(self) -> bool:
        return self.queue.full()

    async def put(self, item: Any, timeout: float | None = None) -> None:
        try:
            await asyncio.wait_for(self.queue.put(item), timeout)
        except asyncio.TimeoutError:
            raise Full(f"queue is full (maxsize={self.maxsize}) after waiting {timeout} s") from None

    async def put_nowait(self, item: Any) -> None:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            raise Full(f"queue is full (maxsize={self.maxsize})") from None

    async def put_nowait_batch(self, items: list) -> None:
        if self.maxsize > 0 and len(items) + self.queue.qsize() > self.maxsize:
            raise Full(f"cannot add {len(items)} items: the queue holds {self.queue.qsize()} of at most {self.maxsize}")
        for item in items:
            self.queue.put_nowait(item)

    async def get(self, timeout: float | None = None) -> Any:
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except asyncio.TimeoutError:
            raise Empty(f"queue is still empty after waiting {timeout} s") from None

    async def get_nowait(self) -> Any:
        try:
            return self.queue.get_nowait()
        except asyncio.QueueEmpty:
            raise Empty("queue is empty") from None

    async def get_nowait_batch(self, num_items: int) -> list:
        if num_items > self.queue.qsize():
            raise Empty(f"cannot get {num_items} items: the queue holds {self.queue.qsize()}")
        return [self.queue.get_nowait() for _ in range(num_items)]


def _plain(err: BaseException) -> BaseException:
    """A task error wrapping Empty/Full comes back as the plain Empty/Full."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, (Empty, Full)):
        return cause
    return err


class Queue:
    """``Queue(maxsize=0, actor_options=None)``: put/get from anywhere, blocking or not;
    a ``maxsize`` of 0 or less is no limit, as in Ray and the standard library."""

    def __init__(self, maxsize: int = 0, actor_options: dict | None = None) -> None:
        if not isinstance(maxsize, int) or isinstance(maxsize, bool):
            raise TypeError(f"Queue(maxsize=...) must be an int (0 or less: no limit), got {maxsize!r}")
        self.maxsize = maxsize
        options = {"num_cpus": 0, **(actor_options or {})}
        self.actor = api.ActorClass(_QueueActor, options).remote(maxsize)

    def __len__(self) -> int:
        return self.size()

    def size(self) -> int:
        return toplevel.get(self.actor.qsize.remote())

    def qsize(self) -> int:
        return self.size()

    def empty(self) -> bool:
        return toplevel.get(self.actor.empty.remote())

    def full(self) -> bool:
        return toplevel.get(self.actor.full.remote())

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        if not block:
            return self.put_nowait(item)
        if timeout is not None and timeout < 0:
            raise ValueError("Queue.put(): timeout must be >= 0")
        self._wait(self.actor.put.remote(item, timeout))

    async def put_async(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        ref = self.actor.put.remote(item, timeout) if block else self.actor.put_nowait.remote(item)
        try:
            await ref
        except exceptions.TaskError as err:
            raise _plain(err) from None

    def put_nowait(self, item: Any) -> None:
        self._wait(self.actor.put_nowait.remote(item))

    def put_nowait_batch(self, items: list) -> None:
        if not isinstance(items, (list, tuple)):
            raise TypeError(f"put_nowait_batch() expects a list, got {type(items).__qualname__}")
        self._wait(self.actor.put_nowait_batch.remote(list(items)))

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if not block:
            return self.get_nowait()
        if timeout is not None and timeout < 0:
            raise ValueError("Queue.get(): timeout must be >= 0")
        return self._wait(self.actor.get.remote(timeout))

    async def get_async(self, block: bool = True, timeout: float | None = None) -> Any:
        ref = self.actor.get.remote(timeout) if block else self.actor.get_nowait.remote()
        try:
            return await ref
        except exceptions.TaskError as err:
            raise _plain(err) from None

    def get_nowait(self) -> Any:
        return self._wait(self.actor.get_nowait.remote())

    def get_nowait_batch(self, num_items: int) -> list:
        if not isinstance(num_items, int) or num_items < 0:
            raise ValueError(f"get_nowait_batch() expects an int >= 0, got {num_items!r}")
        return self._wait(self.actor.get_nowait_batch.remote(num_items))

    def shutdown(self, force: bool = False, grace_period_s: int = 5) -> None:
        """Stop the queue's actor; the queue cannot be used afterwards."""
        if self.actor is not None:
            toplevel.kill(self.actor)
            self.actor = None

    @staticmethod
    def _wait(ref) -> Any:
        try:
            return toplevel.get(ref)
        except exceptions.TaskError as err:
            raise _plain(err) from None

"""The bridge between user threads (and their event loops) and the core event loop.

Every process runs its runtime on one event loop in a daemon thread. User code on
other threads hands work over through :meth:`LoopThread.post`, which batches: many
posts between two turns of the loop cost one wake-up. Results come back through
waiters: a lock for blocking callers, an asyncio future (delivered in batches
too) for coroutines awaiting from any other loop.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable
from typing import Any

try:  # uvloop is a hard dependency on POSIX; fall back quietly elsewhere.
    import uvloop

    new_loop = uvloop.new_event_loop
except ImportError:  # pragma: no cover
    new_loop = asyncio.new_event_loop


class LoopThread:
    """An event loop running forever in a daemon thread, fed through a batched inbox."""

    def __init__(self, name: str) -> None:
        self.loop = new_loop()
        self._inbox: collections.deque = collections.deque()
        self._wake_pending = False
        self._draining = False
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread_id: int | None = None
        self.thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.thread_id = threading.get_ident()
        self.loop.call_soon(self._ready.set)
        try:
            self.loop.run_forever()
        finally:
            try:
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            except Exception:
                pass
            self.loop.close()

    def in_loop(self) -> bool:
        return threading.get_ident() == self.thread_id

    def post(self, fn: Callable, *args: Any) -> None:
        """Run ``fn(*args)`` on the loop soon; safe from any thread, in posting order."""
        self._inbox.append((fn, args))
        if not self._wake_pending:
            self._wake_pending = True
            try:
                self.loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # loop closed during shutdown
                self._wake_pending = False

    def _drain(self) -> None:
        # Clear the flag before emptying the inbox: a post that lands after the last
        # popleft sees the flag down and schedules another drain (no lost wake-up).
        self._wake_pending = False
        self._draining = True
        inbox = self._inbox
        try:
            while inbox:
                fn, args = inbox.popleft()
                try:
                    fn(*args)
                except Exception:  # a bug in one handler must not stop the loop
                    import logging

                    logging.getLogger("meshrt").exception("meshrt: error in core loop callback")
        finally:
            self._draining = False

    def caught_up(self) -> bool:
        """Everything posted so far has run (so a message sent now cannot overtake it)."""
        return not self._inbox and not self._draining

    def call_sync(self, fn: Callable, *args: Any, timeout: float | None = None) -> Any:
        """Run a plain ``fn(*args)`` on the loop and block the calling (non-loop) thread
        for its result: one turn of the loop, where run_sync's coroutine takes a task
        and several."""
        if self.in_loop():
            return fn(*args)
        done = threading.Lock()
        done.acquire()
        outcome: list = []

        def run() -> None:
            try:
                outcome.append((True, fn(*args)))
            except BaseException as err:  # noqa: BLE001 - re-raised in the caller
                outcome.append((False, err))
            finally:
                done.release()

        self.post(run)
        if not done.acquire(timeout=-1 if timeout is None else timeout):
            raise TimeoutError(f"meshrt's event loop did not run {getattr(fn, '__name__', fn)} "
                               f"within {timeout} s")
        ok, value = outcome[0]
        if not ok:
            raise value
        return value

    def run_sync(self, coro, timeout: float | None = None) -> Any:
        """Run a coroutine on the loop and block the calling (non-loop) thread for it."""
        if self.in_loop():
            coro.close()
            raise RuntimeError(
                "a blocking meshrt call was made from inside meshrt's own event loop; "
                "use the async form (await) instead"
            )
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self, join_timeout: float = 5.0) -> None:
        if self.loop.is_closed():
            return
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:
            return
        if not self.in_loop():
            self.thread.join(join_timeout)


class Wakeup:
    """A one-shot wake-up for a thread blocked in ``get``; firing twice is harmless."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def fire(self, _entry=None) -> None:
        try:
            self._lock.release()
        except RuntimeError:
            pass

    def wait(self, timeout: float | None) -> bool:
        if timeout is None:
            return self._lock.acquire()
        return self._lock.acquire(timeout=max(timeout, 0.0))


class CountdownWaiter:
    """Wakes a blocked thread once ``count`` distinct entries have resolved.

    ``get`` of many refs sleeps through all of them in one wake-up instead of one per
    ref (each wake-up is a GIL hand-off). Fires come from the core loop and, for an
    entry resolved while being registered, from the waiting thread itself: a small
    lock keeps the count exact, and firing the same entry twice counts once.
    ``fail_fast``: also wake at the first entry resolved with an error (a mesh call
    gathers like ``asyncio.gather``: the first failure at once, not after the slowest
    reply, which never comes when the others wait in a collective for the dead one).
    """

    __slots__ = ("_lock", "_done", "_remaining", "_fired", "_fail_fast", "_woken")

    def __init__(self, count: int, fail_fast: bool = False) -> None:
        self._lock = threading.Lock()
        self._done = threading.Lock()
        self._done.acquire()
        self._remaining = count
        self._fired: set[int] = set()
        self._fail_fast = fail_fast
        self._woken = False

    def _last(self, entry) -> bool:
        """Count ``entry`` once; True, once, for the entry that completes the count (or,
        with ``fail_fast``, the first one holding an error)."""
        with self._lock:
            if self._woken or entry.id in self._fired:
                return False
            self._fired.add(entry.id)
            self._remaining -= 1
            self._woken = self._remaining == 0 or (self._fail_fast and failed(entry))
            return self._woken

    def fire(self, entry) -> None:
        if self._last(entry):
            self._done.release()

    def wait(self, timeout: float | None) -> bool:
        if timeout is None:
            return self._done.acquire()
        return self._done.acquire(timeout=max(timeout, 0.0))


class AsyncBridge:
    """Resolves asyncio futures of one foreign event loop, many per wake-up."""

    __slots__ = ("loop", "_pending", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._pending: list = []
        self._scheduled = False

    def resolve(self, fut: asyncio.Future, entry) -> None:
        self._pending.append((fut, entry))
        if not self._scheduled:
            self._scheduled = True
            try:
                self.loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:  # that loop is closed; nobody is waiting any more
                self._scheduled = False
                self._pending.clear()

    def _deliver(self) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, []
        for fut, entry in pending:
            if not fut.done():
                fut.set_result(entry)


_bridges: dict[int, AsyncBridge] = {}
_bridges_lock = threading.Lock()


def bridge_for(loop: asyncio.AbstractEventLoop) -> AsyncBridge:
    """The (cached) bridge delivering to ``loop``; closed loops are forgotten."""
    key = id(loop)
    bridge = _bridges.get(key)
    if bridge is not None and bridge.loop is loop:
        return bridge
    with _bridges_lock:
        for k in [k for k, b in _bridges.items() if b.loop.is_closed()]:
            del _bridges[k]
        bridge = _bridges[key] = AsyncBridge(loop)
    return bridge


class AsyncWaiter:
    """Wakes a coroutine awaiting an entry from another thread's loop."""

    __slots__ = ("fut", "bridge")

    def __init__(self, fut: asyncio.Future, bridge: AsyncBridge | None) -> None:
        self.fut = fut
        self.bridge = bridge

    def fire(self, entry) -> None:
        if self.bridge is None:  # the awaiting loop is the core loop itself
            if not self.fut.done():
                self.fut.set_result(entry)
        else:
            self.bridge.resolve(self.fut, entry)


def failed(entry) -> bool:
    """The entry holds an error (a raised exception or a death), not a value."""
    return getattr(entry.payload, "is_error", False)


class AsyncCountdown(CountdownWaiter):
    """Resolves one asyncio future once ``count`` distinct entries have resolved: a
    coroutine gathering many refs wakes once, not once per ref."""

    __slots__ = ("fut", "bridge")

    def __init__(self, count: int, fut: asyncio.Future, bridge: AsyncBridge | None, fail_fast: bool = False) -> None:
        super().__init__(count, fail_fast)
        self.fut = fut
        self.bridge = bridge

    def fire(self, entry) -> None:
        if not self._last(entry):
            return
        if self.bridge is None:
            if not self.fut.done():
                self.fut.set_result(entry)
        else:
            self.bridge.resolve(self.fut, entry)


_BACKGROUND: set = set()


def in_background(coro) -> None:
    """Run ``coro`` on the running loop without awaiting it; kept referenced until it
    ends (asyncio holds tasks only weakly)."""
    task = asyncio.get_running_loop().create_task(coro)
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)

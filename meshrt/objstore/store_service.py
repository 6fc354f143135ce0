"""The host's store as its owner's event loop serves it (the controller's on the head
host, an agent's elsewhere), without that loop ever waiting on the disk.

Most store work is bookkeeping of microseconds: it is done on the loop, at once. Work
that must spill objects to make room, write an object to disk, or read a spilled one
back takes as long as the disk does; it runs on a thread of its own, one piece at a
time, and the loop goes on answering everyone else (scheduling, calls, other hosts).
So does work that finds the store's lock taken (by that thread between two disk
operations, or by a driver thread putting a value of its own).

Each process's store work is done in the order it came: once one piece of a process's
work waits, its later pieces queue behind it. Other processes' work goes on meanwhile
(the store holds no lock while the disk works: store.py), as their requests never
depend on the order of another's: a reader pins only what it holds a ref to, which
its owner does not free.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any

_NOT_YET = object()  # a quick attempt that found it needs the disk
_RETRY_S = 0.001  # a piece of work that found the lock taken while the thread works: tried again


class _Work:
    __slots__ = ("caller", "quick", "slow", "answer")

    def __init__(self, caller, quick: Callable[[], Any], slow: Callable[[], Any] | None, answer) -> None:
        self.caller = caller  # whose work (a process's id): theirs is done in order
        self.quick = quick  # -> a result, or _NOT_YET where it needs the disk (then ``slow``)
        self.slow = slow  # None: ``quick`` never needs the disk; it only waits for the lock
        self.answer = answer  # (ok, value) -> None, on the loop; or None


class StoreService:
    def __init__(self, store, loop: asyncio.AbstractEventLoop) -> None:
        self.store = store
        self.loop = loop
        self.queue: collections.deque[_Work] = collections.deque()  # work waiting, in the order it came
        self.busy: _Work | None = None  # the piece of work on the thread
        self._pumping = False
        self._retry: asyncio.TimerHandle | None = None
        self.thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="meshrt-store")
        self.closed = False
        self.loop_thread = threading.get_ident()  # (made on its loop)

    def on_loop(self) -> bool:
        return threading.get_ident() == self.loop_thread

    # -- what the owner asks (on its loop) -----------------------------------------------------

    def request(self, caller: int, method: str, args: tuple, answer) -> None:
        """A process's store request; ``answer(ok, value)`` is called on the loop."""
        store = self.store
        if method == "store_allocate":
            key, size, owner = args
            self._add(_Work(caller, lambda: _or_not_yet(store.allocate_at_once(key, size, owner, caller)),
                            lambda: store.allocate(key, size, owner, caller), answer))
        elif method == "store_pin":
            self._add(_Work(caller, lambda: _or_not_yet(store.pin_at_once(args[0], caller)),
                            lambda: store.pin(args[0], caller), answer))
        elif method == "store_summary":
            self._add(_Work(caller, store.summary, None, answer))
        else:
            answer(False, ValueError(f"unknown store request {method!r}"))

    def run(self, fn: Callable[[], Any], caller=None) -> None:
        """Bookkeeping with no answer (a seal, a free, a process's pins dropped): now, or
        in ``caller``'s turn. Off the loop (a driver thread), simply now: that thread may wait."""
        if self.on_loop():
            self._add(_Work(caller, fn, None, None))
        else:
            fn()

    def ask(self, caller: int, method: str, args: tuple) -> asyncio.Future:
        """request(), as a future the loop awaits."""
        fut = self.loop.create_future()
        self.request(caller, method, args, lambda ok, value: _settle(fut, ok, value))
        return fut

    def call(self, fn: Callable[[], Any]) -> asyncio.Future:
        """Bookkeeping whose result the loop awaits (usage, the objects' records)."""
        fut = self.loop.create_future()
        self._add(_Work(None, fn, None, lambda ok, value: _settle(fut, ok, value)))
        return fut

    def try_now(self, fn: Callable[[], Any], otherwise: Any = None) -> Any:
        """``fn()`` where the store is free at once, else ``otherwise`` (for work that
        is worth doing only now: a pin taken ahead for a reader, who otherwise asks)."""
        if self.queue or not self.store.lock.acquire(blocking=False):
            return otherwise
        try:
            return fn()
        finally:
            self.store.lock.release()

    def close(self) -> None:
        self.closed = True
        if self._retry is not None:
            self._retry.cancel()
        self.thread.shutdown(wait=True)

    # -- in order ----------------------------------------------------------------------------------

    def _add(self, work: _Work) -> None:
        self.queue.append(work)
        self._pump()

    def _pump(self) -> None:
        """Do what can be done now, in order; start the first piece that needs the disk
        on the thread if it is free; leave the rest queued, each behind its caller's."""
        if self._pumping:  # (an answer added work: the loop below reaches it)
            return
        self._pumping = True
        lock, kept, waiting = self.store.lock, collections.deque(), set()
        locked_out = False
        if self.busy is not None:
            waiting.add(self.busy.caller)
        try:
            while self.queue:
                work = self.queue.popleft()
                if work.caller in waiting:
                    kept.append(work)
                    continue
                if lock.acquire(blocking=False):
                    try:
                        result, ok = work.quick(), True
                    except Exception as err:  # noqa: BLE001 - handed to whoever asked
                        result, ok = err, False
                    finally:
                        lock.release()
                    if result is not _NOT_YET:
                        _answer(work, ok, result)
                        continue
                else:
                    locked_out = True
                if self.closed:
                    _answer(work, False, RuntimeError("the object store has shut down"))
                elif self.busy is None:
                    self.busy = work
                    waiting.add(work.caller)
                    done = self.loop.run_in_executor(self.thread, work.slow or work.quick)
                    done.add_done_callback(lambda fut, work=work: self._finished(work, fut))
                else:
                    kept.append(work)
                    waiting.add(work.caller)
        finally:
            self.queue = kept
            self._pumping = False
        if locked_out and kept and self._retry is None and not self.closed:
            self._retry = self.loop.call_later(_RETRY_S, self._retried)

    def _retried(self) -> None:
        self._retry = None
        self._pump()

    def _finished(self, work: _Work, fut: asyncio.Future) -> None:
        self.busy = None
        err = fut.exception() if not fut.cancelled() else RuntimeError("the object store has shut down")
        _answer(work, err is None, fut.result() if err is None else err)
        self._pump()


def _or_not_yet(value):
    return _NOT_YET if value is None else value


def _answer(work: _Work, ok: bool, value) -> None:
    if work.answer is not None:
        work.answer(ok, value)
    elif not ok:
        logging.getLogger("meshrt").warning("meshrt: object store bookkeeping failed: %r", value)


def _settle(fut: asyncio.Future, ok: bool, value) -> None:
    if fut.done():
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)

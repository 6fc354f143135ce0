"""Future: what every mesh adverb returns; ``await`` it in async code or ``.get()``.

It is lazy glue over object refs, so awaiting costs what awaiting the refs costs,
and a blocking ``get`` inside a running event loop warns, as ``meshrt.get`` does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import math
import numbers
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from ..objstore.serialization import owned_values


class Future:
    """A result on its way. ``await fut`` or ``fut.get(timeout=None)``; also a coroutine
    to asyncio (``asyncio.run(fut)``, ``asyncio.create_task(fut)``), as the ``async
    def`` methods of Monarch's meshes return (``logging_option``)."""

    __slots__ = ("_aget", "_get", "_done", "_value", "_error", "_steps")

    def __init__(self, aget: Callable[[], Awaitable[Any]], get: Callable[[float | None], Any]) -> None:
        self._aget = aget
        self._get = get
        self._done = False
        self._value = None
        self._error: BaseException | None = None
        self._steps = None  # (as a coroutine: its __await__, being stepped by asyncio)

    def get(self, timeout: float | None = None) -> Any:
        """Block until the result is here (raises what the remote side raised)."""
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)
                                    or not math.isfinite(timeout) or timeout < 0):
            raise ValueError(f"Future.get(timeout={timeout!r}): give a non-negative, finite number of seconds, "
                             f"or None to wait as long as it takes")
        if not self._done:
            from .._private.toplevel import _warn_if_in_event_loop

            _warn_if_in_event_loop("Future.get")
            try:
                with owned_values():  # (the value is the caller's own, as in Monarch: arrays writable)
                    value = self._get(timeout)
                self._settle(value, None)
            except Exception as err:  # noqa: BLE001 - kept and re-raised on every get
                if isinstance(err, TimeoutError):
                    raise
                self._settle(None, err)
        return self._result()

    def result(self, timeout: float | None = None) -> Any:
        """``get``, under concurrent.futures' name."""
        return self.get(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait as ``get`` does; the error the result failed with, or None."""
        try:
            self.get(timeout)
        except TimeoutError:
            raise
        except Exception as err:  # noqa: BLE001 - the answer itself
            return err
        return None

    def as_asyncio(self) -> asyncio.Future:
        """An ``asyncio.Future`` of the same result, on the running loop (for
        ``asyncio.wait``, callbacks ...)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError("as_asyncio() makes an asyncio future on the running loop: call it from async "
                               "code, or use .get() outside one") from None

        async def wait():
            return await self

        return loop.create_task(wait())

    def __await__(self):
        if not self._done:
            try:
                with owned_values():
                    value = yield from self._aget().__await__()
                self._settle(value, None)
            except Exception as err:  # noqa: BLE001
                self._settle(None, err)
        return self._result()

    # -- the coroutine protocol, for asyncio.run / create_task -----------------------------------

    def send(self, value):
        if self._steps is None:
            self._steps = self.__await__()
        return self._steps.send(value)

    def throw(self, typ, val=None, tb=None):
        if self._steps is None:
            self._steps = self.__await__()
        return self._steps.throw(typ, val, tb) if val is not None or tb is not None else self._steps.throw(typ)

    def close(self) -> None:
        if self._steps is not None:
            self._steps.close()

    def _settle(self, value, error) -> None:
        self._done = True
        self._value = value
        self._error = error

    def _result(self):
        if self._error is not None:
            raise self._error
        return self._value

    def __repr__(self) -> str:
        return f"<meshrt Future {'done' if self._done else 'pending'}>"


Coroutine.register(Future)


def from_concurrent(cf: concurrent.futures.Future) -> Future:
    """A Future over a concurrent.futures.Future filled by some other thread."""

    async def aget():
        if cf.done():  # settled already (a small copy done in the caller): no loop round trip
            return cf.result()
        return await asyncio.wrap_future(cf)

    def get(timeout):
        try:
            return cf.result(timeout)
        except concurrent.futures.TimeoutError:
            from ..exceptions import GetTimeoutError

            raise GetTimeoutError(f"Future.get() timed out after {timeout} s") from None

    return Future(aget, get)


def ready(value: Any) -> Future:
    async def aget():
        return value

    return Future(aget, lambda timeout: value)


def returns_future(function: Callable[..., Awaitable[Any]]) -> Callable[..., Future]:
    """Monarch's ``@returns_future``: calling the ``async def`` gives a Future instead of
    a coroutine. The call only takes a copy of the caller's context variables (so
    ``context()`` inside is the caller's); the body starts at the first ``await`` (on the
    awaiting loop) or ``.get()`` (on a loop of its own: this thread's, or a helper
    thread's inside a running loop), runs once, and every observer shares its outcome.
    A ``.get(timeout)`` that runs out cancels the body; cancelling an ``await`` cancels
    only that observer."""
    if not inspect.iscoroutinefunction(function):
        raise TypeError(f"@returns_future takes an async def function (put @staticmethod or @classmethod "
                        f"above it); {function!r} is not one")

    @functools.wraps(function)
    def call(*args, **kwargs) -> Future:
        body = _Body(function, args, kwargs)
        return Future(body.wait, body.run)

    return call


class _Body:
    """One run of a ``@returns_future`` body, started by whichever observer comes first."""

    def __init__(self, function, args: tuple, kwargs: dict) -> None:
        self.context = contextvars.copy_context()
        self.start = functools.partial(function, *args, **kwargs)
        self.outcome = concurrent.futures.Future()
        self.lock = threading.Lock()
        self.started = False

    def _claim(self) -> bool:
        with self.lock:
            first, self.started = not self.started, True
            return first

    async def wait(self) -> Any:
        if self._claim():
            task = asyncio.get_running_loop().create_task(self.start(), context=self.context)
            task.add_done_callback(self._settle)
        return await asyncio.shield(asyncio.wrap_future(self.outcome))

    def _settle(self, task: asyncio.Task) -> None:
        if task.cancelled():
            self.outcome.set_exception(asyncio.CancelledError())
        elif task.exception() is not None:
            self.outcome.set_exception(task.exception())
        else:
            self.outcome.set_result(task.result())

    def run(self, timeout: float | None) -> Any:
        if self._claim():
            try:
                asyncio.get_running_loop()
                in_loop = True
            except RuntimeError:
                in_loop = False
            if in_loop:  # (asyncio.run refuses to nest: the body gets a helper thread's loop)
                threading.Thread(target=self._run_here, args=(timeout,), daemon=True).start()
            else:
                self._run_here(timeout)
        try:
            return self.outcome.result(None if timeout is None else timeout + _GRACE_S)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"returns_future: the result was not here after {timeout} s") from None

    def _run_here(self, timeout: float | None) -> None:
        async def bounded():
            return await asyncio.wait_for(self.start(), timeout)

        try:
            self.outcome.set_result(self.context.run(asyncio.run, bounded()))
        except BaseException as err:  # noqa: BLE001 - the outcome every observer gets
            self.outcome.set_exception(TimeoutError(f"returns_future: the body ran past {timeout} s and was "
                                                    f"cancelled") if isinstance(err, asyncio.TimeoutError) else err)


_GRACE_S = 1.0  # (a body cancelled at its timeout takes a moment to say so)

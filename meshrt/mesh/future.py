"""Future: what every mesh adverb returns; ``await`` it in async code or ``.get()``.

It is lazy glue over object refs, so awaiting costs what awaiting the refs costs,
and a blocking ``get`` inside a running event loop warns, as ``meshrt.get`` does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from typing import Any


class Future:
    """A result on its way. ``await fut`` or ``fut.get(timeout=None)``."""

    __slots__ = ("_aget", "_get", "_done", "_value", "_error")

    def __init__(self, aget: Callable[[], Awaitable[Any]], get: Callable[[float | None], Any]) -> None:
        self._aget = aget
        self._get = get
        self._done = False
        self._value = None
        self._error: BaseException | None = None

    def get(self, timeout: float | None = None) -> Any:
        """Block until the result is here (raises what the remote side raised)."""
        if not self._done:
            from .._private.toplevel import _warn_if_in_event_loop

            _warn_if_in_event_loop("Future.get")
            try:
                self._settle(self._get(timeout), None)
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
                value = yield from self._aget().__await__()
                self._settle(value, None)
            except Exception as err:  # noqa: BLE001
                self._settle(None, err)
        return self._result()

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

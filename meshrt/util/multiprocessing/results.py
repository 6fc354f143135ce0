"""What a Pool call returns: an AsyncResult (apply_async, map_async, starmap_async) or an
IMapIterator (imap, imap_unordered), filled chunk by chunk by the pool's dispatcher
thread (dispatch.py) and read by the caller's thread, with multiprocessing's meanings."""

from __future__ import annotations

import collections
import logging
import threading
import time
from multiprocessing import TimeoutError
from typing import Any

log = logging.getLogger("meshrt")


class _Sink:
    """Chunks of one job arriving (``chunk_done``/``chunk_failed``, any order) and how
    many there are (``set_total``, once the job's input is used up)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._total: int | None = None
        self._arrived = 0

    def set_total(self, total: int) -> None:
        with self._cond:
            self._total = total
            self._settle()

    def chunk_done(self, index: int, values: list) -> None:
        with self._cond:
            self._arrived += 1
            self._take(index, values)
            self._settle()

    def chunk_failed(self, index: int, err: BaseException) -> None:
        with self._cond:
            self._arrived += 1
            self._take(index, err)
            self._settle()

    def _complete(self) -> bool:
        return self._total is not None and self._arrived >= self._total

    def _take(self, index: int, outcome: Any) -> None:  # (lock held)
        raise NotImplementedError

    def _settle(self) -> None:  # (lock held)
        self._cond.notify_all()

    def _wait(self, ready, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not ready():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            return True


class AsyncResult(_Sink):
    """``multiprocessing.pool.AsyncResult``: ``get(timeout)``, ``wait(timeout)``,
    ``ready()``, ``successful()``. The callback gets the result, the error_callback the
    first error (on the pool's dispatcher thread: keep them short)."""

    def __init__(self, single: bool, callback=None, error_callback=None) -> None:
        super().__init__()
        self._single = single
        self._callback = callback
        self._error_callback = error_callback
        self._chunks: dict[int, list] = {}
        self._error: BaseException | None = None
        self._done = False

    def _take(self, index: int, outcome: Any) -> None:
        if isinstance(outcome, BaseException):
            if self._error is None and not self._done:
                self._error = outcome  # (the first failure decides, as in multiprocessing)
                self._finish()
        elif not self._done:
            self._chunks[index] = outcome

    def _settle(self) -> None:
        if not self._done and self._complete():
            self._finish()
        self._cond.notify_all()

    def _finish(self) -> None:  # (lock held)
        self._done = True
        hook, arg = ((self._error_callback, self._error) if self._error is not None
                     else (self._callback, None))
        if hook is not None:
            if arg is None:
                arg = self._value()
            try:
                hook(arg)
            except Exception:  # noqa: BLE001 - a callback's error must not stop the pool
                log.exception("meshrt: a Pool callback raised")

    def _value(self) -> Any:
        values = [v for i in sorted(self._chunks) for v in self._chunks[i]]
        return values[0] if self._single else values

    def ready(self) -> bool:
        with self._cond:
            return self._done

    def successful(self) -> bool:
        with self._cond:
            if not self._done:
                raise ValueError(f"{self!r} is not ready; call successful() once ready() is True")
            return self._error is None

    def wait(self, timeout: float | None = None) -> None:
        self._wait(lambda: self._done, timeout)

    def get(self, timeout: float | None = None) -> Any:
        if not self._wait(lambda: self._done, timeout):
            raise TimeoutError(f"the pool's result was not ready within {timeout} s")
        with self._cond:
            if self._error is not None:
                raise self._error
            return self._value()


class IMapIterator(_Sink):
    """``imap``/``imap_unordered``: iterate, or ``next(timeout)``. A failed chunk
    raises its error where its results would have come; iterating on goes past it."""

    def __init__(self, ordered: bool) -> None:
        super().__init__()
        self._ordered = ordered
        self._chunks: dict[int, Any] = {}  # ordered: index -> values or error, until yielded
        self._ready: collections.deque = collections.deque()  # values (and errors) to yield, in order
        self._next_index = 0

    def _take(self, index: int, outcome: Any) -> None:
        if not self._ordered:
            self._queue(outcome)
            return
        self._chunks[index] = outcome
        while self._next_index in self._chunks:
            self._queue(self._chunks.pop(self._next_index))
            self._next_index += 1

    def _queue(self, outcome: Any) -> None:
        if isinstance(outcome, BaseException):
            self._ready.append(_Failed(outcome))
        else:
            self._ready.extend(outcome)

    def __iter__(self) -> IMapIterator:
        return self

    def __next__(self) -> Any:
        return self.next()

    def next(self, timeout: float | None = None) -> Any:
        if not self._wait(lambda: self._ready or self._complete(), timeout):
            raise TimeoutError(f"no result from the pool within {timeout} s")
        with self._cond:
            if not self._ready:
                raise StopIteration
            item = self._ready.popleft()
        if type(item) is _Failed:
            raise item.error
        return item


class _Failed:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error

"""A call made with ``num_returns="streaming"``: each value it yields goes to its caller
as it comes (the core's ``stream_item``), then its end or its error (``stream_end``)."""

from __future__ import annotations

import asyncio
import inspect
import os

from .. import exceptions as exc
from ..objstore.serialization import error_payload, serialize, system_error_payload
from . import call_payloads


def stream_sync(core, call, gen, interrupted: type) -> None:
    """On the thread that ran the call; ``interrupted``: the exception a cancel raises there."""
    index = 0
    try:
        for value in _as_iterator(gen, call.name):
            _item(core, call, index, value)
            index += 1
    except interrupted:
        _end(core, call, index, None, cancelled=True)
        return
    except BaseException as err:  # noqa: BLE001 - travels to the caller
        _end(core, call, index, err)
        return
    _end(core, call, index, None)


async def stream_async(core, call, agen) -> None:
    """On an async actor's loop: an async generator, or anything awaitable or iterable."""
    index = 0
    try:
        if hasattr(agen, "__aiter__"):
            async for value in agen:
                _item(core, call, index, value)
                index += 1
        else:
            for value in _as_iterator(await agen if inspect.isawaitable(agen) else agen, call.name):
                _item(core, call, index, value)
                index += 1
    except asyncio.CancelledError:
        _end(core, call, index, None, cancelled=True)
        return
    except BaseException as err:  # noqa: BLE001 - travels to the caller
        _end(core, call, index, err)
        return
    _end(core, call, index, None)


def _item(core, call, index: int, value) -> None:
    payload, held = serialize(value, call_payloads.place(core, call, index))
    core.io.post(core.stream_item, call, index, payload, held)


def _end(core, call, count: int, err: BaseException | None, cancelled: bool = False) -> None:
    """The stream's end after ``count`` values: complete, cancelled, or failed with ``err``."""
    if cancelled:
        error = system_error_payload(exc.TaskCancelledError(f"{call.task_id:x}"))
    else:
        error = error_payload(err, call.name, os.getpid(), 1) if err is not None else None
    core.io.post(core.stream_end, call, count, error)


def _as_iterator(obj, name: str):
    try:
        return iter(obj)
    except TypeError:
        raise TypeError(
            f"{name} was called with num_returns='streaming' (or 'dynamic') but returned "
            f"{type(obj).__name__}, not a generator or iterable"
        ) from None

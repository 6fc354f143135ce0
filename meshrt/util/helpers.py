"""``as_completed`` and ``map_unordered`` (Ray's ``ray.util`` helpers of those names):
results as they become ready, instead of ``get`` on the whole list or in a loop."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from .._private import toplevel


def as_completed(refs: Sequence, *, chunk_size: int = 10, yield_obj_refs: bool = False,
                 **wait_kwargs) -> Iterator[Any]:
    """The values of ``refs`` (or the refs themselves, with ``yield_obj_refs``) in batches
    of up to ``chunk_size`` as each batch is ready; within a batch, in the order given.
    ``wait_kwargs`` go to ``meshrt.wait`` (``timeout=``, ``fetch_local=``)."""
    _check(chunk_size, wait_kwargs, "as_completed")
    pending = list(refs)
    while pending:
        ready, pending = _batch(pending, chunk_size, yield_obj_refs, wait_kwargs)
        yield from ready


def map_unordered(fn, items: Iterable, *, backpressure_size: int | None = 100, chunk_size: int = 10,
                  yield_obj_refs: bool = False, **wait_kwargs) -> Iterator[Any]:
    """``fn.remote(item)`` for each item, yielding results as they are ready. At most
    ``backpressure_size`` calls are in flight (None: no limit): past that, it waits for
    ``chunk_size`` of them before submitting more."""
    if not hasattr(fn, "remote"):
        raise TypeError(f"map_unordered(fn, ...): fn must be a @meshrt.remote function (or an actor method); "
                        f"got {type(fn).__name__}")
    if backpressure_size is not None and (isinstance(backpressure_size, bool) or not isinstance(backpressure_size, int)
                                          or backpressure_size < 1):
        raise ValueError(f"map_unordered(backpressure_size=...): give a number >= 1, or None; got {backpressure_size!r}")
    _check(chunk_size, wait_kwargs, "map_unordered")
    limit = float("inf") if backpressure_size is None else backpressure_size
    pending: list = []
    for item in items:
        pending.append(fn.remote(item))
        if len(pending) >= limit:
            ready, pending = _batch(pending, chunk_size, yield_obj_refs, wait_kwargs)
            yield from ready
    yield from as_completed(pending, chunk_size=chunk_size, yield_obj_refs=yield_obj_refs, **wait_kwargs)


def _batch(pending: list, chunk_size: int, yield_obj_refs: bool, wait_kwargs: dict) -> tuple[list, list]:
    ready, rest = toplevel.wait(pending, num_returns=min(chunk_size, len(pending)), **wait_kwargs)
    return (ready if yield_obj_refs else toplevel.get(ready)), rest


def _check(chunk_size: Any, wait_kwargs: dict, call: str) -> None:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"{call}(chunk_size=...): give a number >= 1; got {chunk_size!r}")
    if "num_returns" in wait_kwargs:
        raise ValueError(f"{call}(num_returns=...): say how many to wait for at a time with chunk_size=")

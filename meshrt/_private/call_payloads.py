"""What an executed call carries in and out: its arguments taken from their payload,
its results packed into payloads (into store blocks when large, or lent: loans.py)."""

from __future__ import annotations

import inspect
import pickle
from typing import Any

from ..objstore.serialization import SHM_THRESHOLD, error_from_payload, serialize
from . import ids, loans


def arguments(call):
    """The call's argument payload, large ``bytes`` its caller lent read now and kept in
    ``call.borrowed``: one returned unchanged goes back as the caller's own loan. Raises
    the error its arguments became when reading them from another host failed
    (pulls.py), as it is: the caller gets that ObjectLostError, not the user's code's."""
    if getattr(call.args, "is_error", False):
        err = error_from_payload(call.args)
        err.__meshrt_plain__ = True
        raise err
    if getattr(call.args, "loans", None) is None:
        return call.args
    payload, call.borrowed = loans.borrow(call.args)
    return payload


def place(core, call, index: int):
    """Large results go straight into shared memory, owned by whoever receives them."""
    return core.placer(ids.object_id(call.task_id, index + 1), call.dest)


def _lender(core, call, result: Any):
    """A large ``bytes`` an actor returns to a caller on this host is lent, not
    stored: the caller reads it in one copy (loans.py)."""
    if type(result) is not bytes or len(result) < SHM_THRESHOLD or call.is_task:
        return None
    if not core.lends_bytes or call.dest in core.gone_peers or not core.same_host(call.dest):
        return None
    return loans.lender(call.dest, loans.MAX_RESULT_BYTES, call.borrowed)


def pack_results(core, call, result: Any):
    """(payloads, held refs) for what the call returned, as its ``num_returns`` says."""
    n = call.num_returns
    if n >= 1 and inspect.isgenerator(result):  # a generator with num_returns=N: its N values
        values = list(result)
        if len(values) != n:
            raise ValueError(f"{call.name} yielded {len(values)} value(s), but num_returns={n} expects {n}")
        result = values[0] if n == 1 else values
    if n == 1:
        payload, held = serialize(result, place(core, call, 0), _lender(core, call, result))
        return (payload,), held
    if n == 0:
        return (), None
    if not isinstance(result, (tuple, list)) or len(result) != n:
        raise ValueError(
            f"{call.name} returned {type(result).__name__}, but num_returns={n} expects "
            f"a tuple or list of {n} values"
        )
    payloads, held = [], []
    try:
        for i, value in enumerate(result):
            payload, refs = serialize(value, place(core, call, i))
            payloads.append(payload)
            held.extend(refs)
    except BaseException:
        for payload in payloads:  # (written for a result that will not be sent)
            core.release_payload(payload)
        raise
    return tuple(payloads), held


def may_retry(spec, err: BaseException) -> bool:
    """A task's error that its ``retry_exceptions`` allows, while attempts remain."""
    if not isinstance(err, Exception):
        return False
    if spec.max_retries >= 0 and spec.attempt >= spec.max_retries:
        return False
    allowed = spec.retry_exceptions
    if allowed is True:
        return True
    try:
        classes = pickle.loads(allowed)
    except Exception:  # noqa: BLE001 - (classes that cannot be loaded here allow nothing)
        return False
    return isinstance(err, classes)

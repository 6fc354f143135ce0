"""A message that cannot be pickled, made sendable by describing the errors inside it.

meshrt's own messages pickle, but an error they carry may not (an exception raised
while serving a request, holding a lock or a socket). Dropped, such a message would
leave its peer waiting for ever (a Response never comes); so the error goes as a
RuntimeError that names it instead.
"""

from __future__ import annotations

_MAX_TEXT = 2000


def errors_described(msg):
    """``msg`` with each exception inside it (nested messages and tuples too) replaced by
    a RuntimeError describing it; None when there is no exception to replace."""
    found, value = _described(msg)
    return value if found else None


def _described(value) -> tuple[bool, object]:
    if isinstance(value, BaseException):
        text = f"{type(value).__module__}.{type(value).__qualname__}: {value}"
        return True, RuntimeError(f"{text[:_MAX_TEXT]} (the original error could not be pickled to send "
                                  "it on, so this describes it)")
    if isinstance(value, tuple):
        parts = [_described(item) for item in value]
        if not any(found for found, _ in parts):
            return False, value
        items = [item for _, item in parts]
        return True, type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return False, value

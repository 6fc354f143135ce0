"""Ray's ``log_once``: library code that warns about something once per process, not on
every call (``if log_once("deprecated-x"): logger.warning(...)``)."""

from __future__ import annotations

import threading
import time

_PERIOD_S = 60.0
_seen: dict[str, float] = {}  # key -> when it last said True
_lock = threading.Lock()
_disabled = False
_periodic = False


def log_once(key: str) -> bool:
    """True the first time ``key`` is seen in this process (and, with periodic logging
    on, again once a minute); False after that, and always once disabled."""
    now = time.monotonic()
    with _lock:
        if _disabled:
            return False
        last = _seen.get(key)
        if last is not None and not (_periodic and now - last >= _PERIOD_S):
            return False
        _seen[key] = now
        return True


def disable_log_once_globally() -> None:
    """From now on log_once says False for every key (quiet runs, tests)."""
    global _disabled
    _disabled = True


def enable_periodic_logging() -> None:
    """log_once says True again for a key once a minute has passed."""
    global _periodic
    _periodic = True


def reset_log_once(key: str | None = None) -> None:
    """Forget ``key`` (or every key), so its next log_once says True."""
    with _lock:
        if key is None:
            _seen.clear()
        else:
            _seen.pop(key, None)

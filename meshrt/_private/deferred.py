"""Deferred: a reply that comes after the method returns.

An actor method may return a Deferred instead of a value; its call's reply is then
sent when the Deferred settles, from the thread that settles it, while the actor goes
on serving other calls (how a Monarch endpoint with ``explicit_response_port=True``
answers through its port later, or from another actor).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any


class Deferred:
    def __init__(self) -> None:
        self._future: concurrent.futures.Future = concurrent.futures.Future()

    def settle(self, ok: bool, value: Any) -> bool:
        """Settle once: ``(True, value)`` or ``(False, exception)``; False if already settled."""
        try:
            self._future.set_result((ok, value))
        except concurrent.futures.InvalidStateError:
            return False
        return True

    @property
    def settled(self) -> bool:
        return self._future.done()

    def then(self, callback: Callable[[bool, Any], None]) -> None:
        """``callback(ok, value)`` once settled (at once, on this thread, if it already is)."""
        self._future.add_done_callback(lambda f: callback(*f.result()))

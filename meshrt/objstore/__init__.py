"""Object storage: serialization, the per-process object table, and the value store.

``InProcessStore`` keeps values in the owner's memory. It is the one interface
through which values enter (``seal``) and leave (``free``) storage, so the
per-host shared-memory store plugs in here without touching the runtime.
"""

from __future__ import annotations

from .serialization import Payload


class InProcessStore:
    """Values live in the owner process's memory (the payload objects themselves)."""

    def seal(self, object_id: int, payload: Payload) -> Payload:
        """Take ownership of a freshly serialized value; returns what readers will see."""
        return payload

    def free(self, object_id: int) -> None:
        """The value is no longer referenced anywhere."""


__all__ = ["InProcessStore", "Payload"]

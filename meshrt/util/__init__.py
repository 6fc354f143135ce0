"""Ray-style helpers built on the public API: ActorPool, and a distributed Queue."""

from __future__ import annotations

from .actor_pool import ActorPool

__all__ = ["ActorPool", "queue"]

from . import queue  # noqa: E402

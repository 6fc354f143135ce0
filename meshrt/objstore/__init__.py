"""Object storage: serialization, the per-process object table, and the host's
shared-memory store (arena, allocator, spilling, pins).

The runtime touches storage through two calls on a process's store client: ``put``
(values whose buffers add up to ~100 KiB or more are written once into shared
memory) and ``free`` (the owner let go). Smaller values stay inline in messages
and in their owner's memory.
"""

from __future__ import annotations

from .serialization import Payload

__all__ = ["Payload"]

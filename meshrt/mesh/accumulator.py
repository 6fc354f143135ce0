"""Accumulator: fold the replies of a call to every actor into one value, as they come.

``Accumulator(mesh.count, 0, lambda total, n: total + n).accumulate()`` resolves to
the sum of every actor's reply (Monarch's name and meaning). Replies are combined in
the order they arrive, so ``combine`` should not care about order; the first failure
is raised.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..exceptions import GetTimeoutError
from .future import Future


class Accumulator:
    def __init__(self, endpoint, identity: Any, combine: Callable[[Any, Any], Any]) -> None:
        if not hasattr(endpoint, "stream"):
            raise TypeError(f"Accumulator(endpoint, identity, combine): give a mesh endpoint "
                            f"(mesh.method), got {type(endpoint).__name__}")
        if not callable(combine):
            raise TypeError(f"Accumulator(endpoint, identity, combine): combine must be callable "
                            f"(total, reply) -> total, got {type(combine).__name__}")
        self._endpoint = endpoint
        self._identity = identity
        self._combine = combine

    def accumulate(self, *args, **kwargs) -> Future:
        """Call every actor of the endpoint's mesh now; resolves to the folded replies."""
        replies = list(self._endpoint.stream(*args, **kwargs))  # (sent here; errors raise here)
        identity, combine = self._identity, self._combine

        async def aget():
            total = identity
            for reply in replies:
                total = combine(total, await reply)
            return total

        def get(timeout):
            deadline = None if timeout is None else time.monotonic() + timeout
            total = identity
            for reply in replies:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise GetTimeoutError(f"accumulate(): not every reply came within {timeout} s")
                total = combine(total, reply.get(left))
            return total

        return Future(aget, get)

    def __repr__(self) -> str:
        return f"<Accumulator over {self._endpoint!r}>"

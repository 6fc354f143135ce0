"""The port an ``@endpoint(explicit_response_port=True)`` method answers through.

As in Monarch, such an endpoint gets a port as its first argument and its reply is
what is sent there (its return value is dropped): now, later from another call, or
from another process the port was handed to. Sent here, it settles the call's
Deferred directly; pickled, it becomes an ordinary Port to a one-value channel of
this process, whose value is forwarded to the call on the actor's event loop.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from .._private.deferred import Deferred


class ResponsePort(Deferred):
    def __init__(self, loop: asyncio.AbstractEventLoop, where: str) -> None:
        super().__init__()
        self._loop = loop
        self._where = where  # "mesh.endpoint at Point(...)": how a failure sent here is named
        self._lock = threading.Lock()
        self._port = None

    def send(self, value: Any) -> None:
        """Reply to the call with ``value``."""
        if not self.settle(True, value):
            raise RuntimeError(f"the response port of {self._where} was already used: a call has one reply")

    def exception(self, err: BaseException) -> None:
        """Fail the call with ``err``."""
        try:
            err.__meshrt_where__ = self._where
        except (AttributeError, TypeError):
            pass
        if not self.settle(False, err):
            raise RuntimeError(f"the response port of {self._where} was already used: a call has one reply")

    def __del__(self) -> None:
        # Dropped unsent (and never handed on): the call would wait for ever; fail it.
        try:
            if not self.settled and self._port is None:
                self.settle(False, RuntimeError(
                    f"{self._where} returned without sending a reply on its response port, and kept no "
                    f"reference to it: send on the port (port.send(value)) or keep it to send later"))
        except Exception:  # noqa: BLE001 - (interpreter shutdown)
            pass

    def __reduce__(self):
        return self._forwarding_port().__reduce__()

    def _forwarding_port(self):
        with self._lock:
            if self._port is None:
                from .channel import Channel

                port, receiver = Channel.open(once=True)
                asyncio.run_coroutine_threadsafe(self._forward(receiver), self._loop)
                self._port = port
            return self._port

    async def _forward(self, receiver) -> None:
        try:
            value = await receiver.recv()
        except BaseException as err:  # noqa: BLE001 - what Port.exception sent
            self.settle(False, err)
        else:
            self.settle(True, value)

    def __repr__(self) -> str:
        return f"<response port of {self._where}>"

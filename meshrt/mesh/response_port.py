"""The port an ``@endpoint(explicit_response_port=True)`` method answers through.

As in Monarch, such an endpoint gets a port as its first argument and its reply is
what is sent there (its return value is dropped): now, later from another call, or
from another process the port was handed to. Sent here, it settles the call's
Deferred directly; pickled, it becomes an ordinary Port to a one-value channel of
this process, whose value is forwarded to the call on the actor's event loop. Once
the endpoint and every process the port went to have dropped it (or died) without a
reply, the call fails, as it does for a port dropped where it was given.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from typing import Any

from .._private import ids, state
from .._private.deferred import Deferred
from .._private.portal import in_background
from .._private.refs import ObjectRef
from ..objstore.serialization import error_payload


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
        # (Handed on: the copies decide, see _life_ref.)
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
                from .channel import Channel, Port

                port, receiver = Channel.open(once=True)
                # The forwarding task (kept until it ends: asyncio holds tasks weakly) holds
                # the call's future, not this port: dropped by the endpoint, this port lets
                # go of its life ref (_life_ref).
                self._loop.call_soon_threadsafe(in_background, _forward(self._future, receiver))
                self._port = Port(port._owner, port._port_id, port._host, _life_ref(port._port_id, self._where))
            return self._port

    def __repr__(self) -> str:
        return f"<response port of {self._where}>"


async def _forward(future: concurrent.futures.Future, receiver) -> None:
    """Settle the call with what its handed-on port received."""
    try:
        outcome = (True, await receiver.recv())
    except BaseException as err:  # noqa: BLE001 - what Port.exception sent
        outcome = (False, err)
    try:
        future.set_result(outcome)
    except concurrent.futures.InvalidStateError:  # (answered here first)
        pass


def _life_ref(port_id: int, where: str):
    """A ref this process owns, carried by every copy of the handed-on port (and held
    by the endpoint's own port object): once the endpoint and every process a copy
    went to have dropped theirs, or died, without a reply, none can come, and the
    call fails instead of waiting for ever. The ownership protocol counts the copies
    (objstore/table.py): a value sent before a copy is dropped arrives first."""
    core = state.core()
    entry = core.table.owned(ids.new_put_id())  # (before the ref counts it, as for actor handles)

    def abandoned() -> None:  # (core loop; a reply that came first has closed the port)
        err = RuntimeError(f"{where}: its response port was handed on, and every copy of it was dropped "
                           f"(or its process died) without a reply; send on the port (port.send(value)) "
                           f"or fail the call with port.exception(err)")
        core.send_port(core.worker_id, port_id, error_payload(err, where, os.getpid()), None)

    entry.on_release = abandoned
    return ObjectRef(entry.id, core.worker_id, core.table.deltas)

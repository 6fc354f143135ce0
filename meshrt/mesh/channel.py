"""Channel.open() -> (Port, PortReceiver): replies sent later, or from elsewhere.

The receiver lives in the process that opened the channel; the Port is a small
picklable address (process + port id) that any process can send through, any
number of times. Values travel like call results: small ones inline, large ones
written once into the shared-memory store, owned by the receiving process.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
import os
import threading
import weakref
from typing import Any

from .._private import state
from ..objstore.serialization import error_payload, serialize
from .future import Future

_port_ids = itertools.count(1)


class Port:
    """Where to send: ``port.send(value)`` or ``port.exception(err)``, from any process."""

    __slots__ = ("_owner", "_port_id", "_host")

    def __init__(self, owner: int, port_id: int, host: int = 0) -> None:
        self._owner = owner
        self._port_id = port_id
        self._host = host  # the receiver's host: a sender on another one cannot use its own store

    def send(self, value: Any) -> None:
        core = state.core()
        core.note_peer_host(self._owner, self._host)
        try:
            payload, held = serialize(value, core.placer(None, self._owner))
        except TypeError as err:
            raise TypeError(f"Port.send(): {err}") from None
        core.io.post(core.send_port, self._owner, self._port_id, payload, held)

    def exception(self, err: BaseException) -> None:
        """Make the receiver's next ``recv()`` raise ``err``."""
        core = state.core()
        core.io.post(core.send_port, self._owner, self._port_id, error_payload(err, "Port.exception", os.getpid()),
                     None)

    def __reduce__(self):
        return (Port, (self._owner, self._port_id, self._host))

    def __repr__(self) -> str:
        return f"<Port {self._port_id} of worker {self._owner}>"


class PortReceiver:
    """The receiving end: ``await receiver.recv()`` or ``receiver.recv().get(timeout)``,
    in the order values arrived from each sender."""

    def __init__(self, port_id: int) -> None:
        self._port_id = port_id
        self._lock = threading.Lock()
        self._ready: collections.deque = collections.deque()
        self._waiting: collections.deque = collections.deque()

    def _deliver(self, ref) -> None:  # core loop
        with self._lock:
            while self._waiting:
                cf = self._waiting.popleft()
                if cf.set_running_or_notify_cancel():
                    cf.set_result(ref)
                    return
            self._ready.append(ref)

    def _next_ref(self) -> concurrent.futures.Future:
        cf: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._ready:
                cf.set_result(self._ready.popleft())
            else:
                self._waiting.append(cf)
        return cf

    def recv(self) -> Future:
        """The next value (raises what ``Port.exception`` sent)."""
        cf = self._next_ref()

        async def aget():
            ref = await asyncio.wrap_future(cf)
            return await ref

        def get(timeout):
            try:
                ref = cf.result(timeout)
            except concurrent.futures.TimeoutError:
                cf.cancel()
                from ..exceptions import GetTimeoutError

                raise GetTimeoutError(f"PortReceiver.recv() got nothing within {timeout} s") from None
            return state.core().get([ref], None)[0]

        return Future(aget, get)

    def close(self) -> None:
        core = state.core_or_none()
        if core is not None:
            core.io.post(core.ports.pop, self._port_id, None)

    def __repr__(self) -> str:
        return f"<PortReceiver {self._port_id}>"


class Channel:
    @staticmethod
    def open() -> tuple[Port, PortReceiver]:
        """A new (Port, PortReceiver) pair; the receiver stays in this process."""
        core = state.core()
        port_id = next(_port_ids)
        receiver = PortReceiver(port_id)
        deliver = weakref.WeakMethod(receiver._deliver)

        def on_value(ref, deliver=deliver):
            target = deliver()
            if target is not None:
                target(ref)

        core.io.post(core.ports.__setitem__, port_id, on_value)
        weakref.finalize(receiver, _forget, core, port_id)
        return Port(core.worker_id, port_id, core.host_id), receiver


def _forget(core, port_id: int) -> None:
    if not core.closed:
        core.io.post(core.ports.pop, port_id, None)

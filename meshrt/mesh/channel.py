"""Channel.open() -> (Port, PortReceiver): replies sent later, or from elsewhere.

The receiver lives in the process that opened the channel; the Port is a small
picklable address (process + port id) that any process can send through, any
number of times (once, with ``Channel.open(once=True)``). Values travel like call
results: small ones inline, large ones written once into the shared-memory store,
owned by the receiving process. Each carries the sender's message rank, which a
ranked receiver (``receiver.ranked()``, ``Channel.open_ranked()``) pairs it with.
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

    __slots__ = ("_owner", "_port_id", "_host", "_life", "_once", "_used")

    def __init__(self, owner: int, port_id: int, host: int = 0, life=None, once: bool = False) -> None:
        self._owner = owner
        self._port_id = port_id
        self._host = host  # the receiver's host: a sender on another one cannot use its own store
        # (a response port handed on: a ref its receiver owns, counted in every process a
        # copy goes to; when the last copy is dropped, the receiver learns the reply never comes)
        self._life = life
        self._once = once  # Channel.open(once=True): this port sends one value (Monarch's OncePort)
        self._used = False

    def _use(self, what: str) -> None:
        if self._once:
            if self._used:
                raise RuntimeError(f"Port.{what}() again on a port of Channel.open(once=True): it takes one value "
                                   "(Monarch's 'OncePortRef already used'); open a channel without once=True")
            self._used = True

    def send(self, value: Any) -> None:
        """Send ``value`` to the receiver (tagged with this code's message rank)."""
        self._use("send")
        core = state.core()
        core.note_peer_host(self._owner, self._host)
        try:
            payload, held = serialize(value, core.placer(None, self._owner))
        except TypeError as err:
            raise TypeError(f"Port.send(): {err}") from None
        # (the port's own ref stays held until the value has left: its release follows the value)
        core.io.post(core.send_port, self._owner, self._port_id, payload, (held, self._life), _sender_rank())

    def exception(self, err: BaseException) -> None:
        """Make the receiver's next ``recv()`` raise ``err``."""
        self._use("exception")
        core = state.core()
        where = getattr(err, "__meshrt_where__", None) or "Port.exception"  # (an endpoint's, by ProcHost)
        core.io.post(core.send_port, self._owner, self._port_id, error_payload(err, where, os.getpid()),
                     self._life, _sender_rank())

    def __reduce__(self):
        return (Port, (self._owner, self._port_id, self._host, self._life, self._once))

    def __repr__(self) -> str:
        return f"<Port {self._port_id} of worker {self._owner}>"


class PortReceiver:
    """The receiving end: ``await receiver.recv()`` or ``receiver.recv().get(timeout)``,
    in the order values arrived from each sender."""

    def __init__(self, port_id: int, once: bool = False) -> None:
        self._port_id = port_id
        self._once = once
        self._taken = 0  # recv() calls made (a once-receiver has one value to give)
        self._lock = threading.Lock()
        self._ready: collections.deque = collections.deque()  # (ref, rank) pairs
        self._waiting: collections.deque = collections.deque()

    def _deliver(self, ref, rank: int) -> None:  # core loop
        with self._lock:
            while self._waiting:
                cf = self._waiting.popleft()
                if cf.set_running_or_notify_cancel():
                    cf.set_result((ref, rank))
                    return
            self._ready.append((ref, rank))

    def _next_ref(self) -> concurrent.futures.Future:
        cf: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._once and self._taken:
                raise RuntimeError("recv() again on a receiver opened with Channel.open(once=True): it has "
                                   "one value to give; open a channel without once=True for more")
            self._taken += 1
            if self._ready:
                cf.set_result(self._ready.popleft())
            else:
                self._waiting.append(cf)
        return cf

    def recv(self) -> Future:
        """The next value (raises what ``Port.exception`` sent)."""
        return self._recv(ranked=False)

    def _recv(self, ranked: bool) -> Future:
        cf = self._next_ref()

        def value(rank: int, value: Any) -> Any:
            return (rank, value) if ranked else value

        async def aget():
            ref, rank = await asyncio.wrap_future(cf)
            return value(rank, await ref)

        def get(timeout):
            try:
                ref, rank = cf.result(timeout)
            except concurrent.futures.TimeoutError:
                cf.cancel()
                from ..exceptions import GetTimeoutError

                raise GetTimeoutError(f"PortReceiver.recv() got nothing within {timeout} s") from None
            return value(rank, state.core().get([ref], None)[0])

        return Future(aget, get)

    def ranked(self) -> RankedPortReceiver:
        """This receiver, giving ``(rank, value)``: the rank of the actor that sent it
        (its message rank; 0 from outside a mesh actor), as in Monarch."""
        return RankedPortReceiver(self)

    def close(self) -> None:
        core = state.core_or_none()
        if core is not None:
            core.io.post(core.ports.pop, self._port_id, None)

    def __repr__(self) -> str:
        return f"<PortReceiver {self._port_id}>"


class RankedPortReceiver:
    """A view of a PortReceiver whose ``recv()`` gives ``(sender's rank, value)``."""

    def __init__(self, receiver: PortReceiver) -> None:
        self._receiver = receiver  # (keeps it, and so its port, alive)

    def recv(self) -> Future:
        return self._receiver._recv(ranked=True)

    def ranked(self) -> RankedPortReceiver:
        return self

    def close(self) -> None:
        self._receiver.close()

    def __repr__(self) -> str:
        return f"<RankedPortReceiver {self._receiver._port_id}>"


class Channel:
    @staticmethod
    def open(once: bool = False) -> tuple[Port, PortReceiver]:
        """A new (Port, PortReceiver) pair; the receiver stays in this process. ``once``:
        the receiver takes one value (later sends are dropped, as to a closed receiver)."""
        if not isinstance(once, bool):
            raise TypeError(f"Channel.open(once=...): give True or False, got {once!r}")
        core = state.core()
        port_id = next(_port_ids)
        receiver = PortReceiver(port_id, once)
        deliver = weakref.WeakMethod(receiver._deliver)

        def on_value(ref, rank, deliver=deliver):
            if once:  # (the core loop: nothing else is delivered here after this one)
                core.ports.pop(port_id, None)
            target = deliver()
            if target is not None:
                target(ref, rank)

        core.io.post(core.ports.__setitem__, port_id, on_value)
        weakref.finalize(receiver, _forget, core, port_id)
        return Port(core.worker_id, port_id, core.host_id, once=once), receiver

    @staticmethod
    def open_ranked(once: bool = False) -> tuple[Port, RankedPortReceiver]:
        """``Channel.open()`` with a ranked receiver: ``recv()`` gives ``(rank, value)``."""
        port, receiver = Channel.open(once)
        return port, receiver.ranked()


class PortKeeper:
    """Keeps a handler port (``open_handler``) open: dropping it closes the port."""

    __slots__ = ("__weakref__",)


def open_handler(handle) -> tuple[Port, PortKeeper]:
    """A Port whose values go to ``handle(value)`` (on whichever thread resolves them),
    with no receiver to read: meshrt's own listeners (supervision.failure_port)."""
    core = state.core()
    port_id = next(_port_ids)

    def on_value(ref, _rank):
        ref.future().add_done_callback(lambda done: _handled(handle, done))

    core.io.post(core.ports.__setitem__, port_id, on_value)
    keeper = PortKeeper()
    weakref.finalize(keeper, _forget, core, port_id)
    return Port(core.worker_id, port_id, core.host_id), keeper


def _handled(handle, done: concurrent.futures.Future) -> None:
    try:
        handle(done.result())
    except Exception:  # noqa: BLE001 - a listener's failure must not end the loop that called it
        import logging

        logging.getLogger("meshrt").exception("meshrt: a port handler failed")


def _sender_rank() -> int:
    from .actor import context

    return context().message_rank.rank


def _forget(core, port_id: int) -> None:
    if not core.closed:
        core.io.post(core.ports.pop, port_id, None)

"""Connections between meshrt processes: token handshake, then framed message batches.

Handshake (before a single byte is unpickled, in either direction)::

    server -> client   MAGIC + server_nonce(32)
    client -> server   client_nonce(32) + HMAC(token, "client" + server_nonce + client_nonce)
    server -> client   HMAC(token, "server" + client_nonce + server_nonce)

A peer that fails it, stalls in it, or later sends a malformed frame is dropped and
logged; the process keeps serving everyone else.

Frame: ``<u32 header_len><u32 nbufs><u64 len>*nbufs`` + header + buffers. The header
is one pickled *list* of messages (every ``send`` made during one turn of the event
loop is coalesced into one frame); large buffers inside payloads travel out of band
and are received straight into a buffer of their own, never copied through the
small-message buffer.

Addresses: ``unix:@name`` (Linux abstract socket: nothing on disk to clean up),
``unix:/path`` and ``tcp:host:port``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import pickle
import secrets
import socket
import struct
import threading
import weakref
from collections.abc import Callable
from typing import Any

from . import addresses
from .unpicklable import errors_described

log = logging.getLogger("meshrt.wire")

MAGIC = b"MESHRT1"
_NONCE = 32
_MAC = 32
HANDSHAKE_TIMEOUT_S = 10.0
_PREFIX = struct.Struct("<II")
_SMALL_FRAME = 1 << 20  # frames larger than this get a buffer of their own
_INBAND_LIMIT = 64 * 1024
_MAX_IOV = 512  # pieces one writev from a thread may take (Linux allows 1024)
_MAX_HEADER = 1 << 30


def _mac(token: bytes, label: bytes, a: bytes, b: bytes) -> bytes:
    return hmac.new(token, label + a + b, hashlib.sha256).digest()


class Connection(asyncio.BufferedProtocol):
    """One authenticated, framed, bidirectional message stream.

    ``on_messages(conn, msgs)`` gets each received batch in order; ``on_close(conn,
    exc)`` is called once when the stream ends. ``send`` only queues: the batch is
    pickled and written once per event-loop turn.
    """

    def __init__(
        self,
        token: bytes,
        server_side: bool,
        on_open: Callable[[Connection], Any] | None = None,
        on_messages: Callable[[Connection, list], Any] | None = None,
        on_close: Callable[[Connection, BaseException | None], Any] | None = None,
    ) -> None:
        self._token = token
        self.server_side = server_side
        self.on_open = on_open
        self.on_messages = on_messages
        self.on_close = on_close
        self.peer_id: int | None = None
        self.peer_pid: int | None = None
        self.peer_address: str | None = None
        self.frames_in = 0  # counted for tests and stats: fan-out shows here
        self.frames_out = 0
        self.frames_handled = 0  # frames whose messages on_messages has taken (wait_handled)
        self._handled_waiters: list = []  # (count, threading.Event) of wait_handled
        self._hlock = threading.Lock()
        self.bytes_out = 0
        self.bytes_in = 0  # counted when a frame's header arrives
        self.transport: asyncio.Transport | None = None
        self.open = False
        self.closed = False
        self._loop = asyncio.get_running_loop()
        self._outbox: list = []
        self._flush_pending = False
        # Writes happen on the loop (_flush) or, for send_from_thread, on the calling
        # thread: the lock keeps frames whole; _stalled is the unsent tail of a frame
        # written from a thread, which the loop writes before anything else.
        self._wlock = threading.Lock()
        self._stalled: list | None = None
        self._fd: int | None = None
        self._closing = False  # close() or abort() was called
        # receive state
        self._buf = bytearray(256 * 1024)
        self._start = 0
        self._end = 0
        self._big: bytearray | None = None  # a large frame, received in place
        self._big_filled = 0
        self._big_layout: tuple | None = None
        self._hs_state = 0
        self._nonce = secrets.token_bytes(_NONCE)
        self._peer_nonce = b""
        self._hs_timer: asyncio.TimerHandle | None = None
        self._close_reason: BaseException | None = None

    # -- asyncio protocol ------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        # Our own descriptor of the socket for send_from_thread: the loop's may be closed
        # (and its number reused by another file) before connection_lost tells us.
        sock = transport.get_extra_info("socket")
        try:
            self._fd = os.dup(sock.fileno()) if sock is not None else None
        except OSError:
            self._fd = None
        self._hs_timer = self._loop.call_later(HANDSHAKE_TIMEOUT_S, self._handshake_timeout)
        if self.server_side:
            transport.write(MAGIC + self._nonce)

    def connection_lost(self, exc) -> None:
        with self._wlock:
            self.closed = True
            self.open = False
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
        if self._handled_waiters:
            self._wake_handled()
        if self._hs_timer is not None:
            self._hs_timer.cancel()
        if self.on_close is not None:
            cb, self.on_close = self.on_close, None
            cb(self, self._close_reason or exc)

    def get_buffer(self, sizehint: int):
        if self._big is not None:
            return memoryview(self._big)[self._big_filled :]
        free = len(self._buf) - self._end
        if free < 64 * 1024:
            pending = self._end - self._start
            if self._start and pending < len(self._buf) // 2:
                self._buf[:pending] = self._buf[self._start : self._end]
            else:
                grown = bytearray(max(2 * len(self._buf), pending + 256 * 1024))
                grown[:pending] = self._buf[self._start : self._end]
                self._buf = grown
            self._start, self._end = 0, pending
        return memoryview(self._buf)[self._end :]

    def progress(self) -> tuple:
        """Changes whenever bytes arrive, even inside one long frame (heartbeat.py)."""
        return self.bytes_in, self._big_filled, self._end

    def buffer_updated(self, nbytes: int) -> None:
        try:
            if self._big is not None:
                self._big_filled += nbytes
                if self._big_filled == len(self._big):
                    big, layout = self._big, self._big_layout
                    self._big = self._big_layout = None
                    self._deliver(big, layout)
                return
            self._end += nbytes
            if self._hs_state < 3:
                self._handshake_step()
                if self._hs_state < 3:
                    return
            self._parse()
        except _Reject as why:
            self._reject(str(why))
        except Exception as exc:  # a malformed frame: drop this peer, keep serving
            self._reject(f"malformed frame ({type(exc).__name__}: {exc})")

    def eof_received(self):
        return False

    # -- handshake -------------------------------------------------------------------

    def _take(self, n: int) -> bytes | None:
        if self._end - self._start < n:
            return None
        data = bytes(self._buf[self._start : self._start + n])
        self._start += n
        return data

    def _handshake_step(self) -> None:
        if self.server_side:
            if self._hs_state == 0:
                got = self._take(_NONCE + _MAC)
                if got is None:
                    return
                self._peer_nonce, mac = got[:_NONCE], got[_NONCE:]
                if not hmac.compare_digest(mac, _mac(self._token, b"client", self._nonce, self._peer_nonce)):
                    raise _Reject("it failed the token handshake (wrong or missing MESHRT_TOKEN)")
                self.transport.write(_mac(self._token, b"server", self._peer_nonce, self._nonce))
                self._opened()
        else:
            if self._hs_state == 0:
                got = self._take(len(MAGIC) + _NONCE)
                if got is None:
                    return
                if not got.startswith(MAGIC):
                    raise _Reject("it is not a meshrt endpoint")
                self._peer_nonce = got[len(MAGIC) :]
                self.transport.write(self._nonce + _mac(self._token, b"client", self._peer_nonce, self._nonce))
                self._hs_state = 1
            if self._hs_state == 1:
                got = self._take(_MAC)
                if got is None:
                    return
                if not hmac.compare_digest(got, _mac(self._token, b"server", self._nonce, self._peer_nonce)):
                    raise _Reject("the server failed the token handshake (wrong MESHRT_TOKEN?)")
                self._opened()

    def _opened(self) -> None:
        self._hs_state = 3
        self.open = True
        if self._hs_timer is not None:
            self._hs_timer.cancel()
            self._hs_timer = None
        if self.on_open is not None:
            self.on_open(self)
        if self._outbox and not self._flush_pending:
            self._flush_pending = True
            self._loop.call_soon(self._flush)

    def _handshake_timeout(self) -> None:
        if not self.open and not self.closed:
            self._reject("it did not finish the token handshake in time")

    def _reject(self, why: str) -> None:
        peer = self._peer_name()
        log.warning("meshrt: dropped connection from %s: %s", peer, why)
        from ..exceptions import AuthenticationError

        self._close_reason = AuthenticationError(f"connection to {peer} dropped: {why}")
        self.abort()

    def _peer_name(self) -> str:
        if self.peer_id is not None:
            return f"worker {self.peer_id} (pid {self.peer_pid})"
        try:
            name = self.transport.get_extra_info("peername") if self.transport else None
        except Exception:
            name = None
        return str(name) if name else "a local process"

    # -- frames ----------------------------------------------------------------------

    def _parse(self) -> None:
        buf = self._buf
        while True:
            avail = self._end - self._start
            if avail < 8:
                break
            hlen, nbufs = _PREFIX.unpack_from(buf, self._start)
            if hlen > _MAX_HEADER or nbufs > 4096:
                raise _Reject("frame header too large")
            plen = 8 + 8 * nbufs
            if avail < plen:
                break
            lens = struct.unpack_from(f"<{nbufs}Q", buf, self._start + 8) if nbufs else ()
            total = plen + hlen + sum(lens)
            self.bytes_in += total
            if total > _SMALL_FRAME and avail < total:
                # Receive the rest of this frame straight into a buffer of its own.
                body = bytearray(total - plen)
                have = avail - plen
                body[:have] = buf[self._start + plen : self._end]
                self._start = self._end = 0
                self._big, self._big_filled, self._big_layout = body, have, (hlen, lens)
                return
            if avail < total:
                break
            body_start = self._start + plen
            self._start += total
            if lens:
                body = bytes(buf[body_start : body_start + total - plen])
                self._deliver(body, (hlen, lens))
            else:
                msgs = pickle.loads(memoryview(buf)[body_start : body_start + hlen])
                self._dispatch(msgs)
            if self.closed:
                return
        if self._start == self._end:
            self._start = self._end = 0

    def _deliver(self, body, layout) -> None:
        hlen, lens = layout
        view = memoryview(body)
        bufs = []
        at = hlen
        for n in lens:
            bufs.append(view[at : at + n])
            at += n
        msgs = pickle.loads(view[:hlen], buffers=bufs)
        self._dispatch(msgs)

    def _dispatch(self, msgs: list) -> None:
        if not isinstance(msgs, list):
            raise _Reject("frame is not a message batch")
        self.frames_in += 1
        try:
            if self.on_messages is not None:
                self.on_messages(self, msgs)
        finally:
            self.frames_handled += 1
            if self._handled_waiters:
                self._wake_handled()

    def wait_handled(self, count: int, timeout: float) -> bool:
        """Any thread but the loop's: wait until ``on_messages`` has taken the first
        ``count`` frames that came here (or the connection ended); False on timeout."""
        if self.frames_handled >= count or self.closed:
            return True
        entry = (count, threading.Event())
        with self._hlock:
            self._handled_waiters.append(entry)
        # (checked again after joining: the loop counts, then looks for waiters)
        if self.frames_handled >= count or self.closed:
            self._wake_handled()
            return True
        if entry[1].wait(timeout):
            return True
        with self._hlock:  # (a later call waits afresh)
            if entry in self._handled_waiters:
                self._handled_waiters.remove(entry)
        return False

    def _wake_handled(self) -> None:
        with self._hlock:
            waiters, self._handled_waiters = self._handled_waiters, []
            for entry in waiters:
                if entry[0] <= self.frames_handled or self.closed:
                    entry[1].set()
                else:
                    self._handled_waiters.append(entry)

    # -- sending ---------------------------------------------------------------------

    def send(self, msg) -> None:
        """Queue ``msg``; all messages queued in one loop turn go out as one frame."""
        if self.closed:
            return
        self._outbox.append(msg)
        if not self._flush_pending and self.open:
            self._flush_pending = True
            self._loop.call_soon(self._flush)

    def send_from_thread(self, *msgs) -> None:
        """``send`` for a thread other than the loop's (an actor's reply from the thread
        that ran the call). When nothing is queued ahead, the messages are written at
        once, as one frame, from this thread: the loop is not woken, which on a small
        machine costs more than the write itself. Otherwise they queue behind the others."""
        with self._wlock:
            if self.closed or self._closing:
                return
            if (self.open and self._fd is not None and not self._outbox and not self._flush_pending
                    and self._stalled is None and self.transport.get_write_buffer_size() == 0):
                chunks = self._frame(list(msgs))
                written = 0
                if len(chunks) <= _MAX_IOV:  # (longer frames: the loop's transport splits them)
                    try:
                        written = os.writev(self._fd, chunks)
                    except OSError:  # full, interrupted, or the peer is gone: the loop
                        written = 0  # writes it, or reports the error and closes
                rest = _unsent(chunks, written)
                if rest:
                    self._stalled = rest
                    self._schedule_flush()
                return
            self._outbox.extend(msgs)
            if not self._flush_pending and self.open:
                self._schedule_flush()

    def frames_sent_if_idle(self) -> int | None:
        """Nothing queued or half-written: how many frames went out so far (a message sent
        another way now waits until the peer has taken that many: direct_lanes.py); None
        while something is still queued here."""
        with self._wlock:  # (not while another thread is writing a frame)
            if (self._outbox or self._flush_pending or self._stalled is not None
                    or (self.transport is not None and self.transport.get_write_buffer_size() != 0)):
                return None
            return self.frames_out

    def _schedule_flush(self) -> None:
        """Off the loop, with the write lock held: have the loop flush soon."""
        self._flush_pending = True
        try:
            self._loop.call_soon_threadsafe(self._flush)
        except RuntimeError:  # the loop is closed: so is this connection
            self._flush_pending = False

    def _flush(self) -> None:
        with self._wlock:
            self._flush_pending = False
            if self.closed or self._closing or not self.open:
                return
            if self._stalled is not None:
                stalled, self._stalled = self._stalled, None
                self.transport.writelines(stalled)
            if not self._outbox:
                return
            msgs, self._outbox = self._outbox, []
            try:
                chunks = self._frame(msgs)
            except Exception:  # noqa: BLE001 - one message that cannot be pickled must not cost the others
                chunks = self._frames_each(msgs)
            self.transport.writelines(chunks)

    def _frames_each(self, msgs: list) -> list:
        """One frame per message; one that cannot be pickled goes with the errors inside it
        described (unpicklable.py), and is left out (and logged) only when that fails too."""
        chunks: list = []
        for msg in msgs:
            try:
                chunks += self._frame([msg])
            except Exception:  # noqa: BLE001
                if not self._frame_described(msg, chunks):
                    log.exception("meshrt: dropped a %s to %s that could not be pickled", type(msg).__name__,
                                  self._peer_name())
        return chunks

    def _frame_described(self, msg, chunks: list) -> bool:
        """Add a frame of ``msg`` with its errors described; False when it has none, or
        still cannot be pickled."""
        stand_in = errors_described(msg)
        if stand_in is None:
            return False
        try:
            chunks += self._frame([stand_in])
        except Exception:  # noqa: BLE001
            return False
        log.warning("meshrt: a %s to %s carried an error that could not be pickled; sent a description of it "
                    "instead", type(msg).__name__, self._peer_name())
        return True

    def _frame(self, msgs: list) -> list:
        """One frame's byte chunks: prefix, pickled messages, large buffers out of band."""
        big: list = []

        def oob(pb: pickle.PickleBuffer):
            if pb.raw().nbytes < _INBAND_LIMIT:
                return True
            big.append(pb.raw())
            return False

        header = pickle.dumps(msgs, protocol=5, buffer_callback=oob)
        self.frames_out += 1  # (only frames that go out: the peer's lanes wait for this count)
        self.bytes_out += len(header) + sum(b.nbytes for b in big)
        if big:
            prefix = _PREFIX.pack(len(header), len(big)) + struct.pack(
                f"<{len(big)}Q", *(b.nbytes for b in big)
            )
            return [prefix, header, *big]
        return [_PREFIX.pack(len(header), 0) + header]

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            if (self._outbox or self._stalled) and self.open:
                self._flush()
            self._drop_thread_fd()
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None and not self.closed:
            self._drop_thread_fd()
            self.transport.abort()

    def _drop_thread_fd(self) -> None:
        """No more writes (a close was asked for): close our duplicate of the socket now,
        so the peer sees the end even if the loop stops before ``connection_lost``."""
        with self._wlock:
            self._closing = True
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class _Reject(Exception):
    pass


def _unsent(chunks: list, written: int) -> list | None:
    """What is left of ``chunks`` after the first ``written`` bytes went out."""
    total = sum(memoryview(c).nbytes for c in chunks)
    if written >= total:
        return None
    rest = []
    for chunk in chunks:
        view = memoryview(chunk).cast("B")
        if written >= view.nbytes:
            written -= view.nbytes
            continue
        rest.append(view[written:] if written else view)
        written = 0
    return rest


async def listen(address: str, token: bytes, factory_kwargs: Callable[[], dict],
                 accepted: weakref.WeakSet | None = None) -> asyncio.AbstractServer:
    """Serve ``address``; each accepted peer gets a Connection built from factory_kwargs()
    (and is added to ``accepted``: closing a server leaves its connections open, even
    those still in the handshake, which no one else knows of yet)."""
    loop = asyncio.get_running_loop()

    def make():
        conn = Connection(token, server_side=True, **factory_kwargs())
        if accepted is not None:
            accepted.add(conn)
        return conn

    if address.startswith("unix:"):
        return await loop.create_unix_server(make, sock=addresses.bound_unix_socket(addresses.unix_path(address)))
    if address.startswith("tcp:"):
        host, port = addresses.parse_tcp(address)
        sock = addresses.bound_tcp_socket(host, port)
        if sock is not None:
            return await loop.create_server(make, sock=sock, backlog=1024)
        return await loop.create_server(make, host, port, backlog=1024, reuse_address=True)
    raise ValueError(f"unsupported address {address!r}: use unix:@name, unix:/path or tcp:host:port")


async def connect(address: str, token: bytes, **conn_kwargs) -> Connection:
    """Connect to ``address`` and wait until the token handshake has passed."""
    loop = asyncio.get_running_loop()
    opened: asyncio.Future = loop.create_future()
    user_open = conn_kwargs.pop("on_open", None)
    user_close = conn_kwargs.pop("on_close", None)

    def on_open(conn):
        if user_open is not None:
            user_open(conn)
        if not opened.done():
            opened.set_result(conn)

    def on_close(conn, exc):
        if not opened.done():
            from ..exceptions import AuthenticationError

            opened.set_exception(exc if exc is not None else AuthenticationError(
                f"{address} closed the connection during the token handshake"))
        elif user_close is not None:
            user_close(conn, exc)

    def make():
        return Connection(token, server_side=False, on_open=on_open, on_close=on_close, **conn_kwargs)

    if address.startswith("unix:"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, addresses.unix_path(address))
        except BaseException:
            sock.close()
            raise
        await loop.create_unix_connection(make, sock=sock)
    elif address.startswith("tcp:"):
        host, port = addresses.parse_tcp(address)
        await loop.create_connection(make, host, port)
    else:
        raise ValueError(f"unsupported address {address!r}")
    return await opened

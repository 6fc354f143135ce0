"""The sockets of a compiled graph: one per edge, from the thread that makes a value
to the thread that needs it, so a result goes actor to actor with one write and one
wake-up (no event loop in between, as Ray's shared-memory channels).

Between processes of one host (one network namespace) an edge is a Unix socket in the
abstract namespace; between hosts, TCP on the address the process's peers dial. Nothing
is unpickled from an edge before its connector has proved it knows the cluster token:
its first message is an HMAC of the graph, the edge and a fresh nonce under the token,
which the accepting side checks (each edge is taken once, a nonce once). Values are
pickled with protocol 5; large buffers (arrays, tensors) travel beside the pickle,
without a copy into it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import select
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import cloudpickle

_HELLO = struct.Struct("!16sQ16s32s")  # graph id, edge id, nonce, mac
_HEADER = struct.Struct("!QI")  # pickle length, buffer count
_LENGTH = struct.Struct("!Q")
_BUFFER_BYTES = 4 << 20  # (asked of the kernel, which caps it at net.core.wmem_max/rmem_max)
CONNECT_TIMEOUT_S = 30.0


class ChannelTimeout(Exception):
    """A write's ``when_full`` gave up; ``partial``: part of the message went out already."""

    partial = False


class ChannelClosed(ConnectionError):
    """The other end went away (its process died, or the graph was torn down)."""


def namespace_id() -> tuple[str, int]:
    """Which abstract socket namespace this process sees: its host and network namespace."""
    try:
        ns = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        ns = 0
    return socket.gethostname(), ns


def listen(graph_id: bytes) -> tuple[socket.socket, str]:
    """A listening socket for the edges into this process from its host; (socket, address)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _BUFFER_BYTES)  # (accepted sockets inherit it)
    name = f"\0meshrt-dag-{graph_id.hex()}-{os.getpid()}-{os.urandom(4).hex()}"
    sock.bind(name)
    sock.listen(64)
    return sock, name


def listen_tcp(host: str) -> tuple[socket.socket, str]:
    """A listening socket for edges from other hosts, on ``host`` (the address this
    process's peers dial); (socket, "tcp:HOST:PORT")."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _BUFFER_BYTES)
    sock.bind((host, 0))
    sock.listen(64)
    return sock, f"tcp:{host}:{sock.getsockname()[1]}"


def _mac(token: bytes, graph_id: bytes, edge: int, nonce: bytes) -> bytes:
    return hmac.new(token, b"meshrt-dag" + graph_id + edge.to_bytes(8, "big") + nonce, hashlib.sha256).digest()


def connect(address: str, token: bytes, graph_id: bytes, edge: int) -> socket.socket:
    """The sending end of ``edge``; the hello goes into the socket's buffer, so this
    does not wait for the other side to accept. A large buffer lets a large value go
    in a few writes, not one wake-up of the reader per 200 KiB."""
    if address.startswith("tcp:"):
        host, _, port = address[4:].rpartition(":")
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _BUFFER_BYTES)
        sock.settimeout(CONNECT_TIMEOUT_S)
        sock.connect((host, int(port)))
        sock.settimeout(None)
    else:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _BUFFER_BYTES)
        sock.connect(address)
    nonce = os.urandom(16)
    sock.sendall(_HELLO.pack(graph_id, edge, nonce, _mac(token, graph_id, edge, nonce)))
    return sock


def accept(listeners: list[socket.socket], token: bytes, graph_id: bytes, edges: set[int],
           timeout: float) -> dict[int, socket.socket]:
    """The receiving ends of ``edges``, each checked; a connection that fails the check
    is closed and not counted."""
    got: dict[int, socket.socket] = {}
    seen: set[bytes] = set()
    deadline = time.monotonic() + timeout
    while len(got) < len(edges):
        left = deadline - time.monotonic()
        ready = select.select(listeners, [], [], left)[0] if left > 0 else []
        if not ready:
            for sock in got.values():
                sock.close()
            raise TimeoutError(f"compiled graph: {len(edges) - len(got)} of its channels into this process did not "
                               f"connect within {timeout:.0f} s")
        sock, _ = ready[0].accept()
        if sock.family != socket.AF_UNIX:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(max(deadline - time.monotonic(), 0.1))
        try:
            hello = _recv_exact(sock, _HELLO.size)
            gid, edge, nonce, mac = _HELLO.unpack(hello)
        except (OSError, ChannelClosed):
            sock.close()
            continue
        if (gid != graph_id or edge not in edges or edge in got or nonce in seen
                or not hmac.compare_digest(mac, _mac(token, graph_id, edge, nonce))):
            sock.close()  # (not one of ours: nothing from it is read further)
            continue
        seen.add(nonce)
        sock.settimeout(None)
        got[edge] = sock
    return got


def encode(value: Any) -> list:
    """``value`` as the pieces of one message (raises, sending nothing, if it cannot be pickled)."""
    buffers: list[pickle.PickleBuffer] = []
    try:
        data = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    except Exception:  # noqa: BLE001 - (code, and things defined in __main__)
        buffers.clear()
        data = cloudpickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    return [_HEADER.pack(len(data), len(raws)), *(_LENGTH.pack(r.nbytes) for r in raws), data, *raws]


def write(sock: socket.socket, parts: list, when_full: Callable[[socket.socket], None] | None = None) -> None:
    """Send one message. A non-blocking ``sock`` calls ``when_full(sock)`` each time its
    buffer is full (the driver reads results meanwhile: wiring.py), then goes on."""
    try:
        _sendall(sock, parts, when_full)
    except OSError as err:
        raise ChannelClosed(str(err)) from None


def send(sock: socket.socket, value: Any) -> None:
    write(sock, encode(value))


def _sendall(sock: socket.socket, parts: list, when_full: Callable[[socket.socket], None] | None) -> None:
    views = [memoryview(p).cast("B") for p in parts]
    progressed = False
    while views:
        try:
            sent = sock.sendmsg(views[:512])
        except BlockingIOError:
            try:
                when_full(sock)
            except ChannelTimeout as err:
                err.partial = progressed
                raise
            continue
        progressed = True
        while sent and views:
            if sent >= views[0].nbytes:
                sent -= views[0].nbytes
                views.pop(0)
            else:
                views[0] = views[0][sent:]
                sent = 0


def recv(sock: socket.socket) -> Any:
    size, count = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    lengths = [_LENGTH.unpack(_recv_exact(sock, _LENGTH.size))[0] for _ in range(count)]
    data = _recv_exact(sock, size)
    buffers = [_recv_exact(sock, n) for n in lengths]
    return pickle.loads(data, buffers=buffers)


def readable(sock: socket.socket, timeout: float | None) -> bool:
    return bool(select.select([sock], [], [], timeout)[0])


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    out = bytearray(n)
    view = memoryview(out)
    got = 0
    while got < n:
        try:
            k = sock.recv_into(view[got:])
        except OSError as err:
            raise ChannelClosed(str(err)) from None
        if k == 0:
            raise ChannelClosed("the other end closed")
        got += k
    return out

"""meshrt's addresses (``unix:@name``, ``unix:/path``, ``tcp:host:port``): made, parsed,
and bound to listening sockets."""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
import sys


def new_unix_address(tag: str) -> str:
    """A fresh local address: an abstract socket on Linux, a temp file elsewhere."""
    name = f"meshrt-{tag}-{os.getpid()}-{secrets.token_hex(6)}"
    if sys.platform.startswith("linux"):
        return f"unix:@{name}"
    import tempfile

    return f"unix:{os.path.join(tempfile.gettempdir(), name + '.sock')}"


def unix_path(address: str) -> str:
    path = address[len("unix:") :]
    return "\0" + path[1:] if path.startswith("@") else path


def parse_tcp(address: str) -> tuple[str, int]:
    host, _, port = address[len("tcp:") :].rpartition(":")
    return host.strip("[]"), int(port)


def bound_unix_socket(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if not path.startswith("\0") and os.path.exists(path):
        os.unlink(path)  # a stale socket file from a process that died
    sock.bind(path)
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def bound_tcp_socket(host: str, port: int) -> socket.socket | None:
    """A listening socket for a literal IP address; None for a host name. uvloop
    resolves even a literal through getaddrinfo on its thread pool, whose threads
    start on first use: ~2 ms of CPU in each new worker, which a mesh's processes pay
    all at once as they start (a literal needs no resolving)."""
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return None
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:  # (as asyncio binds "::": IPv6 only)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        sock.setblocking(False)
    except OSError as err:
        sock.close()
        raise OSError(err.errno, f"cannot listen on {host}:{port}: {err.strerror}") from None
    return sock


def local_ip_towards(host: str) -> str | None:
    """The IPv4 address this machine sends from to reach ``host`` (the interface its
    route takes); None when there is no route. No packet is sent: a UDP connect only
    picks the route."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((host, 9))
            return s.getsockname()[0]
        except OSError:
            return None

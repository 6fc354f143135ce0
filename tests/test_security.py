"""The token handshake: nothing is unpickled from a peer that has not proven the token."""

from __future__ import annotations

import asyncio
import pickle
import socket

import pytest

import meshrt
from meshrt._private import addresses, state, wire
from meshrt.exceptions import AuthenticationError


@meshrt.remote
def ping():
    return "pong"


def _controller():
    return state.core().controller


def _raw_connect(address: str) -> socket.socket:
    if address.startswith("tcp:"):
        host, port = addresses.parse_tcp(address)
        return socket.create_connection((host, port), timeout=10)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(addresses.unix_path(address))
    return sock


def _refused(sock: socket.socket, payload: bytes) -> bool:
    """Send ``payload`` after the server's challenge; True once the server hangs up."""
    challenge = sock.recv(64)
    assert challenge.startswith(wire.MAGIC)
    sock.sendall(payload)
    try:
        while sock.recv(4096):
            pass
    except (TimeoutError, ConnectionResetError):
        pass
    return True


def test_wrong_token_is_refused_and_runtime_keeps_serving(rt, caplog):
    address = _controller().address

    async def intruder():
        return await wire.connect(address, b"not the cluster token")

    with pytest.raises(AuthenticationError, match="handshake"):
        state.core().io.run_sync(intruder(), timeout=20)
    assert meshrt.get(ping.remote()) == "pong"


def test_pickle_before_handshake_is_never_loaded(rt, tmp_path):
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    sock = _raw_connect(_controller().address)
    try:
        frame = pickle.dumps([Exploit()])
        assert _refused(sock, b"\0" * 64 + len(frame).to_bytes(4, "little") + b"\0" * 4 + frame)
    finally:
        sock.close()
    assert not marker.exists()
    assert meshrt.get(ping.remote()) == "pong"


def test_silent_peer_is_dropped_and_others_served(rt):
    sock = _raw_connect(_controller().address)
    try:
        sock.recv(64)
        assert meshrt.get([ping.remote() for _ in range(10)]) == ["pong"] * 10
    finally:
        sock.close()


def test_tcp_listens_on_loopback_and_checks_token():
    meshrt.init(num_cpus=1, address="127.0.0.1:0")
    address = _controller().tcp_address
    host, port = addresses.parse_tcp(address)
    assert host == "127.0.0.1" and port > 0
    sock = _raw_connect(address)
    try:
        assert _refused(sock, b"x" * 64)
    finally:
        sock.close()
    assert meshrt.get(ping.remote()) == "pong"


def test_no_tcp_listener_unless_asked(rt):
    assert _controller().tcp_address is None
    assert all(s.sockets[0].family == socket.AF_UNIX for s in _controller().servers)


async def test_frames_carry_large_out_of_band_buffers():
    token = b"k" * 32
    got: asyncio.Future = asyncio.get_running_loop().create_future()
    address = addresses.new_unix_address("test")
    server = await wire.listen(address, token, lambda: {
        "on_messages": lambda conn, msgs: got.set_result(msgs) if not got.done() else None,
    })
    try:
        client = await wire.connect(address, token)
        big = bytearray(range(256)) * (12 << 12)  # 12 MiB, several socket reads
        client.send(("hello", pickle.PickleBuffer(big), 7))
        msgs = await asyncio.wait_for(got, 30)
        tag, data, seven = msgs[0]
        assert tag == "hello" and seven == 7 and bytes(data) == bytes(big)
        client.close()
    finally:
        server.close()
        await server.wait_closed()

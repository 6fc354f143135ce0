"""The floor under mesh fan-out on this machine: the same call tree as a mesh call,
with nothing of meshrt in it.

A driver sends a small pickled message to H relay processes ("agents"); each relays it
to its W worker processes over a Unix socket pair, gathers their pickled replies and
answers the driver with one message. Blocking sockets, no event loop, no framing
beyond a length prefix: what any Python runtime must at least pay per process woken.

Its ratio, 32 workers over 4 relays against 4 workers over 1, says how much of the
mesh benchmark's growth (benchmarks/mesh.py, "call to 32 actors over 4 agents") is
the machine's: on 2 cores, 36 processes take turns on 2 CPUs, so the latency grows
with the number of processes whatever the runtime does.

    python benchmarks/fanout_floor.py [--calls 400] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import pickle
import signal
import socket
import statistics
import struct
import time

SHAPES = [(1, 4), (1, 8), (2, 16), (4, 32), (1, 32)]  # (relays, workers in all)


def _recv(sock: socket.socket) -> bytes:
    head = sock.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        raise EOFError
    (size,) = struct.unpack("<I", head)
    return sock.recv(size, socket.MSG_WAITALL)


def _send(sock: socket.socket, data: bytes) -> None:
    sock.sendall(struct.pack("<I", len(data)) + data)


def _worker(sock: socket.socket) -> None:
    while True:
        _, seq = pickle.loads(_recv(sock))
        _send(sock, pickle.dumps(("ok", seq)))


def _relay(up: socket.socket, workers: int) -> None:
    kids = [_fork(_worker) for _ in range(workers)]
    while True:
        msg = _recv(up)
        for kid in kids:
            _send(kid, msg)
        _send(up, pickle.dumps([pickle.loads(_recv(kid)) for kid in kids]))


def _fork(body, *args) -> socket.socket:
    """A child running ``body(its end, *args)`` until its parent's end closes."""
    ours, theirs = socket.socketpair()
    if os.fork() == 0:
        ours.close()
        try:
            body(theirs, *args)
        except (EOFError, OSError):
            pass
        os._exit(0)
    theirs.close()
    return ours


def one_shape(relays: int, workers: int, calls: int) -> float:
    """Median ms of a call over ``workers`` processes behind ``relays`` relays."""
    ends = [_fork(_relay, workers // relays) for _ in range(relays)]
    times = []
    try:
        for seq in range(calls + 50):
            start = time.perf_counter()
            msg = pickle.dumps(("ping", seq))
            for end in ends:
                _send(end, msg)
            for end in ends:
                pickle.loads(_recv(end))
            times.append(time.perf_counter() - start)
    finally:
        for end in ends:
            end.close()  # (the relays see EOF, close their workers' ends, and all exit)
        for _ in range(relays * (1 + workers // relays)):
            try:
                os.wait()
            except ChildProcessError:
                break
    return statistics.median(times[50:]) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    rows = {shape: [] for shape in SHAPES}
    for _ in range(args.repeat):
        for shape in SHAPES:
            rows[shape].append(one_shape(*shape, args.calls))
    base = statistics.median(rows[SHAPES[0]])
    print(f"{os.cpu_count()} cores; median of {args.repeat} rounds of {args.calls} calls")
    print("| call over | ms | vs 4 workers / 1 relay |")
    print("|---|--:|--:|")
    for (relays, workers), values in rows.items():
        ms = statistics.median(values)
        print(f"| {workers} workers / {relays} relay(s) | {ms:.3f} | {ms / base:.2f}x |")


if __name__ == "__main__":
    main()

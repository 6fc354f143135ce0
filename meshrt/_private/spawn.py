"""Starting workers: the zygote client, and the pipes that carry workers' output.

Each worker gets its own stdout and stderr pipes, made here and handed to the
zygote with the spawn request, so output from a worker's first instruction on
(including a crash during start-up) reaches the driver, prefixed with the worker's
name and pid, and the last stderr lines are kept to explain a death.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import pickle
import socket
import subprocess
import sys
from collections.abc import Callable

log = logging.getLogger("meshrt")

STDERR_TAIL_LINES = 20


class Zygote:
    """The controller's handle on the zygote process."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        env: dict,
        on_spawned: Callable[[int, int], None],
        on_exited: Callable[[int, int], None],
        on_lost: Callable[[], None],
        inherit: tuple = (),
    ) -> None:
        self.loop = loop
        self.inherit = inherit  # descriptors every worker needs (the object store's arena)
        self.env = env
        self.on_spawned = on_spawned
        self.on_exited = on_exited
        self.on_lost = on_lost
        self.sock: socket.socket | None = None
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "meshrt._private.zygote", str(theirs.fileno()), str(os.getpid())],
            pass_fds=(theirs.fileno(), *self.inherit),
            env=self.env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in the terminal reaches the driver only
        )
        theirs.close()
        ours.setblocking(False)
        self.sock = ours
        self.loop.add_reader(ours.fileno(), self._readable)

    def spawn(self, worker_id: int, env: dict, kind: str) -> tuple[int, int]:
        """Ask for a worker; returns the read ends of its stdout and stderr pipes."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            socket.send_fds(self.sock, [pickle.dumps(("spawn", worker_id, env, kind))], [out_w, err_w])
        finally:
            os.close(out_w)
            os.close(err_w)
        return out_r, err_r

    def _readable(self) -> None:
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._lost()
                return
            msg = pickle.loads(data)  # our own child over a private socketpair
            if msg[0] == "spawned":
                self.on_spawned(msg[1], msg[2])
            elif msg[0] == "exited":
                self.on_exited(msg[1], msg[2])

    def _lost(self) -> None:
        if self.sock is not None:
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None
            if self.proc is not None:
                self.proc.wait()  # it closed its end: it is exiting, reap it
            self.on_lost()

    async def close(self, timeout: float = 3.0) -> None:
        if self.sock is not None:
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()  # EOF: the zygote kills what is left and exits
            self.sock = None
        proc = self.proc
        if proc is None:
            return
        if not await _exited(self.loop, proc, timeout):
            proc.kill()
        proc.wait()


async def _exited(loop, proc: subprocess.Popen, timeout: float) -> bool:
    """Wait for a child to exit without polling (a pidfd on Linux); True if it did."""
    if proc.poll() is not None:
        return True
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # not Linux >= 5.3: fall back to polling
        deadline = loop.time() + timeout
        while proc.poll() is None and loop.time() < deadline:  # noqa: ASYNC110 - no event exists
            await asyncio.sleep(0.005)
        return proc.poll() is not None
    done = loop.create_future()
    loop.add_reader(fd, lambda: done.done() or done.set_result(None))
    try:
        await asyncio.wait_for(done, timeout)
        return True
    except asyncio.TimeoutError:
        return False
    finally:
        loop.remove_reader(fd)
        os.close(fd)


class OutputPipe(asyncio.Protocol):
    """Reads one worker stream line by line and hands the lines to ``sink(stream, lines)``."""

    def __init__(self, stream_name: str, sink: Callable[[str, list[str]], None], on_eof: Callable[[], None]) -> None:
        self.stream_name = stream_name
        self.sink = sink
        self.on_eof = on_eof
        self._partial = b""

    def data_received(self, data: bytes) -> None:
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if lines:
            self._emit(lines)

    def _emit(self, lines: list[bytes]) -> None:
        self.sink(self.stream_name, [line.decode("utf-8", "replace").rstrip("\r") for line in lines])

    def connection_lost(self, exc) -> None:
        if self._partial:
            self._emit([self._partial])
            self._partial = b""
        self.on_eof()


def worker_output(record, forward: bool) -> Callable[[str, list[str]], None]:
    """The controller's sink: keep the stderr tail, and print with the worker's name."""

    def sink(stream_name: str, text: list[str]) -> None:
        if stream_name == "stderr":
            record.stderr_tail.extend(text)
        if forward:
            target = sys.stderr if stream_name == "stderr" else sys.stdout
            prefix = f"({record.label} pid={record.pid}) "
            try:
                target.write("".join(prefix + t + "\n" for t in text))
                target.flush()
            except (ValueError, OSError):  # the driver's stream was closed
                pass

    return sink


def new_tail() -> collections.deque:
    return collections.deque(maxlen=STDERR_TAIL_LINES)


async def attach_pipes(loop, out_fd: int, err_fd: int, sink, on_eof) -> list:
    transports = []
    for fd, name in ((out_fd, "stdout"), (err_fd, "stderr")):
        pipe = os.fdopen(fd, "rb", buffering=0)
        transport, _ = await loop.connect_read_pipe(lambda n=name: OutputPipe(n, sink, on_eof), pipe)
        transports.append(transport)
    return transports

"""Helpers shared by tests: wait on events, never sleep and hope."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import meshrt
from meshrt._private import addresses, wire


def wait_until(predicate, timeout: float = 5.0, interval: float = 0.01):
    """Poll ``predicate`` until it is truthy or the deadline passes; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def ended(pid: int) -> bool:
    """The process has exited (a zombie not yet reaped counts): asked once, so that one
    exiting between two questions is not taken for an error."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@meshrt.remote
class Gate:
    """An event a test opens, so that 'slow' work ends exactly when the test says."""

    def __init__(self):
        self.event = threading.Event()

    def open(self):
        self.event.set()

    def wait(self, timeout=30):
        return self.event.wait(timeout)


def gate():
    """A Gate that lets several waiters block at once."""
    return Gate.options(max_concurrency=8).remote()


def run_python(code: str, timeout: float, env: dict | None = None):
    """Run ``code`` in a fresh interpreter of its own session; on timeout the whole
    session (any child it forked included) is killed, so nothing outlives the test."""
    import os
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


_TOKEN = b"t" * 32


@contextlib.asynccontextmanager
async def wire_pair(count: int):
    """A client connection to a server that collects what it receives; ``enough`` is set
    once ``count`` messages have arrived."""
    received: list = []
    enough = asyncio.Event()
    address = addresses.new_unix_address("pair")

    def on_messages(conn, msgs):
        received.extend(msgs)
        if len(received) >= count:
            enough.set()

    server = await wire.listen(address, _TOKEN, lambda: {"on_messages": on_messages})
    client = await wire.connect(address, _TOKEN)
    try:
        yield client, received, enough
    finally:
        client.close()
        server.close()
        await server.wait_closed()

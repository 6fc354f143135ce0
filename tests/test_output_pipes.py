"""A worker's output pipes: read to the end, and closed exactly once."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess

import pytest
import uvloop

import meshrt
from meshrt._private.spawn import OutputPipe


@pytest.mark.timeout(30)
@pytest.mark.parametrize("new_loop", [uvloop.new_event_loop, asyncio.new_event_loop], ids=["uvloop", "asyncio"])
def test_output_pipe_reads_lines_and_closes_its_descriptor_once(new_loop):
    """The reader owns the descriptor alone and closes it once at the end: under
    uvloop, connect_read_pipe's transport and its file object each closed it, and a
    file another thread opened between the two closes lost its descriptor (a test's
    /proc read failed with EBADF). That race needs a second thread to open a file in
    a window of microseconds; this checks what can be checked deterministically: a
    file opened after the end under the freed number is left alone."""
    loop = new_loop()
    try:
        r, w = os.pipe()
        lines: list = []
        ended = loop.create_future()
        OutputPipe(loop, r, "stderr", lambda name, got: lines.extend((name, t) for t in got),
                   lambda: ended.done() or ended.set_result(None))
        os.write(w, b"first\nsecond\r\nno newline at the end")
        os.close(w)
        loop.run_until_complete(asyncio.wait_for(ended, 10))
        assert lines == [("stderr", "first"), ("stderr", "second"), ("stderr", "no newline at the end")]
        # New files take the lowest free numbers: the reader's among them, once it let go
        # (another thread may take it first: then there is nothing to check against).
        pipes = [os.pipe() for _ in range(4)]
        try:
            gc.collect()
            loop.run_until_complete(asyncio.sleep(0))
            for reused_r, reused_w in pipes:  # all still ours
                os.write(reused_w, b"x")
                assert os.read(reused_r, 1) == b"x"
        finally:
            for pair in pipes:
                os.close(pair[0])
                os.close(pair[1])
    finally:
        loop.close()


@pytest.mark.timeout(60)
def test_shutdown_while_a_workers_child_still_holds_its_output():
    """Closing a worker's pipes at shutdown finalizes it at once (its output ended):
    shutdown() raised 'dictionary changed size during iteration' and left the store."""
    meshrt.init(num_cpus=1)

    @meshrt.remote
    def start_child():
        return subprocess.Popen(["sleep", "60"]).pid  # inherits the worker's stdout and stderr

    pid = meshrt.get(start_child.remote(), timeout=30)
    try:
        meshrt.shutdown()
    finally:
        os.kill(pid, signal.SIGKILL)
    assert not meshrt.is_initialized()

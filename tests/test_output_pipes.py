"""A worker's output pipes: read to the end, and closed exactly once."""

from __future__ import annotations

import asyncio
import gc
import os

import pytest
import uvloop

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
        reused_r, reused_w = os.pipe()  # the lowest free numbers: the reader's, if it let go
        try:
            assert reused_r == r
            gc.collect()
            loop.run_until_complete(asyncio.sleep(0))
            os.fstat(reused_r)  # still ours
            os.write(reused_w, b"x")
            assert os.read(reused_r, 1) == b"x"
        finally:
            os.close(reused_r)
            os.close(reused_w)
    finally:
        loop.close()

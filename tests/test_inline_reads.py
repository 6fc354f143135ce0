"""The lender's side of inline reads (inline_reads.py): a holder names one of the
lender's live buffers, exactly as registered, and gets a copy; anything else is refused."""

from __future__ import annotations

import pytest

from meshrt.tensor import TensorBuffer
from meshrt.tensor.buffer import BufferDroppedError, read_owned


def _region(buf: TensorBuffer) -> tuple:
    h = buf._h
    return h.slot_ptr, h.generation, h.ptr, h.nbytes


@pytest.mark.timeout(30)
def test_a_live_buffer_is_copied_exactly(rt):  # (rt: its shutdown closes the tensor engine)
    data = bytearray(range(256)) * 64
    buf = TensorBuffer(data)
    try:
        assert read_owned(*_region(buf)) == bytes(data)
    finally:
        buf.drop()


@pytest.mark.timeout(30)
def test_memory_a_holder_chose_is_refused(rt):
    data = bytearray(4096)
    buf = TensorBuffer(data)
    slot_ptr, generation, ptr, nbytes = _region(buf)
    try:
        with pytest.raises(BufferDroppedError):
            read_owned(slot_ptr, generation, ptr - 4096, nbytes)  # another address
        with pytest.raises(BufferDroppedError):
            read_owned(slot_ptr, generation, ptr, nbytes * 2)  # more than was lent
        with pytest.raises(BufferDroppedError):
            read_owned(slot_ptr, generation ^ 2, ptr, nbytes)  # another generation
        with pytest.raises(BufferDroppedError):
            read_owned(slot_ptr + 3, generation, ptr, nbytes)  # not a slot
    finally:
        buf.drop()
    with pytest.raises(BufferDroppedError):
        read_owned(slot_ptr, generation, ptr, nbytes)  # dropped

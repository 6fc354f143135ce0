"""meshrt.rdma: Monarch's RDMABuffer over TensorBuffer (whole-buffer reads and writes,
sizes in bytes); checked against Monarch itself in tests/compat_monarch/test_rdma.py."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import torch

import meshrt
from meshrt import Actor, endpoint, this_host
from meshrt.rdma import RDMABuffer, get_rdma_backend, is_ibverbs_available, is_rdma_available
from meshrt.tensor import BufferDroppedError

pytestmark = pytest.mark.timeout(120)


class Peer(Actor):
    @endpoint
    def read(self, buf, nbytes):
        dst = bytearray(nbytes)
        assert buf.read_into(memoryview(dst)).get(30) is None
        return bytes(dst)

    @endpoint
    def keep(self, buf):
        self.kept = buf

    @endpoint
    def read_kept(self):
        return self.read(self.kept, self.kept.size())

    @endpoint
    def write(self, buf, data):
        return buf.write_from(np.frombuffer(data, dtype=np.uint8)).get(30)

    @endpoint
    def own(self):
        self.t = torch.arange(6, dtype=torch.int16).reshape(2, 3)  # (any contiguous shape: its bytes)
        self.buf = RDMABuffer(self.t)
        return self.buf

    @endpoint
    def owned(self):
        return self.t.reshape(-1).tolist()


async def test_other_processes_read_and_write_the_drivers_buffer_whole(rt):
    data = bytearray(range(40))
    buf = RDMABuffer(memoryview(data))
    assert buf.size() == 40 and buf.backend in ("tcp", "ibverbs") and "pid" in buf.owner
    peer = this_host().spawn_procs(per_host={"gpus": 1}).spawn("peer", Peer)
    assert await peer.read.call_one(buf, 40) == bytes(range(40))
    await peer.keep.call_one(buf)
    assert (await peer.read.call_one(buf, 44))[40:] == b"\0" * 4  # (room to spare stays as it was)
    assert await peer.write.call_one(buf, b"\xff" * 3) is None
    assert data[:4] == bytearray(b"\xff\xff\xff\x03")  # a shorter write fills the start
    await buf.drop()
    with pytest.raises(BufferDroppedError):
        await peer.read_kept.call_one()  # (a handle sent before: its reads fail)
    with pytest.raises(TypeError, match="dropped"):
        await peer.read.call_one(buf, 40)  # (and a dropped one is not sent at all)


async def test_the_driver_reads_an_actors_buffer_of_any_dtype(rt):
    peer = this_host().spawn_procs(per_host={"gpus": 1}).spawn("peer", Peer)
    buf = await peer.own.call_one()
    assert buf.size() == 12  # 6 int16s, counted in bytes
    dst = torch.zeros(3, dtype=torch.float32)  # (another dtype: bytes are bytes)
    await buf.read_into(dst)
    assert dst.view(torch.int16).tolist() == [0, 1, 2, 3, 4, 5]
    await buf.write_from(torch.tensor([7, 7], dtype=torch.int16))
    assert await peer.owned.call_one() == [7, 7, 2, 3, 4, 5]
    again = pickle.loads(pickle.dumps(buf))  # (a handle travels on)
    assert again.size() == 12


def test_bad_buffers_and_sizes_are_named(rt):
    with pytest.raises(ValueError, match="no bytes"):
        RDMABuffer(torch.zeros(0))
    with pytest.raises(ValueError, match="not contiguous"):
        RDMABuffer(torch.zeros(4, 4).t())
    with pytest.raises(TypeError, match="expected a torch tensor"):
        RDMABuffer([1, 2, 3])
    buf = RDMABuffer(bytearray(16))
    with pytest.raises(ValueError, match="at least buf.size"):
        buf.read_into(bytearray(8))
    with pytest.raises(ValueError, match="at most buf.size"):
        buf.write_from(b"x" * 17)
    with pytest.raises(ValueError, match="timeout"):
        buf.read_into(bytearray(16), timeout=0)
    buf.drop()


def test_backend_names():
    assert get_rdma_backend() == ("ibverbs" if is_ibverbs_available() else "tcp")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert is_rdma_available() == is_ibverbs_available()
    assert caught and caught[0].category is DeprecationWarning
    assert meshrt.rdma.RDMABuffer is RDMABuffer

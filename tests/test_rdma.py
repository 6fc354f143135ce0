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
from meshrt.rdma import (
    RDMAAction,
    RDMABuffer,
    get_rdma_backend,
    is_ibverbs_available,
    is_rdma_available,
)
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


class Owner(Actor):
    def __init__(self):
        self.a = torch.arange(8, dtype=torch.int32)
        self.b = torch.zeros(4, dtype=torch.int32)

    @endpoint
    def buffers(self):
        self.bufs = (RDMABuffer(self.a), RDMABuffer(self.b))
        return self.bufs

    @endpoint
    def contents(self):
        return self.a.tolist(), self.b.tolist()

    @endpoint
    def drop_a(self):
        self.bufs[0].drop()


async def test_an_action_moves_a_batch_and_waits_for_all_of_it(rt):
    owner = this_host().spawn_procs(per_host={"gpus": 1}).spawn("owner", Owner)
    a, b = await owner.buffers.call_one()
    got = torch.zeros(8, dtype=torch.int32)
    action = RDMAAction().read_remote(got, a).write_remote(b, torch.tensor([5, 6, 7, 8], dtype=torch.int32))
    assert await action.submit() is None
    assert got.tolist() == list(range(8)) and (await owner.contents.call_one())[1] == [5, 6, 7, 8]
    got.zero_()
    assert await action.submit(timeout=30) is None  # (again: the same ops run again)
    assert got.tolist() == list(range(8))
    await owner.drop_a.call_one()
    with pytest.raises(BufferDroppedError):  # (one op fails: the batch does, once all ended)
        await RDMAAction().read_remote(torch.zeros(8, dtype=torch.int32), a).write_remote(b, torch.ones(4)).submit()


def test_an_action_refuses_racing_local_memory_and_atomics(rt):
    buf = RDMABuffer(bytearray(16))
    local = torch.zeros(32, dtype=torch.uint8)
    action = RDMAAction().read_remote(local[:16], buf)
    with pytest.raises(ValueError, match="overlaps that of op 0"):
        action.read_remote(local[8:24], buf)  # (both would write local[8:16])
    action.read_remote(local[16:], buf)  # (apart: fine)
    with pytest.raises(ValueError, match="overlaps"):
        action.write_remote(buf, local[:4])  # (read from while another op writes it)
    RDMAAction().write_remote(buf, local[:4]).write_remote(buf, local[:4])  # (two reads of one memory: fine)
    with pytest.raises(NotImplementedError, match="atomics"):
        action.fetch_add(buf, local[:8], 1)
    with pytest.raises(NotImplementedError, match="atomics"):
        action.compare_and_swap(buf, local[:8], 0, 1)
    with pytest.raises(TypeError, match="expected an RDMABuffer"):
        action.read_remote(local, b"not a buffer")
    with pytest.raises(ValueError, match="timeout"):
        action.submit(timeout=0)
    assert action.submit().get(30) is None and local.tolist() == [0] * 32  # (a blocking wait works too)
    buf.drop()

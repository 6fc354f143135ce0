"""TensorBuffer between real processes: the same-machine path (cross-memory attach)
and UCX over tcp (forced with MESHRT_TENSOR_TRANSPORT=ucx), bit-exact over dtypes
and sizes from 1 byte to 1 GiB, concurrent transfers, and every error a user can
hit: wrong sizes and dtypes, dropped buffers, a dead or frozen owner."""

from __future__ import annotations

import asyncio
import hashlib
import os
import pickle
import shutil
import signal

import numpy as np
import psutil
import pytest
import torch

import meshrt
from meshrt import Actor, endpoint, this_host
from meshrt._private.gpus import detect_gpu_count
from meshrt.exceptions import ObjectLostError
from meshrt.tensor import BufferDroppedError, TensorBuffer

from .helpers import run_python, wait_until

pytestmark = pytest.mark.timeout(180)
GIB = 1 << 30


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def pattern(n: int, dtype: torch.dtype) -> torch.Tensor:
    """Deterministic content whose every byte matters: a block of a prime length (so
    no two nearby offsets look alike), repeated; cheap even at 1 GiB."""
    period = min(n, 65521)
    if dtype == torch.bool:
        block = torch.arange(period) % 3 == 1
    else:
        raw = (torch.arange(period, dtype=torch.int64) * 2654435761 + 12345) % 251
        block = (raw.to(torch.float64) / 7 - 17).to(dtype) if dtype.is_floating_point else raw.to(dtype)
    return block.repeat(n // period + 1)[:n].clone() if n > period else block


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy()).hexdigest()


class Owner(Actor):
    def __init__(self, n: int, dtype: torch.dtype):
        self.t = pattern(n, dtype)
        self.buf = TensorBuffer(self.t)

    @endpoint
    def handle(self):
        return self.buf

    @endpoint
    def digest(self):
        return digest(self.t)

    @endpoint
    def values(self, start: int, stop: int):
        return self.t[start:stop].clone()

    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def drop(self):
        self.buf.drop()

    @endpoint
    async def read_own(self, offset: int, size: int):
        dst = torch.empty(size, dtype=self.t.dtype)
        await self.buf.read_into(dst, offset=offset)
        return torch.equal(dst, self.t[offset:offset + size])


class Peer(Actor):
    def __init__(self):
        self.reads = {}

    @endpoint
    async def read_digest(self, buf):
        dst = torch.empty(buf.numel, dtype=buf.dtype)
        await buf.read_into(dst)
        return digest(dst)

    @endpoint
    async def read(self, buf, offset=0, size=None):
        dst = torch.empty(buf.numel - offset if size is None else size, dtype=buf.dtype)
        await buf.read_into(dst, offset=offset, size=size)
        return dst

    @endpoint
    def read_blocking(self, buf):
        dst = np.empty(buf.nbytes, dtype=np.uint8) if buf.dtype == torch.uint8 else torch.empty(buf.numel, dtype=buf.dtype)
        buf.read_into(dst).get(timeout=60)
        return torch.as_tensor(dst)

    @endpoint
    async def write(self, buf, src, offset=0):
        await buf.write_from(src, offset=offset)

    @endpoint
    async def many(self, buf, parts: int):
        """``parts`` concurrent reads of disjoint slices, then one check of the whole."""
        step = buf.numel // parts
        dsts = [torch.empty(step, dtype=buf.dtype) for _ in range(parts)]
        await asyncio.gather(*(buf.read_into(d, offset=i * step) for i, d in enumerate(dsts)))
        return digest(torch.cat(dsts))

    @endpoint
    def start_read(self, buf, timeout=60.0):
        dst = torch.empty(buf.numel, dtype=buf.dtype)
        self.reads[0] = (dst, buf.read_into(dst, timeout=timeout))
        return True

    @endpoint
    async def finish_read(self):
        _dst, fut = self.reads.pop(0)
        await fut
        return "done"

    @endpoint
    async def read_error(self, buf, timeout=60.0):
        dst = torch.empty(buf.numel, dtype=buf.dtype)
        try:
            await buf.read_into(dst, timeout=timeout)
        except Exception as err:  # noqa: BLE001 - the test inspects it
            return type(err).__name__, str(err)
        return None


@pytest.fixture(params=["auto", "ucx"])
def transport(request, monkeypatch):
    """A runtime whose processes take the same-machine path ("auto") or UCX over tcp."""
    if request.param == "ucx":
        monkeypatch.setenv("MESHRT_TENSOR_TRANSPORT", "ucx")
    meshrt.init(num_cpus=2)
    yield request.param
    meshrt.shutdown()


def spawn(n: int, dtype=torch.float32):
    procs = this_host().spawn_procs(per_host={"procs": 2})
    owner = procs.slice(procs=0).spawn("owner", Owner, n, dtype)
    peer = procs.slice(procs=1).spawn("peer", Peer)
    return owner, peer


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.uint8,
                                   torch.bool, torch.float64])
async def test_read_and_write_are_bit_exact_for_each_dtype(transport, dtype):
    owner, peer = spawn(70_001, dtype)
    buf = await owner.handle.call_one()
    assert buf.dtype == dtype and buf.numel == 70_001 and buf.device == "cpu"
    assert await peer.read_digest.call_one(buf) == await owner.digest.call_one()
    new = pattern(1000, dtype).flip(0)
    await peer.write.call_one(buf, new, offset=500)
    assert torch.equal(await owner.values.call_one(500, 1500), new)
    got = await peer.read.call_one(buf, offset=499, size=1002)
    assert torch.equal(got[1:-1], new)


@pytest.mark.parametrize("nbytes", [1, 4099, 1 << 20, GIB])
async def test_sizes_from_one_byte_to_one_gib(transport, nbytes):
    owner, peer = spawn(nbytes, torch.uint8)
    buf = await owner.handle.call_one()
    assert await peer.read_digest.call_one(buf) == await owner.digest.call_one()


async def test_blocking_get_and_numpy_destination(transport):
    owner, peer = spawn(1 << 16, torch.uint8)
    buf = await owner.handle.call_one()
    assert torch.equal(await peer.read_blocking.call_one(buf), await owner.values.call_one(0, 1 << 16))


async def test_many_concurrent_transfers(transport):
    owner, peer = spawn(64 * 4096, torch.float32)
    buf = await owner.handle.call_one()
    assert await peer.many.call_one(buf, 64) == await owner.digest.call_one()


async def test_the_owner_reads_its_own_buffer(transport):
    owner, _peer = spawn(4096)
    assert await owner.read_own.call_one(100, 1000)


async def test_handle_is_small_and_says_what_it_holds(transport):
    owner, _peer = spawn(1 << 20, torch.bfloat16)
    buf = await owner.handle.call_one()
    assert len(pickle.dumps(buf)) < 1024
    assert (buf.numel, buf.nbytes, buf.shape, buf.dtype, buf.device) == (1 << 20, 2 << 20, (1 << 20,),
                                                                         torch.bfloat16, "cpu")
    assert "bfloat16" in repr(buf)


async def test_wrong_sizes_dtypes_and_layouts_are_refused_at_the_call(rt):
    owner, _peer = spawn(100)
    buf = await owner.handle.call_one()
    with pytest.raises(ValueError, match=r"elements \[90, 110\) are outside the buffer of 100"):
        buf.read_into(torch.empty(20), offset=90)
    with pytest.raises(ValueError, match="size=30 elements but the tensor holds only 20"):
        buf.read_into(torch.empty(20), size=30)
    with pytest.raises(TypeError, match="dtype mismatch: the buffer holds float32, the tensor is float64"):
        buf.write_from(torch.zeros(10, dtype=torch.float64))
    with pytest.raises(ValueError, match="not contiguous.*contiguous()"):
        buf.read_into(torch.empty(10, 4).t())
    with pytest.raises(ValueError, match="read-only"):
        TensorBuffer.read_into(buf, memoryview(b"x" * 400).cast("f"))
    with pytest.raises(TypeError, match="expected a torch tensor, numpy array or buffer"):
        TensorBuffer(object())
    with pytest.raises(ValueError, match="not C-contiguous"):
        TensorBuffer(np.zeros((4, 4))[:, ::2])


async def test_a_dropped_buffer_fails_its_holders(transport):
    owner, peer = spawn(1 << 16)
    buf = await owner.handle.call_one()
    await owner.drop.call_one()
    name, message = await peer.read_error.call_one(buf)
    assert name == "BufferDroppedError" and "dropped by its owner" in message
    with pytest.raises(meshrt.ActorError, match="dropped by its owner"):
        await peer.write.call_one(buf, torch.zeros(4))
    buf.drop()  # the holder's own copy: now refused locally
    with pytest.raises(BufferDroppedError, match="this TensorBuffer was dropped"):
        buf.read_into(torch.empty(4))


async def test_an_owner_that_died_gives_object_lost(transport, failures):
    owner, peer = spawn(1 << 16)
    buf = await owner.handle.call_one()
    pid = await owner.pid.call_one()
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: gone(pid))  # a signal is delivered asynchronously
    name, message = await peer.read_error.call_one(buf, 30.0)
    assert name == "ObjectLostError", message
    assert f"process {buf.owner_pid}" in message and "cannot be reached" in message


async def test_an_owner_killed_mid_transfer_fails_the_transfer_without_hanging(monkeypatch, failures):
    monkeypatch.setenv("MESHRT_TENSOR_TRANSPORT", "ucx")  # tcp: 1 GiB takes long enough to be mid-way
    meshrt.init(num_cpus=2)
    owner, peer = spawn(GIB, torch.uint8)
    buf = await owner.handle.call_one()
    assert await peer.start_read.call_one(buf)
    os.kill(buf.owner_pid, signal.SIGKILL)
    with pytest.raises(ObjectLostError, match="cannot be reached"):
        await peer.finish_read.call_one()


async def test_a_frozen_owner_times_out_cleanly(monkeypatch, failures):
    monkeypatch.setenv("MESHRT_TENSOR_TRANSPORT", "ucx")
    meshrt.init(num_cpus=2)
    owner, peer = spawn(1 << 20)
    buf = await owner.handle.call_one()
    os.kill(buf.owner_pid, signal.SIGSTOP)
    try:
        name, message = await peer.read_error.call_one(buf, 1.0)
    finally:
        os.kill(buf.owner_pid, signal.SIGKILL)
    assert name == "ObjectLostError" and "no reply within 1.0 s" in message


def test_extension_reports_how_it_was_built_and_whether_there_is_a_gpu():
    from meshrt import _C

    info = _C.build_info()
    assert set(info) == {"cuda", "ucx_api"} and info["ucx_api"].startswith("1.")
    if shutil.which("nvcc") and os.environ.get("MESHRT_CUDA") != "0":
        assert info["cuda"], "a CUDA toolkit is here, so pip install should have built the CUDA variant"
    count, why = _C.cuda_available()
    if count == 0:
        assert why.startswith("no GPU") or "built without CUDA" in why
    if info["cuda"]:
        assert all(hasattr(_C, f) for f in ("cuda_ipc_export", "cuda_ipc_open", "cuda_memcpy"))


# -- GPU (pytest -m gpu; skipped without one) -----------------------------------------------

class CudaOwner(Actor):
    def __init__(self, n):
        self.t = pattern(n, torch.float32).cuda()
        self.buf = TensorBuffer(self.t)

    @endpoint
    def handle(self):
        return self.buf

    @endpoint
    def values(self):
        return self.t.cpu()


class CudaPeer(Actor):
    @endpoint
    async def roundtrip(self, buf):
        on_gpu = torch.empty(buf.numel, dtype=buf.dtype, device="cuda")
        await buf.read_into(on_gpu)
        on_cpu = torch.empty(buf.numel, dtype=buf.dtype)
        await buf.read_into(on_cpu)
        assert torch.equal(on_gpu.cpu(), on_cpu)
        await buf.write_from(on_gpu * 2)
        return on_cpu


@pytest.mark.gpu
@pytest.mark.skipif(detect_gpu_count() < 2, reason="needs two GPUs (one GPU: tests/test_gpu.py)")
@pytest.mark.parametrize("path", ["auto", "ucx"])
async def test_gpu_buffers_through_cuda_ipc_and_ucx(monkeypatch, path):
    if path == "ucx":
        monkeypatch.setenv("MESHRT_TENSOR_TRANSPORT", "ucx")
    meshrt.init()
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    owner = procs.slice(gpus=0).spawn("owner", CudaOwner, 1 << 22)
    peer = procs.slice(gpus=1).spawn("peer", CudaPeer)
    buf = await owner.handle.call_one()
    assert buf.device.startswith("cuda")
    first = await peer.roundtrip.call_one(buf)
    assert torch.equal(first, pattern(1 << 22, torch.float32))
    assert torch.equal(await owner.values.call_one(), first * 2)


_FORK_AFTER_OPEN = """
import os, sys, torch
from meshrt.tensor import TensorBuffer
t = torch.arange(1 << 16, dtype=torch.float32)
buf = TensorBuffer(t)  # opens this process's UCX worker
pid = os.fork()
if pid == 0:  # UCX cannot work here: a clear error, not the parent's worker, not a hang
    mine = TensorBuffer(torch.zeros(4))  # registers nothing with UCX, still a buffer
    try:
        buf.read_into(torch.empty(1 << 16), timeout=20).get(timeout=30)
    except RuntimeError as err:
        os._exit(0 if "forked" in str(err) and mine.nbytes == 16 else 1)
    os._exit(2)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


def test_a_child_forked_with_ucx_open_gets_a_clear_error():
    env = dict(os.environ, MESHRT_TENSOR_TRANSPORT="ucx")
    done = run_python(_FORK_AFTER_OPEN, 90, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0", done.stderr

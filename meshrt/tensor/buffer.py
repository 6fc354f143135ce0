"""TensorBuffer: a small picklable handle to registered memory that any process can
read from or write to one-sidedly, while the owner's code does nothing.

The owner registers its tensor with UCX (and, for CUDA memory, exports a CUDA IPC
handle). A holder of the handle picks the path per transfer: a plain copy in the
owner's own process, CUDA IPC between processes of one machine when GPU memory is
involved, UCX otherwise (shared memory on one machine, tcp or RDMA across machines).

Dropping: each process keeps a registered table of 64-bit generations, one slot per
live buffer. A handle carries its slot and generation; a write checks the slot
first and a read checks it after its bytes arrived, so a buffer dropped by its owner
fails with BufferDroppedError instead of handing back stale memory.
"""

from __future__ import annotations

import os
import random
import sys
import threading
from dataclasses import dataclass
from typing import Any

from .. import _C
from .._private.procutil import machine_id as _machine_id
from ..exceptions import ObjectLostError
from ..mesh.future import Future, from_concurrent
from . import cma, cuda_ipc
from .memory import Region, region_of
from .ucx import Engine, TransferError, engine_or_none, why_unavailable

DEFAULT_TIMEOUT_S = 60.0
_SLOTS = 1 << 16


class BufferDroppedError(ObjectLostError):
    """The TensorBuffer was dropped (by its owner, or this handle by its holder)."""


@dataclass(frozen=True)
class _Handle:
    """What travels: ~400 bytes with UCX's tcp and shared-memory addresses."""

    pid: int
    machine: str
    address: bytes  # owner's UCX worker
    rkey: bytes
    ptr: int
    nbytes: int
    dtype: str
    itemsize: int
    shape: tuple
    device: str
    slot_ptr: int  # this buffer's generation word in the owner's slot table
    slot_rkey: bytes
    generation: int
    ipc: tuple | None  # (CUDA IPC handle, offset, device) for CUDA memory


class _Slots:
    """The owner's table of generations (registered once per process)."""

    def __init__(self) -> None:
        import numpy as np

        self.table = np.zeros(_SLOTS, dtype=np.uint64)
        self.memh, self.rkey = 0, b""
        if engine_or_none() is not None:
            self.memh, self.rkey = _C.ucx_mem_map(self.table.ctypes.data, self.table.nbytes, False)
        self.free = list(range(_SLOTS - 1, -1, -1))
        self.lock = threading.Lock()
        self.regions: dict[int, tuple[int, int]] = {}  # slot -> (ptr, nbytes) of a CPU buffer

    def claim(self, cpu_region: tuple[int, int] | None) -> tuple[int, int]:
        """A slot and its generation; ``cpu_region`` (ptr, nbytes): what ``read_owned`` may copy."""
        with self.lock:
            if not self.free:
                raise RuntimeError(f"more than {_SLOTS} live TensorBuffers in one process; drop() some")
            slot = self.free.pop()
            if cpu_region is not None:
                self.regions[slot] = cpu_region
        generation = random.getrandbits(63) | 1
        self.table[slot] = generation
        return slot, generation

    def release(self, slot: int) -> None:
        self.table[slot] = 0
        with self.lock:
            self.regions.pop(slot, None)
            self.free.append(slot)

    def slot_of(self, slot_ptr: int) -> int | None:
        index = slot_ptr - self.address(0)
        return index // 8 if index % 8 == 0 and 0 <= index // 8 < _SLOTS else None

    def address(self, slot: int) -> int:
        return self.table.ctypes.data + 8 * slot


_drop_lock = threading.Lock()
_slots: tuple[int, _Slots] | None = None  # (pid, table): a forked child makes its own
_slots_lock = threading.Lock()


def read_owned(slot_ptr: int, generation: int, ptr: int, nbytes: int) -> bytes:
    """Owner: a copy of one of this process's live CPU buffers, for a holder whose
    transfers cannot reach us (see inline_reads.py). Only what a live buffer
    registered, exactly as registered: a holder names memory, it does not choose it.
    Raises BufferDroppedError otherwise, or when the buffer was dropped meanwhile."""
    import ctypes

    slots = _owner_slots()
    index = slots.slot_of(slot_ptr)
    with slots.lock:
        region = slots.regions.get(index) if index is not None else None
    if region != (ptr, nbytes) or slots.table[index] != generation:
        raise BufferDroppedError(reason="no such live buffer here: it was dropped, or is not CPU memory")
    data = ctypes.string_at(ptr, nbytes)
    if slots.table[index] != generation:  # (dropped, maybe reused, while we copied)
        raise BufferDroppedError(reason="the buffer was dropped while it was read")
    return data


def forget_slots() -> None:
    """The UCX worker closed: the next buffer registers a fresh slot table."""
    global _slots
    with _slots_lock:
        _slots = None


def _owner_slots() -> _Slots:
    global _slots
    with _slots_lock:
        if _slots is None or _slots[0] != os.getpid():
            _slots = (os.getpid(), _Slots())
        return _slots[1]


class TensorBuffer:
    """``TensorBuffer(t)`` registers ``t``'s memory (no copy) and is a picklable handle
    to it. Holders call ``read_into(dst)`` and ``write_from(src)``; both are awaitable
    and have ``.get(timeout=)``. Offsets and sizes count elements of ``dtype``.

    The owner keeps ``t`` alive until ``drop()``; a contiguous CPU or CUDA tensor, a
    numpy array or a writable buffer (bytearray, memoryview) may be registered.
    """

    __slots__ = ("_h", "_local", "_memh", "_engine", "_slot", "_slots", "_dropped", "__weakref__")

    def __init__(self, tensor: Any) -> None:
        region = region_of(tensor, "TensorBuffer()")
        engine = engine_or_none()
        slots = _owner_slots()
        memh, rkey = (0, b"")
        if region.nbytes and engine is not None:
            memh, rkey = _C.ucx_mem_map(region.ptr, region.nbytes, region.is_cuda)
        try:
            ipc = cuda_ipc.export(region.ptr) if region.is_cuda and region.nbytes else None
            slot, generation = slots.claim(None if region.is_cuda else (region.ptr, region.nbytes))
        except BaseException:
            if memh:
                _C.ucx_mem_unmap(memh)
            raise
        self._local: Region | None = region
        self._memh = memh
        self._engine = engine  # the registration belongs to this engine's context
        self._slot = slot
        self._slots = slots
        self._dropped = False
        self._h = _Handle(os.getpid(), _machine_id(), engine.address if engine else b"", rkey, region.ptr,
                          region.nbytes, region.dtype, region.itemsize, tuple(region.shape), region.device,
                          slots.address(slot), slots.rkey, generation, ipc)

    @classmethod
    def _from_handle(cls, handle: _Handle) -> TensorBuffer:
        buf = cls.__new__(cls)
        buf._h = handle
        buf._local = None
        buf._memh = 0
        buf._engine = None
        buf._slot = -1
        buf._slots = None
        buf._dropped = False
        return buf

    def __reduce__(self):
        if self._dropped:
            raise BufferDroppedError(reason="a dropped TensorBuffer cannot be sent; make a new one")
        return (TensorBuffer._from_handle, (self._h,))

    # -- what it describes ----------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        return self._h.nbytes

    @property
    def numel(self) -> int:
        return self._h.nbytes // self._h.itemsize if self._h.itemsize else 0

    @property
    def shape(self) -> tuple:
        return self._h.shape

    @property
    def dtype(self):
        """A torch.dtype when torch is importable, else the dtype's name."""
        torch = sys.modules.get("torch")
        if torch is None:
            try:
                import torch
            except ImportError:
                return self._h.dtype
        return getattr(torch, self._h.dtype, self._h.dtype)

    @property
    def device(self) -> str:
        """Where the owner's memory is: "cpu" or "cuda:N" (the owner's numbering)."""
        return self._h.device

    @property
    def owner_pid(self) -> int:
        return self._h.pid

    def __repr__(self) -> str:
        state = "dropped" if self._dropped else ("owned here" if self._local is not None else f"pid {self._h.pid}")
        return f"<TensorBuffer {self._h.dtype}{list(self._h.shape)} on {self._h.device}, {state}>"

    # -- transfers ------------------------------------------------------------------------

    def read_into(self, dst: Any, offset: int = 0, size: int | None = None,
                  timeout: float | None = DEFAULT_TIMEOUT_S) -> Future:
        """Copy ``size`` elements (default: as many as ``dst`` holds) starting at element
        ``offset`` of this buffer into ``dst``."""
        region = region_of(dst, "read_into(dst)")
        if not region.writable:
            raise ValueError("read_into(dst): dst is read-only; pass a writable tensor, array or bytearray")
        count = self._check(region, offset, size, "read_into")
        return self._transfer(False, region, offset, count, timeout)

    def write_from(self, src: Any, offset: int = 0, timeout: float | None = DEFAULT_TIMEOUT_S) -> Future:
        """Copy all of ``src`` into this buffer, starting at element ``offset``."""
        region = region_of(src, "write_from(src)")
        count = self._check(region, offset, None, "write_from")
        return self._transfer(True, region, offset, count, timeout)

    def drop(self) -> None:
        """Owner: unregister the memory and let the tensor go; holders' transfers fail
        with BufferDroppedError. Holder: forget this handle. Safe from any thread, twice.

        A holder's write that passed its check just before the owner dropped may still
        land in the old memory: drop a buffer once its holders are done with it."""
        with _drop_lock:
            if self._dropped:
                return
            self._dropped = True
        if self._local is not None:
            self._slots.release(self._slot)
            if self._memh and self._engine is not None and self._engine is Engine._instance:
                _C.ucx_mem_unmap(self._memh)  # (a closed engine took its registrations along)
            self._local = None
            return
        h = self._h
        if h.ipc is not None and h.machine == _machine_id():
            handle, _offset, _device = h.ipc
            cuda_ipc.forget(handle)
        if h.rkey and Engine._instance is not None:
            Engine._instance.forget_rkey(h.address, h.rkey)

    def _check(self, region: Region, offset: int, size: int | None, op: str) -> int:
        h = self._h
        if self._dropped:
            raise BufferDroppedError(reason=f"{op}: this TensorBuffer was dropped")
        if region.dtype != h.dtype:
            raise TypeError(f"{op}: dtype mismatch: the buffer holds {h.dtype}, the tensor is {region.dtype}; "
                            f"convert with .to({h.dtype}) or view it as {h.dtype}")
        numel = self.numel
        count = region.numel if size is None else size
        if size is not None and size > region.numel:
            raise ValueError(f"{op}: size={size} elements but the tensor holds only {region.numel}")
        if offset < 0 or count < 0 or offset + count > numel:
            raise ValueError(f"{op}: elements [{offset}, {offset + count}) are outside the buffer of {numel} "
                             f"{h.dtype} elements; check offset= and size=")
        return count

    def _transfer(self, is_put: bool, region: Region, offset: int, count: int, timeout: float | None) -> Future:
        import concurrent.futures

        h = self._h
        nbytes = count * h.itemsize
        remote = h.ptr + offset * h.itemsize
        done: concurrent.futures.Future = concurrent.futures.Future()
        _Transfer(self, is_put, region, remote, nbytes, timeout, done).start()
        return from_concurrent(done)


class _Transfer:
    """One read or write: the copy by the best path, and the generation check (before
    a write, after a read)."""

    def __init__(self, buf: TensorBuffer, is_put: bool, region: Region, remote: int, nbytes: int,
                 timeout: float | None, done) -> None:
        self.h = buf._h
        self.is_put, self.region, self.remote, self.nbytes = is_put, region, remote, nbytes
        self.timeout, self.done = timeout, done

    def start(self) -> None:
        h = self.h
        if self.nbytes == 0:
            self.done.set_result(None)
            return
        cuda = self.region.is_cuda or h.device.startswith("cuda")
        if cuda:
            _sync_cuda(self.region if self.is_put else None)
        same_machine = h.machine == _machine_id() and os.environ.get("MESHRT_TENSOR_TRANSPORT") != "ucx"
        if h.pid == os.getpid() and same_machine:
            self._local_copy(cuda)
        elif same_machine and cuda and h.ipc is not None and cuda_ipc.available()[0]:
            self._checked(self._ipc_copy)
        elif same_machine and not cuda and not cma.refused(h.pid):
            op = cma.transfer(h.pid, self.region.ptr, self.remote, self.nbytes, self.is_put, h.slot_ptr,
                              h.generation)
            self._chain(op, self._finish, on_refused=lambda: self._checked(self._ucx_copy))
        else:
            self._checked(self._ucx_copy)

    def _checked(self, copy) -> None:
        """The copy and the generation check: before a write, after a read."""
        if self.is_put:
            self._generation(then=lambda: copy(then=self._finish))
        else:
            copy(then=lambda: self._generation(then=self._finish))

    # -- paths ----------------------------------------------------------------------------

    def _local_copy(self, cuda: bool) -> None:
        slots = _owner_slots()  # the handle may have come back here: find its slot by address
        index = slots.slot_of(self.h.slot_ptr)
        if index is None or slots.table[index] != self.h.generation:
            self._fail(self._dropped_error())
            return
        src, dst = (self.region.ptr, self.remote) if self.is_put else (self.remote, self.region.ptr)
        if cuda:
            device = self.region.device_index if self.region.is_cuda else int(self.h.device.split(":")[1])
            self._chain(cuda_ipc.copy(dst, src, self.nbytes, device), self._finish)
        else:
            import ctypes

            ctypes.memmove(dst, src, self.nbytes)
            self._finish()

    def _ipc_copy(self, then) -> None:
        handle, offset, _owner_device = self.h.ipc
        # Opened and copied on one of this process's GPUs (the owner's numbering may
        # not be ours); CUDA reaches the owner's GPU by peer access.
        device = self.region.device_index if self.region.is_cuda else 0
        try:
            peer = cuda_ipc.peer_pointer(handle, offset + (self.remote - self.h.ptr), device)
        except RuntimeError as err:
            self._fail(self._lost_error(str(err)))
            return
        src, dst = (self.region.ptr, peer) if self.is_put else (peer, self.region.ptr)
        self._chain(cuda_ipc.copy(dst, src, self.nbytes, device, handle), then)

    def _ucx_copy(self, then) -> None:
        if not self._ucx_ready():
            return
        op = Engine.get().transfer(self.is_put, self.h.address, self.h.rkey, self.region.ptr, self.nbytes,
                                   self.remote, self.region.is_cuda, self.timeout)
        self._chain(op, then)

    def _generation(self, then) -> None:
        """Is the buffer still the one the handle names? (cross-memory attach, else UCX)"""
        h = self.h
        if h.machine == _machine_id() and not cma.refused(h.pid):
            self._chain(cma.transfer(h.pid, 0, 0, 0, False, h.slot_ptr, h.generation), then,
                        on_refused=lambda: self._ucx_generation(then))
        else:
            self._ucx_generation(then)

    def _ucx_generation(self, then) -> None:
        if not self._ucx_ready():
            return
        word = _word()
        h = self.h
        op = Engine.get().transfer(False, h.address, h.slot_rkey, word.ctypes.data, 8, h.slot_ptr, False,
                                   self.timeout)
        self._chain(op, lambda: self._compare(word, then), keep=word)

    def _ucx_ready(self) -> bool:
        if not self.h.address:
            self._fail(RuntimeError(f"TensorBuffer: the owner (process {self.h.pid}) has no UCX transport, "
                                    "and no other path reaches it from here; install libucx-cu12 there "
                                    "or unset MESHRT_UCX"))
            return False
        if engine_or_none() is None:
            self._fail(RuntimeError(f"TensorBuffer: UCX is unavailable in this process ({why_unavailable()}) "
                                    "and the owner is on another machine"))
            return False
        return True

    def _compare(self, word, then) -> None:
        if int(word[0]) != self.h.generation:
            self._fail(self._dropped_error())
        else:
            then()

    # -- settling -------------------------------------------------------------------------

    def _chain(self, op, then, keep=None, on_refused=None) -> None:
        def settled(f) -> None:
            _ = keep  # scratch memory must live until the copy is done with it
            err = f.exception()
            if err is None:
                then()
            elif isinstance(err, cma.GenerationMismatch):
                self._fail(self._dropped_error())
            elif isinstance(err, PermissionError) and on_refused is not None:
                cma.refuse(self.h.pid)
                on_refused()
            elif isinstance(err, TransferError) and not err.peer_lost:
                self._fail(RuntimeError(f"TensorBuffer transfer failed: {err}"))
            else:
                self._fail(self._lost_error(str(err)))

        op.add_done_callback(settled)

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def _fail(self, err: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(err)

    def _dropped_error(self) -> BufferDroppedError:
        return BufferDroppedError(reason=f"the TensorBuffer of process {self.h.pid} was dropped by its owner")

    def _lost_error(self, why: str) -> ObjectLostError:
        return ObjectLostError(reason=f"the owner of this TensorBuffer (process {self.h.pid} on "
                                      f"{self.h.machine.split('/')[0]}) cannot be reached: {why}")


def _word():
    import numpy as np

    return np.zeros(1, dtype=np.uint64)


def _sync_cuda(region: Region | None) -> None:
    """Let the current stream finish writing a CUDA source before its bytes are read."""
    torch = sys.modules.get("torch")
    # (is_initialized, not is_available: that would start the CUDA driver in every
    # process that reads a CPU buffer, and workers forked after it ignore their
    # CUDA_VISIBLE_DEVICES, see spawn._gpu_driver_started)
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.current_stream(region.device_index if region is not None and region.is_cuda else None).synchronize()

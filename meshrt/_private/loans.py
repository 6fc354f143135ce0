"""Large ``bytes`` handed to a process on this machine by one cross-memory copy.

A ``bytes`` value cannot be a view of shared memory: whoever unpickles one copies it.
Through the store that makes two copies per hop (into a block, out of it) and, for a
result, a round trip to allocate the block. A ``bytes`` is immutable, so instead its
sender keeps it alive and sends a ``Loan`` (where it is in the sender's memory); the
receiver reads it with ``process_vm_readv`` straight into a new ``bytes`` object that
unpickling then uses as is: one copy per hop.

Safety: each loan has a generation word in its lender's table, checked after the
read, so a loan ended before (or while) it was read fails with ObjectLostError
instead of handing back whatever the memory holds now. A call's arguments are lent
until the call is over (the caller ends them, as it frees store blocks); an actor's
result until its caller says ``LoanDone`` (or dies).

An actor that returns, unchanged, a ``bytes`` its caller lent it (an echo, a stage
that passes data through) sends back the caller's own loan: the caller's arguments
are still lent while it takes the reply, so it hands back the object it lent, with no
copy (``borrow`` and ``lender(returning=...)``).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading
from typing import NamedTuple

from .. import _C
from ..exceptions import ObjectLostError
from ..objstore.serialization import SHM_THRESHOLD, Payload, system_error_payload
from .procutil import machine_id as _machine_id

_SLOTS = 4096
SPLIT_BYTES = 4 << 20  # larger reads are split in two (two threads copy faster than one)
MAX_RESULT_BYTES = 64 << 20  # a result is read on its receiver's core loop: bounded


class Loan(NamedTuple):
    machine: str
    pid: int
    ptr: int
    nbytes: int
    slot_ptr: int
    generation: int  # also the token that ends it (LoanDone)


class _Lender:
    """This process's table of generations and what each live loan keeps alive."""

    def __init__(self) -> None:
        self.table = (ctypes.c_uint64 * _SLOTS)()
        self.base = ctypes.addressof(self.table)
        self.free = list(range(_SLOTS - 1, -1, -1))
        self.live: dict[int, tuple] = {}  # generation -> (slot, value, borrower or None)
        self.gone: set[int] = set()  # borrowers known dead: nothing more is lent to them
        self.lock = threading.Lock()
        self.pid = os.getpid()
        # Generations: a counter from a random start (a process's own sequence never
        # repeats; the user's `random` state is left alone).
        self.next_generation = int.from_bytes(os.urandom(8), "little") >> 2 | 1


_lender: _Lender | None = None
_lender_lock = threading.Lock()


def _this_lender() -> _Lender:
    global _lender
    with _lender_lock:
        if _lender is None or _lender.pid != os.getpid():  # (a forked child starts empty)
            _lender = _Lender()
        return _lender


def available() -> bool:
    """Cross-memory attach works here: off with MESHRT_LOANS=0, and where Yama
    restricts it (ptrace_scope >= 1: a process could not read its parent or siblings)."""
    return os.environ.get("MESHRT_LOANS") != "0" and _attach_allowed()


@functools.cache
def _cpus() -> int:
    return os.cpu_count() or 1  # (~10 us a call: it reads /sys)


@functools.cache
def _attach_allowed() -> bool:
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return f.read().strip() == "0"
    except OSError:  # no Yama: same-user processes may attach
        return sys.platform.startswith("linux")


def lend(value: bytes, borrower: int | None = None) -> Loan | None:
    """Lend ``value`` (kept alive until ``end``); None when the table is full or the
    borrower is known dead (nothing would end the loan)."""
    lender = _this_lender()
    with lender.lock:
        if not lender.free or (borrower is not None and borrower in lender.gone):
            return None
        generation = lender.next_generation
        lender.next_generation = (generation + 2) & ((1 << 63) - 1) | 1
        slot = lender.free.pop()
        lender.table[slot] = generation
        lender.live[generation] = (slot, value, borrower)
    ptr = ctypes.cast(ctypes.c_char_p(value), ctypes.c_void_p).value  # (bytes: its own buffer)
    return Loan(_machine_id(), lender.pid, ptr, len(value), lender.base + 8 * slot, generation)


def unlent(payload):
    """``payload`` (ours) with its loans ended and its buffers to travel instead: for
    a receiver that turned out to be on another host (it could not read them)."""
    end_mine(payload)
    return Payload(payload.data, payload.buffers, payload.refs, payload.is_error)


def end(generation: int) -> None:
    """The loan is over: a read from now on fails; the value may go. Twice is harmless."""
    lender = _lender
    if lender is None or lender.pid != os.getpid():
        return
    with lender.lock:
        live = lender.live.pop(generation, None)
        if live is None:
            return
        lender.table[live[0]] = 0
        lender.free.append(live[0])


def end_all_to(borrower: int) -> None:
    """``borrower`` died: what was lent to it goes, and nothing more is."""
    lender = _this_lender()
    with lender.lock:
        lender.gone.add(borrower)
        gone = [g for g, live in lender.live.items() if live[2] == borrower]
    for generation in gone:
        end(generation)


def outstanding() -> int:
    """Loans that others have still to read (an actor about to exit waits for them)."""
    lender = _lender
    if lender is None or lender.pid != os.getpid():
        return 0
    with lender.lock:
        return sum(1 for live in lender.live.values() if live[2] is not None)


def lender(borrower: int | None = None, max_bytes: int | None = None, returning: tuple = ()):
    """``serialize``'s ``lend``: loans for buffers that are all large ``bytes`` (else
    None: they take the usual path). ``borrower``: who ends the loans by ``LoanDone``
    (None: the lender ends them itself, as for a call's arguments). ``returning``:
    (value, loan) pairs ``borrow`` read from ``borrower``'s loans; a buffer that is one
    of those values goes back as that loan (its lender takes back its own object)."""

    def lend_all(buffers: list) -> tuple | None:
        if any(type(b.obj) is not bytes for b in buffers):  # (a bytearray may change)
            return None
        back = [next((loan for value, loan in returning if value is b.obj), None) for b in buffers]
        total = sum(b.nbytes for b in buffers)
        to_read = sum(b.nbytes for b, loan in zip(buffers, back, strict=True) if loan is None)
        if total < SHM_THRESHOLD or (max_bytes is not None and to_read > max_bytes):
            return None
        made = []
        for b, loan in zip(buffers, back, strict=True):
            loan = loan or lend(b.obj, borrower)
            if loan is None:
                for other in made:
                    if other.pid == os.getpid():
                        end(other.generation)
                return None
            made.append(loan)
        return tuple(made)

    return lend_all


def end_mine(payload) -> None:
    """The lender is done with ``payload`` (a call's arguments): its loans end."""
    for loan in payload.loans:
        if loan.pid == os.getpid():
            end(loan.generation)


def take(payload) -> tuple:
    """A received payload with its loans read: (payload of our own, generations to
    end at the sender). A payload this process lent itself keeps its own buffers; a
    loan of ours sent back (an argument returned unchanged) gives back our own value."""
    if payload.buffers:
        end_mine(payload)
        return Payload(payload.data, payload.buffers, payload.refs, payload.is_error), ()
    generations = foreign_generations(payload)
    try:
        values = tuple(_own_value(loan) if loan.pid == os.getpid() else read(loan) for loan in payload.loans)
    except Exception as err:  # noqa: BLE001 - (a MemoryError too): the caller gets the error
        if not isinstance(err, ObjectLostError):
            err = ObjectLostError("", f"reading a large value lent by process {payload.loans[0].pid} failed: {err!r}")
        return system_error_payload(err), generations
    return Payload(payload.data, values, payload.refs, payload.is_error), generations


def foreign_generations(payload) -> tuple:
    """The loans of a received payload that its sender made (ours sent back excluded)."""
    return tuple(loan.generation for loan in payload.loans if loan.pid != os.getpid())


def _own_value(loan: Loan) -> bytes:
    lender = _lender
    live = None
    if lender is not None and lender.pid == os.getpid() and loan.machine == _machine_id():
        with lender.lock:
            live = lender.live.get(loan.generation)
    if live is None:
        raise ObjectLostError("", "a large value this process lent came back after its loan ended")
    return live[1]


def borrow(payload) -> tuple:
    """A call's arguments with their loans read: (a payload holding the values, the
    (value, loan) pairs, for ``lender(returning=...)``). ObjectLostError when a loan
    cannot be read."""
    values = tuple(read(loan) for loan in payload.loans)
    return Payload(payload.data, values, payload.refs, payload.is_error), tuple(zip(values, payload.loans, strict=True))


def read(loan: Loan) -> bytes:
    """The lent bytes, as a new ``bytes``; ObjectLostError when they cannot be had."""
    if loan.machine != _machine_id():
        raise ObjectLostError("", f"a large value lent by process {loan.pid} of another machine cannot be read here")
    parts = 2 if loan.nbytes >= SPLIT_BYTES and _cpus() > 1 else 1
    try:
        value = _C.cma_read_bytes(loan.pid, loan.ptr, loan.nbytes, parts)
        word = _C.cma_read_bytes(loan.pid, loan.slot_ptr, 8, 1)
    except PermissionError as err:
        raise ObjectLostError("", f"the kernel refused to read a large value lent by process {loan.pid} ({err}); "
                                  "set MESHRT_LOANS=0 where cross-memory attach is not allowed") from None
    except OSError as err:
        raise ObjectLostError("", f"reading a large value lent by process {loan.pid} failed ({err}): "
                                  "it exited, or freed the value") from None
    if int.from_bytes(word, "little") != loan.generation:
        raise ObjectLostError("", f"process {loan.pid} stopped lending a large value before it was read")
    return value

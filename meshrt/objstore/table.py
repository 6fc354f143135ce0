"""The per-process object table: values this process owns or borrows, and their counts.

Ownership follows Ray's design (Wang et al., NSDI 2021): the process that made a ref
owns the value's lifetime. An owned entry lives while this process holds a ref to it
(``local``), some other process borrows it (``borrowers``: per-borrower counts that
may dip below zero when messages cross, which is why they are kept per borrower and
the entry is freed only when every one of them is back to zero), or its producer has
not delivered yet (``pending``). A borrowed entry counts how many times the value
was sent here (``receipts``); when the last local ref goes, those receipts are given
back to the owner in one batched message.

``local`` is changed only through ``deltas``, a deque any thread may append to
(ObjectRef creation and deletion), drained on the core loop: creation and deletion
are cheap on the hot path, and every change to a count happens on one thread, in
order.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable

from .serialization import Payload


class ObjectEntry:
    __slots__ = (
        "id", "owner", "payload", "waiters", "local", "borrowers", "receipts",
        "held", "pending", "fetching", "last_access", "on_release", "seen",
    )

    def __init__(self, oid: int, owner: int, pending: bool = False):
        self.id = oid
        self.owner = owner
        self.payload: Payload | None = None
        self.waiters: list | None = None
        self.local = 0
        self.borrowers: dict[int, int] | None = None
        self.receipts = 0
        self.held: list | None = None  # ObjectRefs contained in payload, kept alive with it
        self.pending = pending
        self.fetching = False
        self.last_access = 0.0
        # Owned: called on the core loop once no process holds a ref any more (an actor
        # handle's entry ends its actor; a handed-on response port's fails its call).
        self.on_release = None
        self.seen = False  # (owned: its value was read or handed on; unhandled_errors.py)

    def remove_waiter(self, waiter) -> None:
        """Forget a waiter that gave up (timeout), so polling callers do not pile up."""
        waiters = self.waiters
        if waiters:
            try:
                waiters.remove(waiter)
            except ValueError:
                pass

    def add_waiter(self, waiter) -> None:
        """Register ``waiter.fire(entry)``; safe from any thread (see ``resolve``)."""
        if self.waiters is None:
            self.waiters = [waiter]
        else:
            self.waiters.append(waiter)
        if self.payload is not None:  # resolved meanwhile: fire ourselves (idempotent)
            waiter.fire(self)

    def __repr__(self) -> str:
        state = "ready" if self.payload is not None else ("pending" if self.pending else "unknown")
        return f"<ObjectEntry {self.id:x} owner={self.owner} {state} local={self.local}>"


class ObjectTable:
    """Entries by object id, plus the delta queue that drives local counts."""

    def __init__(self, my_id: int) -> None:
        self.my_id = my_id
        self.entries: dict[int, ObjectEntry] = {}
        self.deltas: collections.deque = collections.deque()

    def owned(self, oid: int, pending: bool = False) -> ObjectEntry:
        entry = ObjectEntry(oid, self.my_id, pending)
        self.entries[oid] = entry
        return entry

    def borrowed(self, oid: int, owner: int) -> ObjectEntry:
        entry = self.entries.get(oid)
        if entry is None:
            entry = self.entries.setdefault(oid, ObjectEntry(oid, owner))
        return entry

    def resolve(self, entry: ObjectEntry, payload: Payload, held: list | None = None) -> None:
        """Set the value and wake every waiter. Loop thread only."""
        if entry.payload is not None:
            return
        entry.held = held or None
        # Publish the payload before reading the waiter list: a waiter added after
        # this line sees the payload and fires itself (ObjectEntry.add_waiter).
        entry.payload = payload
        entry.pending = False
        entry.fetching = False
        waiters = entry.waiters
        if waiters:
            entry.waiters = None
            for waiter in list(waiters):
                waiter.fire(entry)

    def add_borrower(self, entry: ObjectEntry, borrower: int, n: int = 1) -> None:
        if entry.borrowers is None:
            entry.borrowers = {}
        count = entry.borrowers.get(borrower, 0) + n
        if count:
            entry.borrowers[borrower] = count
        else:
            del entry.borrowers[borrower]

    def drop_borrower(self, borrower: int) -> list[ObjectEntry]:
        """Forget every count held by a dead process; returns entries now possibly free."""
        touched = []
        for entry in list(self.entries.values()):  # user threads may add entries meanwhile
            if entry.borrowers and entry.borrowers.pop(borrower, None) is not None:
                touched.append(entry)
        return touched

    def drain(
        self,
        release_owned: Callable[[ObjectEntry], None],
        release_borrowed: Callable[[ObjectEntry], None],
        also_check: Iterable[ObjectEntry] = (),
    ) -> None:
        """Apply queued local-count changes and free what nothing holds any more.

        Freeing an entry drops the refs its value contained, which queues more
        deltas; the loop runs until the queue is empty.
        """
        deltas = self.deltas
        entries = self.entries
        candidates = list(also_check)
        while True:
            while deltas:
                oid, step = deltas.popleft()
                entry = entries.get(oid)
                if entry is not None:
                    entry.local += step
                    if entry.local <= 0:
                        candidates.append(entry)
            if not candidates:
                return
            batch, candidates = candidates, []
            for entry in batch:
                if entry.local > 0 or entries.get(entry.id) is not entry:
                    continue
                if entry.owner == self.my_id:
                    if entry.pending or entry.borrowers:
                        continue
                    del entries[entry.id]
                    release_owned(entry)
                else:
                    if entry.fetching and entry.waiters:
                        continue
                    del entries[entry.id]
                    release_borrowed(entry)
                entry.held = None  # drops contained refs -> more deltas

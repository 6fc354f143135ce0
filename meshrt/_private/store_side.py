"""How a process uses its host's object store: where a value's large buffers go, which
blocks a call's receiver gets pinned, and when a block goes back.

A mixin of Core (which provides ``store``, ``table``, ``io``, ``worker_id``, ``put``,
``drain`` and ``remote_peer``); the driver, which keeps the head host's store,
overrides the pinning and sealing hooks.
"""

from __future__ import annotations

import pickle
from functools import partial

from .. import exceptions as exc
from ..objstore.client import layout_of
from ..objstore.serialization import Payload, error_from_payload
from ..objstore.store import AlreadyStored
from . import args as argpack
from . import ids, loans
from .lent_payloads import drop_lent, lend_args


class StoreSide:
    """Core's side of the host store (see the module docstring)."""

    def placer(self, key: int, owner: int):
        """Where a value's large buffers go: a block in the host store owned by ``owner``.

        Called for every value sent, so it only binds arguments; the work happens in
        ``_place`` for the few values large enough to go to the store.
        """
        if self.store is None or self.remote_peer(owner):
            return None  # inline: the owner's host cannot map this host's store
        return partial(self._place, key, owner)

    def _place(self, key: int | None, owner: int, buffers: list) -> tuple:
        if self.table.deltas and not self.store.backend.has_used_room(layout_of(buffers)[0]):
            self.flush_frees()  # blocks dropped meanwhile may be what makes room
        seal = not self.owner_seals(owner)
        if key is not None:
            try:
                return self.store.put(key, owner, buffers, seal=seal)
            except AlreadyStored:  # a retried generator yields again what the owner has:
                pass  # a key of its own, freed by the owner on arrival (on_stream_item)
        return self.store.put(ids.new_put_id(), owner, buffers, seal=seal)

    def owner_seals(self, owner: int) -> bool:
        """Does ``owner`` keep this host's store, sealing a block when the value arrives?"""
        return False

    def arg_placer(self):
        """Large call arguments get a block of their own (keyed when placed), freed when
        the call is done."""
        return self.placer(None, self.worker_id)

    def pack_args(self, args: tuple, kwargs: dict, what: str, remote: bool, lend: bool = False) -> tuple:
        """A call's (payload, deps, pins): large arguments in this host's store, or, for
        a callee on another host (``remote``), lent to it (lent_payloads.py). ``lend``:
        large ``bytes`` for an actor of this host are lent in place instead (loans.py),
        until the call is over."""
        if remote:
            payload, deps, pins = argpack.pack(args, kwargs, what, None)
            return lend_args(self, payload), deps, pins
        return argpack.pack(args, kwargs, what, self.arg_placer(), self.args_lender if lend else None)

    def flush_frees(self) -> None:
        """Before taking a large block: apply refs dropped since the last drain, so
        ``del ref; put(x)`` reuses the block (and its already-mapped pages) at once."""
        if self.table.deltas and not self.io.in_loop():
            self.io.call_sync(self.drain, timeout=30)

    def drop_left_behind(self, oid: int, payload: Payload | None = None) -> None:
        """The value of ``oid`` arrived under a key of its own (its retry found an earlier
        attempt's block at ``oid``: AlreadyStored), or as the death of its writer (then
        ``payload`` is None or that error): a block a dead attempt wrote for it and never
        delivered goes back. Only the owner knows that it never got that block. A no-op
        when there is none."""
        if self.store is None:
            return
        if payload is not None:
            if payload.is_error:
                # (a user's error comes from a live writer, which kept no block: not unpickled here)
                if pickle.loads(payload.data)[0] != "sys" or not isinstance(
                        error_from_payload(payload), (exc.WorkerCrashedError, exc.RayActorError)):
                    return
            elif type(payload) is not Payload or payload.shm is None or payload.shm[0] == oid:
                return
        self.store.backend.free(oid)

    def release_payload(self, payload: Payload | None) -> None:
        """The owner is done with a value: give its shared-memory block back (or the
        buffers a call's arguments were lent from, lent_payloads.py)."""
        if type(payload) is not Payload:
            if payload is not None:
                drop_lent(payload)
        elif payload.loans is not None:
            loans.end_mine(payload)
        elif payload.shm is not None and self.store is not None:
            self.store.free(payload.shm)

    def pin_for(self, peer: int, payload) -> tuple:
        """Pins taken on ``peer``'s behalf for the store blocks of ``payload`` (only the
        store's owner can); see ActorCall.pins."""
        return ()

    def unpin_for(self, peer: int, pins: tuple) -> None:
        """Give back pin_for's pins when the message carrying them was never sent."""

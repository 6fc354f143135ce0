"""Identifiers for tasks, objects and actors, minted without coordination.

An id is a plain int: ``issuer << 64 | sequence``. The issuer is 56 random bits
drawn per process (and again in a forked child), so ids minted in different
processes never collide, and ints hash and pickle faster than bytes or UUIDs.
An object id is its task id shifted left by 32 bits plus the return index, so the
task behind any ref is one shift away.
"""

from __future__ import annotations

import itertools
import os
import secrets

_INDEX_BITS = 32
OBJECT_BYTES = (56 + 64 + _INDEX_BITS + 7) // 8  # the most an object id takes (issuer, sequence, index)
OBJECT_HEX = 2 * OBJECT_BYTES
_issuer = 0
_counter = itertools.count(1)


def _reseed() -> None:
    global _issuer, _counter
    _issuer = secrets.randbits(56) | 1
    _counter = itertools.count(1)


_reseed()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed)


def new_task_id() -> int:
    """A fresh task (or actor) id, unique across the cluster."""
    return (_issuer << 64) | next(_counter)


def object_id(task_id: int, index: int) -> int:
    """The id of the ``index``-th object produced by ``task_id``."""
    return (task_id << _INDEX_BITS) | index


def task_of(oid: int) -> int:
    """The task that produced object ``oid``."""
    return oid >> _INDEX_BITS


def new_put_id() -> int:
    """A fresh object id for ``put``: index 0 of a task id nobody runs."""
    return object_id(new_task_id(), 0)


def to_hex(any_id: int, width: int = 30) -> str:
    return format(any_id, f"0{width}x")

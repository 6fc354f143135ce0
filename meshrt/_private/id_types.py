"""Ray's id classes (``ray.JobID``, ``ray.ActorID``...), over meshrt's ids.

meshrt's ids are ints (ids.py) shown as hex text. A Ray program compares them, prints
them, and rebuilds them with ``from_hex``/``from_binary``; these classes let it. Most
are the hex text itself (a str, as meshrt's ``get_*_id()`` return it), with Ray's
methods; ActorID is the int that actor handles and messages carry. ``size()`` is the
length of meshrt's id of that kind, in bytes (Ray's ids are longer and structured:
meshrt's do not embed a job in an actor id, so there is no ``ActorID.job_id``).
"""

from __future__ import annotations

import secrets

from . import ids


class HexId(str):
    """An id as its hex text, with Ray's id methods."""

    __slots__ = ()
    SIZE = 28  # bytes (Ray's default; kinds meshrt mints say their own)

    def __new__(cls, hex_text: str = ""):
        text = str(hex_text).lower()
        try:
            bytes.fromhex(text)
        except ValueError:
            raise ValueError(f"{cls.__name__}({hex_text!r}): give the id's hex text (from .hex())") from None
        return super().__new__(cls, text)

    @classmethod
    def from_hex(cls, hex_text: str):
        return cls(hex_text)

    @classmethod
    def from_binary(cls, data: bytes):
        return cls(bytes(data).hex())

    @classmethod
    def from_random(cls):
        return cls(secrets.token_hex(cls.SIZE))

    @classmethod
    def nil(cls):
        return cls("ff" * cls.SIZE)

    @classmethod
    def size(cls) -> int:
        return cls.SIZE

    def hex(self) -> str:
        return str(self)

    def binary(self) -> bytes:
        return bytes.fromhex(self)

    def is_nil(self) -> bool:
        return bool(self) and set(self) == {"f"}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)})"

    def __reduce__(self):
        return (type(self), (str(self),))


class JobID(HexId):
    __slots__ = ()
    SIZE = 4

    @classmethod
    def from_int(cls, value: int):
        return cls(value.to_bytes(cls.SIZE, "little").hex())  # (Ray's byte order)

    def int(self) -> int:
        return int.from_bytes(self.binary(), "little")


class NodeID(HexId):
    __slots__ = ()
    SIZE = 16


class TaskID(HexId):
    __slots__ = ()
    SIZE = 15


class WorkerID(HexId):
    __slots__ = ()
    SIZE = 4


class PlacementGroupID(HexId):
    __slots__ = ()
    SIZE = 14

    @property
    def hex_id(self) -> str:  # (meshrt's earlier name)
        return str(self)


class UniqueID(HexId):
    __slots__ = ()


class FunctionID(HexId):
    __slots__ = ()


class ActorClassID(HexId):
    __slots__ = ()


class ClusterID(HexId):
    __slots__ = ()


class ActorID(int):
    """An actor's id as its handles carry it (``handle._actor_id``): the int meshrt keys
    actors by (messages carry plain ints), with Ray's ActorID's methods; its ``hex()`` is
    what ``get_runtime_context().get_actor_id()`` says inside the actor."""

    __slots__ = ()
    SIZE = 15

    @classmethod
    def from_hex(cls, hex_text: str):
        try:
            return cls(int(hex_text, 16))
        except (TypeError, ValueError):
            raise ValueError(f"ActorID.from_hex({hex_text!r}): give the actor id's hex text") from None

    @classmethod
    def from_binary(cls, data: bytes):
        return cls(int.from_bytes(bytes(data), "big"))

    @classmethod
    def from_random(cls):
        return cls(secrets.randbits(8 * cls.SIZE))

    @classmethod
    def nil(cls):
        return cls((1 << (8 * cls.SIZE)) - 1)

    @classmethod
    def size(cls) -> int:
        return cls.SIZE

    def hex(self) -> str:
        return ids.to_hex(self)

    def binary(self) -> bytes:
        return bytes.fromhex(self.hex())

    def is_nil(self) -> bool:
        return self == (1 << (8 * self.SIZE)) - 1

    def __repr__(self) -> str:
        return f"ActorID({self.hex()})"

    def __reduce__(self):
        return (ActorID, (int(self),))

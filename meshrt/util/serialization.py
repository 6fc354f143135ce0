"""Ray's custom serializers: ``register_serializer(cls, serializer=, deserializer=)``
for a type pickle cannot take (a lock, a handle to a C library) or should take
differently, and ``deregister_serializer(cls)``.

As in Ray, a registration holds in the process that makes it: register in each worker
that sends such values too (in the task or actor, or in a ``worker_process_setup_hook``).
The receiving side needs nothing: the deserializer travels with each value (by value,
through cloudpickle, when it is defined in ``__main__`` or a lambda).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..objstore import serialization

_BUILTIN_SCALARS = (type(None), bool, int, float, str, bytes)


def register_serializer(cls: type, *, serializer: Callable[[Any], Any], deserializer: Callable[[Any], Any]) -> None:
    """Send each value of exactly ``cls`` as ``serializer(value)`` (anything picklable,
    refs included), rebuilt where it lands as ``deserializer(that)``. Replaces an
    earlier registration for ``cls``."""
    if not isinstance(cls, type):
        raise TypeError(f"register_serializer(cls, ...): cls is the class whose values get the serializer, "
                        f"got {cls!r}")
    if cls in _BUILTIN_SCALARS:
        raise ValueError(f"register_serializer({cls.__name__}, ...): built-in {cls.__name__} values are always "
                         f"sent as they are; register a class of your own (wrap the value in it)")
    for name, fn in (("serializer", serializer), ("deserializer", deserializer)):
        if not callable(fn):
            raise TypeError(f"register_serializer({cls.__qualname__}, {name}=...): give a function of one "
                            f"argument, got {fn!r}")

    def reduce(value: Any) -> tuple:
        return (_rebuild, (deserializer, serializer(value)))

    serialization.set_custom_reducer(cls, reduce)


def deregister_serializer(cls: type) -> None:
    """Values of ``cls`` are pickled the usual way again in this process."""
    if not isinstance(cls, type):
        raise TypeError(f"deregister_serializer(cls): give the class registered, got {cls!r}")
    serialization.set_custom_reducer(cls, None)


def _rebuild(deserializer: Callable[[Any], Any], serialized: Any) -> Any:
    return deserializer(serialized)

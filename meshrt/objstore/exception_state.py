"""Exceptions that pickle cannot rebuild: one whose ``__init__`` cannot be called again
with its own ``args`` (``__init__(self, code, msg)`` calling ``super().__init__(msg)``)
travels as its class, args and the attributes that pickle (its ``__dict__``, slots and
OSError's fields), and is rebuilt without calling ``__init__``."""

from __future__ import annotations

import pickle

import cloudpickle


def dumps_by_state(err: BaseException) -> bytes | None:
    """An exception whose ``__init__`` cannot take back its own ``args`` (``__init__(self,
    code, msg)`` calling ``super().__init__(msg)``) travels as its class, args and the
    attributes that pickle, and is rebuilt without calling ``__init__``: the caller gets
    its class with ``err.code`` (Ray gives an UnserializableException instead)."""
    state = {}
    slots = [n for klass in type(err).__mro__ for n in getattr(klass, "__slots__", ()) if isinstance(n, str)]
    fields = _OS_ERROR_FIELDS if isinstance(err, OSError) else ()
    for name in (*vars(err), *slots, *fields):  # (slots and OSError's fields are not in vars())
        try:
            value = getattr(err, name)
            cloudpickle.dumps(value, protocol=5)
        except Exception:  # noqa: BLE001 - (left out: the rest still travels)
            continue
        if value is None and name in fields:
            continue  # (unset: set to None, OSError's str would show it)
        state[name] = value
    try:
        data = cloudpickle.dumps(_ByState(type(err), err.args, state), protocol=5)
        pickle.loads(data)
        return data
    except Exception:  # noqa: BLE001
        return None


class _ByState:
    def __init__(self, klass: type, args: tuple, state: dict) -> None:
        self.recipe = (klass, args, state)

    def __reduce__(self):
        return (_rebuilt_by_state, self.recipe)


_OS_ERROR_FIELDS = ("errno", "strerror", "filename", "filename2")


def _rebuilt_by_state(klass: type, args: tuple, state: dict) -> BaseException:
    err = klass.__new__(klass, *args)
    err.args = args
    for name, value in state.items():
        try:
            setattr(err, name, value)
        except Exception:  # noqa: BLE001 - (a read-only attribute: the rest still apply)
            pass
    return err

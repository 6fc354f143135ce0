"""``inspect_serializability`` (Ray's ``ray.util`` function of that name): why a value
cannot be sent to another process, down to the parts that cannot be pickled."""

from __future__ import annotations

import inspect
import io
import sys
from typing import Any

_MOST_PARTS = 50  # (of a big container, the first ones are looked at)


class FailureTuple:
    """One part that cannot be pickled: the object, its name, and what holds it."""

    __slots__ = ("obj", "name", "parent")

    def __init__(self, obj: Any, name: str, parent: Any) -> None:
        self.obj, self.name, self.parent = obj, name, parent

    def __hash__(self) -> int:  # (by identity: the objects themselves may not hash)
        return hash((id(self.obj), self.name, id(self.parent)))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, FailureTuple) and other.obj is self.obj and other.name == self.name
                and other.parent is self.parent)

    def __repr__(self) -> str:
        return f"FailureTuple({self.name} [obj={self.obj!r}, parent={self.parent!r}])"


def inspect_serializability(base_obj: Any, name: str | None = None, depth: int = 3,
                            print_file: io.TextIOBase | None = None) -> tuple[bool, set]:
    """``(pickles, failures)``: whether ``base_obj`` pickles as meshrt sends values
    (cloudpickle), and if not, the innermost parts that do not, found by looking
    ``depth`` levels into functions' closures and globals, objects' attributes and
    containers' items. Prints the search as a tree (to ``print_file``, default stdout)."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise ValueError(f"inspect_serializability(depth=...): give a number of levels >= 0; got {depth!r}")
    out = print_file if print_file is not None else sys.stdout
    failures: set = set()
    label = name or _short(base_obj)
    print(f"checking whether {label} can be sent to another process", file=out)
    ok = _inspect(base_obj, label, depth, None, failures, out, "")
    print("it can" if ok else f"it cannot: {len(failures)} part(s) cannot be pickled", file=out)
    return ok, failures


def _inspect(obj: Any, name: str, depth: int, parent: Any, failures: set, out, indent: str) -> bool:
    error = _pickle_error(obj)
    if error is None:
        return True
    print(f"{indent}{name}: cannot be pickled ({error})", file=out)
    inner = [(n, part) for n, part in _parts(obj) if _pickle_error(part) is not None] if depth > 0 else []
    for part_name, part in inner:
        _inspect(part, part_name, depth - 1, obj, failures, out, indent + "    ")
    if not inner:  # (this one is where it fails, as far as the search looks)
        failures.add(FailureTuple(obj, name, parent))
    return False


def _pickle_error(obj: Any) -> str | None:
    import cloudpickle

    try:
        cloudpickle.dumps(obj)
    except Exception as err:  # noqa: BLE001 - any failure is the answer
        return f"{type(err).__name__}: {err}"
    return None


def _parts(obj: Any) -> list:
    """(name, value) of what ``obj`` holds and pickling would carry."""
    if inspect.isfunction(obj):
        found = inspect.getclosurevars(obj)
        return ([(f"closure variable {n!r}", v) for n, v in found.nonlocals.items()]
                + [(f"global {n!r}", v) for n, v in found.globals.items()])
    if isinstance(obj, dict):
        return [(f"[{k!r}]", v) for k, v in list(obj.items())[:_MOST_PARTS]]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [(f"item {i}", v) for i, v in enumerate(list(obj)[:_MOST_PARTS])]
    if inspect.ismethod(obj):
        return [("its instance", obj.__self__), ("its function", obj.__func__)]
    attributes = getattr(obj, "__dict__", None)
    if isinstance(attributes, dict):
        return [(f"attribute {n!r}", v) for n, v in list(attributes.items())[:_MOST_PARTS]]
    return []


def _short(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= 80 else text[:77] + "..."

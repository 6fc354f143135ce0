"""Where a graph's inputs enter: ``with InputNode() as inp:``, with ``inp[i]``,
``inp["key"]`` and ``inp.name`` for parts of them.

As in Ray: ``execute(x)`` with one positional argument makes ``inp`` that value, and
``inp[k]``/``inp.name`` index or read it; with several arguments or keywords,
``inp[i]`` is positional argument i and ``inp.name``/``inp["name"]`` a keyword.
"""

from __future__ import annotations

from typing import Any

from .dag_node import DAGNode


class DAGInputData:
    """The inputs of one execution with more than one argument (or keywords)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._args = list(args)
        self._kwargs = kwargs

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, int):
            if not -len(self._args) <= key < len(self._args):
                raise ValueError(f"the DAG reads positional input {key} (inp[{key}]), but execute() got "
                                 f"{len(self._args)} positional argument(s)")
            return self._args[key]
        if key not in self._kwargs:
            raise ValueError(f"the DAG reads keyword input {key!r} (inp.{key} or inp[{key!r}]), but execute() got "
                             f"keywords {sorted(self._kwargs)}")
        return self._kwargs[key]


class InputNode(DAGNode):
    """The graph's input; build the graph inside ``with InputNode() as inp:``."""

    def __init__(self, *args: Any, input_type: Any = None, **kwargs: Any) -> None:
        super().__init__(args, kwargs, {})
        self._entered = False
        self._input_type = input_type

    def __enter__(self) -> InputNode:
        self._entered = True
        return self

    def __exit__(self, *exc_info: Any) -> None:
        return None

    def __getitem__(self, key: int | str) -> InputAttributeNode:
        _check_key(key)
        return InputAttributeNode(self, key, "__getitem__")

    def __getattr__(self, name: str) -> InputAttributeNode:
        if name.startswith("_"):
            raise AttributeError(name)
        return InputAttributeNode(self, name, "__getattr__")

    def _upstream(self) -> list[DAGNode]:
        return []

    def _run(self, args: tuple, kwargs: dict, results: dict) -> Any:
        if not self._entered:
            raise ValueError("an InputNode is used as a context manager: build the graph inside "
                             "`with InputNode() as inp:` (as Ray requires)")
        if len(args) == 1 and not kwargs:
            return args[0]
        return DAGInputData(*args, **kwargs)

    def _label(self) -> str:
        return "input"


class InputAttributeNode(DAGNode):
    """``inp[key]`` or ``inp.name``: part of the input."""

    def __init__(self, input_node: InputNode, key: int | str, accessor: str) -> None:
        super().__init__((), {}, {})
        self._input_node = input_node
        self._key = key
        self._accessor = accessor

    def __getitem__(self, key):
        raise TypeError(f"{self!r}[{key!r}]: only one level of the input is read in the graph (inp[i], "
                        f"inp.name); read deeper inside the function or method that gets it")

    def _upstream(self) -> list[DAGNode]:
        return [self._input_node]

    def _run(self, args: tuple, kwargs: dict, results: dict) -> Any:
        value = results[id(self._input_node)]
        if isinstance(value, DAGInputData):
            return value[self._key]
        try:
            if isinstance(self._key, str) and self._accessor == "__getattr__":
                return getattr(value, self._key)
            return value[self._key]
        except (LookupError, TypeError, AttributeError) as err:
            raise ValueError(f"the DAG reads {self._label()} of execute()'s single argument (a "
                             f"{type(value).__name__}), which fails: {err!r}. (With one argument, inp is that "
                             f"value, as in Ray; pass several arguments or keywords to read them as inp[i] or "
                             f"inp.name)") from None

    def _label(self) -> str:
        return f"inp.{self._key}" if self._accessor == "__getattr__" else f"inp[{self._key!r}]"


def _check_key(key: Any) -> None:
    if not isinstance(key, (int, str)) or isinstance(key, bool):
        raise TypeError(f"inp[{key!r}]: index the input with an int (a positional argument) or a str (a "
                        f"keyword)")

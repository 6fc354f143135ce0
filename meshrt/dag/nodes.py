"""The call nodes: a task (``f.bind()``), an actor to create (``Cls.bind()``) and an
actor method call (``handle.method.bind()``, or ``Cls.bind().method.bind()``)."""

from __future__ import annotations

import difflib
from typing import Any

from .dag_node import DAGNode, substitute


def check_bind(checker, args: tuple, kwargs: dict) -> None:
    """A call that cannot bind its arguments fails here, where the graph is written."""
    try:
        checker.check(args, kwargs)
    except TypeError as err:
        raise TypeError(str(err).replace(".remote()", ".bind()")) from None


class FunctionNode(DAGNode):
    """``f.bind(...)``: runs as the task ``f.remote(...)``."""

    def __init__(self, function, args: tuple, kwargs: dict, options: dict) -> None:
        check_bind(function._checker, args, kwargs)
        super().__init__(args, kwargs, options)
        self._body = function

    def _run(self, args: tuple, kwargs: dict, results: dict) -> Any:
        return self._body.remote(*substitute(self._bound_args, results), **substitute(self._bound_kwargs, results))

    def _label(self) -> str:
        return self._body.__name__


class ClassNode(DAGNode):
    """``Cls.bind(...)``: an actor created by each execution (``Cls.remote(...)``);
    ``node.method.bind(...)`` calls it."""

    def __init__(self, actor_class, args: tuple, kwargs: dict, options: dict) -> None:
        check_bind(actor_class._init_checker, args, kwargs)
        super().__init__(args, kwargs, options)
        self._body = actor_class

    def __getattr__(self, name: str) -> UnboundClassMethodNode:
        if name.startswith("_"):
            raise AttributeError(name)
        methods = self.__dict__["_body"]._methods
        if name not in methods:
            known = [m for m in methods if not m.startswith("_")]
            hint = difflib.get_close_matches(name, known, n=1)
            extra = f"; did you mean {hint[0]!r}?" if hint else f"; it has {', '.join(sorted(known)) or 'none'}"
            raise AttributeError(f"actor class {self._body.__name__} has no method {name!r}{extra}")
        return UnboundClassMethodNode(self, name, {})

    def _run(self, args: tuple, kwargs: dict, results: dict) -> Any:
        return self._body.remote(*substitute(self._bound_args, results), **substitute(self._bound_kwargs, results))

    def _label(self) -> str:
        return self._body.__name__


class UnboundClassMethodNode:
    """``class_node.method``: ``.bind(...)`` or ``.options(...)`` it."""

    def __init__(self, class_node: ClassNode, name: str, options: dict) -> None:
        self._class_node = class_node
        self._name = name
        self._options = options

    def bind(self, *args: Any, **kwargs: Any) -> ClassMethodNode:
        meta = self._class_node._body._methods[self._name]
        check_bind(meta.checker, args, kwargs)
        return ClassMethodNode(self._class_node, self._name, args, kwargs, self._options)

    def options(self, **options: Any) -> UnboundClassMethodNode:
        return UnboundClassMethodNode(self._class_node, self._name, {**self._options, **options})

    def remote(self, *args: Any, **kwargs: Any):
        raise TypeError(f"{self._class_node._body.__name__}.bind(...).{self._name}.remote(): the actor exists only "
                        f"when the graph runs; use .{self._name}.bind(...) and execute() the graph")


class ClassMethodNode(DAGNode):
    """An actor method call: on an existing actor (``handle.method.bind()``) or on the
    actor a ClassNode creates in the same execution."""

    def __init__(self, actor, name: str, args: tuple, kwargs: dict, options: dict, method=None) -> None:
        super().__init__(args, kwargs, options)
        self._actor = actor  # an ActorHandle, or a ClassNode
        self._method_name = name
        self._method = method  # (on an existing actor: handle.method, with its .options() applied)

    def _upstream(self) -> list[DAGNode]:
        found = super()._upstream()
        return [self._actor, *found] if isinstance(self._actor, ClassNode) else found

    def _run(self, args: tuple, kwargs: dict, results: dict) -> Any:
        method = self._method
        if method is None:
            method = getattr(results[id(self._actor)], self._method_name)
            if self._bound_options:
                method = method.options(**self._bound_options)
        return method.remote(*substitute(self._bound_args, results), **substitute(self._bound_kwargs, results))

    def _label(self) -> str:
        owner = self._actor._body.__name__ if isinstance(self._actor, ClassNode) else self._actor._class_name
        return f"{owner}.{self._method_name}"

"""What an executor runs: one pool task or one actor method call (executor.py), with
what it needs until its reply leaves."""

from __future__ import annotations


class Call:
    """One unit of work for the executor: a pool task or an actor method call."""

    __slots__ = ("task_id", "name", "method", "args", "deps", "num_returns", "dest", "held", "arg_refs",
                 "spec", "is_task", "granted", "last", "group", "borrowed", "span", "started", "func")

    def __init__(self, task_id, name, method, args, deps, num_returns, dest, held, arg_refs, spec=None):
        self.task_id = task_id
        self.name = name
        self.method = method
        self.args = args
        self.deps = deps
        self.num_returns = num_returns
        self.dest = dest
        self.held = held
        self.arg_refs = arg_refs
        self.spec = spec
        self.is_task = spec is not None
        self.granted: tuple = ()  # store keys the caller pinned for us (ActorCall.pins)
        self.last = False  # the worker's last task (its function's max_calls reached): exit after
        self.group: str | None = None  # the concurrency group chosen for this call, if any
        self.borrowed: tuple = ()  # (value, loan) for each large bytes argument the caller lent
        self.span: str | None = None  # its name in the timeline, where not ``name`` (a mesh endpoint's, or .options(name=))
        self.func: str | None = None  # ... and Class.method where .options(name=) gave the call that name
        self.started = 0  # time.time_ns() when it began to run; 0 once noted (call_record.py)

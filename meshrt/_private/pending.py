"""A call this process submitted and still awaits the results of."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..objstore.serialization import Payload

if TYPE_CHECKING:
    from ..objstore.table import ObjectEntry
    from .streams import Stream


class PendingTask:
    """A task, actor call or actor creation this process submitted and still awaits."""

    __slots__ = (
        "task_id", "name", "entries", "stream", "pins", "deps", "waiting", "cancelled",
        "client", "method", "num_returns", "retries_left", "args", "then", "sent", "ready", "kind",
        "remote", "actor_id", "retry", "group", "label",
    )

    def __init__(self, task_id: int, name: str, args: Payload, deps: list, pins: list, num_returns: int):
        self.task_id = task_id
        self.name = name
        self.args = args
        self.deps = deps  # [(position, ObjectRef)]
        self.pins = pins
        self.num_returns = num_returns
        self.entries: list[ObjectEntry] = []
        self.stream: Stream | None = None
        self.waiting = 0
        self.cancelled = False
        self.client = None
        self.method = ""
        self.retries_left = 0
        self.then = None
        self.sent = False
        self.ready = False
        self.kind = "task"  # "task" | "call" | "create"
        self.remote = False  # runs on another host: this host's store blocks mean nothing there
        self.actor_id = 0  # a call's actor
        self.retry = False  # an actor call's retry_exceptions: True or pickled classes
        self.group: str | None = None  # an actor call's concurrency group, chosen per call
        self.label: str | None = None  # an actor call's name from .options(name=), sent along for list_tasks


def fail_everything(core, error) -> None:
    """Loop: every call still pending and every value still awaited resolves to ``error``
    (a payload): the runtime is going away (shutdown), or the head is (an attached driver)."""
    for pt in list(core.pending.values()):
        core.fail_pending(pt, error)
    for entry in list(core.table.entries.values()):
        if entry.payload is None:
            core.table.resolve(entry, error)

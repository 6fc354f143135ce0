"""``meshrt.LoggingConfig``: Ray's ``ray.LoggingConfig``, passed as
``init(logging_config=...)``: the driver and every worker log through the root logger
at ``log_level``, each record with who logged it (job, worker, node, actor, task), as
text lines or as one JSON object per line.

The workers get it in their Welcome (worker_core.py) and set it up before any task
runs; their stderr reaches the driver as usual, so their records print there.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from typing import Any

from . import context

ENCODINGS = ("TEXT", "JSON")

# The attributes of every LogRecord (https://docs.python.org/3/library/logging.html#logrecord-attributes):
# additional_log_standard_attrs may name these; anything else a record carries came from extra=.
_STANDARD = frozenset({
    "args", "asctime", "created", "exc_info", "exc_text", "filename", "funcName", "levelname", "levelno",
    "lineno", "message", "module", "msecs", "msg", "name", "pathname", "process", "processName",
    "relativeCreated", "stack_info", "thread", "threadName", "taskName",
})
_MARK = "_meshrt_logging_config"  # (on the handler we add: set up again, it is replaced, not doubled)
_level_before: int | None = None  # the root logger's level before apply()


@dataclasses.dataclass
class LoggingConfig:
    """How the driver and workers log: ``encoding`` "TEXT" or "JSON", ``log_level``
    (a name such as "INFO", or a number), and ``additional_log_standard_attrs``, more
    LogRecord attributes to show (``["name", "funcName"]``)."""

    encoding: str = "TEXT"
    log_level: str | int = "INFO"
    additional_log_standard_attrs: list = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ValueError(f"LoggingConfig(encoding={self.encoding!r}): use one of {list(ENCODINGS)}")
        level = self.log_level
        if isinstance(level, bool) or not isinstance(level, (str, int)) or (
                isinstance(level, str) and not isinstance(logging.getLevelName(level.upper()), int)):
            raise ValueError(f"LoggingConfig(log_level={level!r}): give a level name (DEBUG, INFO, WARNING, "
                             f"ERROR, CRITICAL) or a number")
        attrs = self.additional_log_standard_attrs
        if not isinstance(attrs, (list, tuple)) or not all(isinstance(a, str) for a in attrs):
            raise TypeError(f"LoggingConfig(additional_log_standard_attrs={attrs!r}): give a list of str")
        unknown = sorted(set(attrs) - _STANDARD)
        if unknown:
            raise ValueError(f"LoggingConfig(additional_log_standard_attrs=...): {unknown} are not LogRecord "
                             f"attributes; choose from {sorted(_STANDARD)}")

    def to_plain(self) -> dict:
        """What travels to the workers (plain data)."""
        level = self.log_level.upper() if isinstance(self.log_level, str) else self.log_level
        return {"encoding": self.encoding, "log_level": level, "attrs": list(self.additional_log_standard_attrs)}


def apply(plain: dict | None) -> None:
    """Set up this process's root logger as ``plain`` (LoggingConfig.to_plain()) says."""
    if not plain:
        return
    remove()
    global _level_before
    root = logging.getLogger()
    _level_before = root.level
    handler = logging.StreamHandler(sys.stderr)
    setattr(handler, _MARK, True)
    handler.setFormatter(_JsonFormatter(plain["attrs"]) if plain["encoding"] == "JSON"
                         else _TextFormatter(plain["attrs"]))
    handler.setLevel(plain["log_level"])
    root.addHandler(handler)
    root.setLevel(plain["log_level"])


def remove() -> None:
    """Take our handler off the root logger, its level as it was (the driver's shutdown)."""
    global _level_before
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _MARK, False)]:
        root.removeHandler(old)
    if _level_before is not None:
        root.setLevel(_level_before)
        _level_before = None


def _who() -> dict[str, Any]:
    """The running job, worker, node, actor and task, as Ray's records name them."""
    process = context.process
    found = {"job_id": process.get("job_id"), "worker_id": f"{process.get('worker_id', 0):08x}",
             "node_id": process.get("node_id")}
    if process.get("actor_id") is not None:
        found["actor_id"] = context.hex_or_none(process["actor_id"])
        if process.get("actor_name"):
            found["actor_name"] = process["actor_name"]
    call = context.current_call()
    if call is not None and getattr(call, "task_id", 0) > 0:
        found["task_id"] = context.hex_or_none(call.task_id)
        name = getattr(call, "span", None) or getattr(call, "name", None)
        if name:
            found["task_name"] = name
    return found


def _extra(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


class _TextFormatter(logging.Formatter):
    """``time LEVEL file:line -- message key=value ...`` (who logged it, then extra=)."""

    def __init__(self, attrs: list) -> None:
        super().__init__("%(asctime)s\t%(levelname)s %(filename)s:%(lineno)s -- %(message)s")
        self.attrs = attrs

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = {**{a: getattr(record, a, None) for a in self.attrs}, **_who(), **_extra(record)}
        tail = " ".join(f"{k}={v}" for k, v in fields.items() if v is not None)
        if record.exc_text or record.stack_info:  # (the traceback stays last, on its own lines)
            head, _, trace = line.partition("\n")
            return f"{head} {tail}\n{trace}"
        return f"{line} {tail}"


class _JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, message, where, who, and extra= fields."""

    def __init__(self, attrs: list) -> None:
        super().__init__()
        self.attrs = attrs

    def format(self, record: logging.LogRecord) -> str:
        out = {"asctime": self.formatTime(record), "levelname": record.levelname, "message": record.getMessage(),
               "filename": record.filename, "lineno": record.lineno, "process": record.process}
        out.update({a: getattr(record, a, None) for a in self.attrs})
        out.update({k: v for k, v in _who().items() if v is not None})
        out.update(_extra(record))
        if record.exc_info:
            out["exc_text"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)

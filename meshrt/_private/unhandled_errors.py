"""Ray's "Unhandled error" line: an error that nobody ever read (its ref dropped before
any ``get`` or ``await``, nor passed to another task or process) is printed to its
owner's stderr as the ref goes, so that the failure of a task fired and forgotten is not
lost without a trace. ``MESHRT_IGNORE_UNHANDLED_ERRORS=1`` (or Ray's
``RAY_IGNORE_UNHANDLED_ERRORS=1``) turns it off. Only errors the user's code raised:
meshrt's own (a cancel, a dead actor) say what the caller did or saw already."""

from __future__ import annotations

import os
import pickle
import sys


def report(payload) -> None:
    if os.environ.get("MESHRT_IGNORE_UNHANDLED_ERRORS") == "1" or os.environ.get("RAY_IGNORE_UNHANDLED_ERRORS") == "1":
        return
    try:
        record = pickle.loads(payload.data)  # (the error's text: nothing of the user's is unpickled)
    except Exception:  # noqa: BLE001 - (only a report)
        return
    if record[0] != "task":
        return
    _kind, _cause, _cause_class, _cause_repr, tb_text, function_name, pid = record
    print(f"meshrt: unhandled error (suppress with MESHRT_IGNORE_UNHANDLED_ERRORS=1): {function_name} (pid={pid}) "
          f"failed and its result was dropped unread:\n{tb_text.rstrip()}", file=sys.stderr, flush=True)

"""Where a long-running head (``meshrt start --head``) says how to reach it, as Ray's
``/tmp/ray/ray_current_cluster`` does: ``<temp dir>/meshrt-sessions/cluster.json`` and
the cluster token beside it (both readable by their owner only). Drivers started with
``init(address="auto")`` and the command line read them; ``meshrt stop`` ends the head
they name. Always under the system's temp dir, even for a head started with
``--temp-dir`` (its logs go there): found without saying where, as ``ray stop`` finds
its head."""

from __future__ import annotations

import json
import os
import tempfile

from .log_files import SESSIONS
from .log_files import alive as _alive


def _root() -> str:
    return os.path.join(tempfile.gettempdir(), SESSIONS)


def path() -> str:
    return os.path.join(_root(), "cluster.json")


def token_path() -> str:
    return os.path.join(_root(), "cluster.token")


def write(info: dict, token: bytes) -> None:
    os.makedirs(_root(), exist_ok=True)
    _write_private(token_path(), token.hex())
    _write_private(path(), json.dumps(dict(info, token_file=token_path()), indent=1))


def _write_private(where: str, text: str) -> None:
    tmp = f"{where}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, where)  # (readers never see half a file)


def read() -> dict | None:
    """The running head's record; None when there is none (or its process is gone)."""
    try:
        with open(path()) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    pid = int(info.get("pid", 0))
    if pid <= 0 or not _alive(pid):
        return None
    return info


def remove(pid: int) -> None:
    """The head ``pid`` is going: its record goes, unless another head wrote its own since."""
    try:
        with open(path()) as f:
            if json.load(f).get("pid") != pid:
                return
    except (OSError, ValueError):
        return
    for where in (path(), token_path()):
        try:
            os.unlink(where)
        except OSError:
            pass


def token(info: dict) -> bytes:
    with open(info["token_file"]) as f:
        return bytes.fromhex(f.read().strip())

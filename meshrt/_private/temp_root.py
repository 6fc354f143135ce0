"""The directory under which meshrt keeps a host's files: the sessions' logs
(``meshrt-sessions/``), spilled objects and unpacked packages. ``MESHRT_TEMP_DIR`` where
set, else the system's temp dir. ``init(_temp_dir=...)`` (Ray's argument) and ``meshrt
start --head --temp-dir`` set it for their processes, whose children inherit it, so a
small or shared ``/tmp`` can be avoided. The head's record stays in the system's temp dir
(cluster_file.py): drivers and ``meshrt stop`` find the head without the setting."""

from __future__ import annotations

import os
import tempfile

ENV = "MESHRT_TEMP_DIR"

_UNSET = object()
_before = _UNSET  # (the variable as it was before init set it: shutdown puts it back)


def root() -> str:
    chosen = os.environ.get(ENV)
    return os.path.abspath(chosen) if chosen else tempfile.gettempdir()


def checked(path, what: str) -> str:
    """``path`` made if missing; a ValueError naming ``what`` when it cannot be used."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{what}: give a directory path, got {type(path).__name__}")
    path = os.path.expanduser(os.fspath(path))
    if not os.path.isabs(path):
        raise ValueError(f"{what}: the temp dir must be an absolute path, got {path!r}")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise ValueError(f"{what}: cannot make the temp dir {path!r} ({err.strerror})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{what}: the temp dir {path!r} is not writable by this user")
    return path


def use(path, what: str) -> None:
    """Make ``path`` the root of this process and of those it starts, until ``restore``."""
    global _before
    path = checked(path, what)
    if _before is _UNSET:
        _before = os.environ.get(ENV)
    os.environ[ENV] = path


def restore() -> None:
    global _before
    if _before is _UNSET:
        return
    if _before is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = _before
    _before = _UNSET

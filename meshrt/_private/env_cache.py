"""The pip/uv environments kept between runs (pip_envs.py), bounded in size.

An environment outlives the runtime that made it (a later run reuses it, as pip's own
cache is reused), so without a bound the directory only grows: one environment per
package list ever asked for, each as large as its packages. After an environment is
made, the least recently used others are deleted while all of them together take more
than ``$MESHRT_RUNTIME_ENV_CACHE_GB`` gigabytes (default 10, the size Ray gives each of
its runtime_env caches).

One in use is never deleted: each runtime that starts workers in an environment (its
EnvMaker) holds a shared lock on the environment's ``.inuse`` file until it ends, taken
under the environment's creation lock; deleting takes both locks without waiting and
skips an environment where either is held. The lock files stay (a few bytes each):
deleting one that another process may be about to open would let two processes lock
different files of the same name and make the same environment at once.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil

from ..exceptions import RuntimeEnvSetupError

CACHE_ENV = "MESHRT_RUNTIME_ENV_CACHE_GB"
DEFAULT_GB = 10.0
READY = ".meshrt-ready"  # (written last: the environment is whole; its mtime: when last used)
_HOME_NAME = re.compile(r"(pip|uv)-[0-9a-f]{16}")  # (only ours: the directory may be shared)


def limit_bytes() -> int:
    raw = os.environ.get(CACHE_ENV)
    if raw is None or not raw.strip():
        return int(DEFAULT_GB * (1 << 30))
    try:
        gigabytes = float(raw)
    except ValueError:
        gigabytes = -1.0
    if not gigabytes >= 0:  # (also NaN)
        raise RuntimeEnvSetupError(f"{CACHE_ENV}={raw!r}: give the gigabytes that the kept runtime_env "
                                   f"environments may take together, a number >= 0 (default {DEFAULT_GB:g})")
    return int(gigabytes * (1 << 30))


def mark_ready(home: str, spec: dict) -> None:
    """The environment is whole: say so, with its size (read when trimming)."""
    with open(os.path.join(home, READY), "w") as f:
        json.dump({**spec, "bytes": _tree_bytes(home)}, f)


def hold(home: str) -> int:
    """A shared lock on the environment, kept by the caller until its runtime ends (the
    descriptor): while held, trim() leaves the environment alone. Take it under the
    environment's creation lock."""
    fd = os.open(home + ".inuse", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def touch(home: str) -> None:
    """The environment is used now (least recently used ones go first)."""
    try:
        os.utime(os.path.join(home, READY))
    except OSError:
        pass


def trim(root: str, keep: str) -> list:
    """Delete the least recently used environments under ``root`` (never ``keep``, nor
    one in use) until all of them fit the limit; unfinished ones (an install that failed
    or was cut short, with no process making it now) go first. Returns those deleted."""
    limit = limit_bytes()
    found = []
    total = _size_of(keep)
    for name in os.listdir(root):
        home = os.path.join(root, name)
        if home == keep or not _HOME_NAME.fullmatch(name) or not os.path.isdir(home):
            continue
        try:
            used = os.stat(os.path.join(home, READY)).st_mtime
        except OSError:
            used = 0.0
        size = _size_of(home)
        found.append((used, home, size))
        total += size
    deleted = []
    for _used, home, size in sorted(found):
        if total <= limit:
            break
        if _delete_if_unused(home):
            total -= size
            deleted.append(home)
    return deleted


def _delete_if_unused(home: str) -> bool:
    with open(home + ".lock", "a") as making, open(home + ".inuse", "a") as using:
        try:
            fcntl.flock(making, fcntl.LOCK_EX | fcntl.LOCK_NB)  # (not being made or looked up now)
            fcntl.flock(using, fcntl.LOCK_EX | fcntl.LOCK_NB)  # (no runtime uses it)
        except BlockingIOError:
            return False
        try:
            os.unlink(os.path.join(home, READY))  # (first: never a ready marker over a half-deleted tree)
        except FileNotFoundError:
            pass
        shutil.rmtree(home, ignore_errors=True)
        return not os.path.exists(home)


def _size_of(home: str) -> int:
    try:
        with open(os.path.join(home, READY)) as f:
            size = json.load(f).get("bytes")
        if isinstance(size, int):
            return size
    except (OSError, ValueError, AttributeError):
        pass
    return _tree_bytes(home)


def _tree_bytes(home: str) -> int:
    """Disk taken by a directory tree (links not followed)."""
    total = 0
    for top, _dirs, files in os.walk(home):
        for name in files:
            try:
                total += os.lstat(os.path.join(top, name)).st_blocks * 512
            except OSError:
                pass
    return total

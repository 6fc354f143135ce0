"""Where breakpoints in workers wait: one record and one Unix socket each, in a
directory of this host that only its user may open; and what ends a session when
its call does.

pdb runs whatever code it is sent, so a session is never on a network port: the
socket's directory is ``MESHRT_DEBUG_DIR`` or ``<tmp>/meshrt-debug-<uid>``, a real
directory (not a link), mode 0700 and owned by the user (anything else is refused,
naming it). In the sticky temp directory nobody else can then move it. A record is a
small JSON file beside its socket; ``meshrt debug`` on the same host lists them
(debug_client.py). A record whose process is gone (killed while it waited) is removed
when listed.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import socket
import stat
import sys
import tempfile
import threading
import time

from . import log_files

_SOCKET_PATH_MAX = 107  # (sun_path holds 108 bytes with its terminating NUL)
_numbers = itertools.count(1)
READY = "\x00"  # (a session asks for a line: debug_client.py shows nothing for it)

# thread id -> the session that must end when that thread's call does (rpdb.py):
# stepping past the call's end, or a breakpoint set and never reached again, would
# otherwise keep the thread traced and the terminal waiting after the call returned.
active: dict[int, object] = {}


def directory() -> str:
    """The directory of this user's breakpoints on this host, made private if new."""
    path = os.path.abspath(os.environ.get("MESHRT_DEBUG_DIR")
                           or os.path.join(tempfile.gettempdir(), f"meshrt-debug-{os.getuid()}"))
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError as err:
        raise RuntimeError(f"meshrt debugger: cannot use {path} for breakpoints ({err}); set MESHRT_DEBUG_DIR "
                           "to a directory of your own") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise RuntimeError(f"meshrt debugger: {path} must be a directory of yours alone (mode 0700, not a link): "
                           "its sessions run any code they are sent; fix it with `chmod 700`, or set "
                           "MESHRT_DEBUG_DIR to another")
    return path


class Session:
    """One breakpoint waiting for ``meshrt debug``: its listening socket and record."""

    def __init__(self, where: dict) -> None:
        folder = directory()
        name = f"{os.getpid()}-{next(_numbers)}-{secrets.token_hex(3)}"
        self.socket_path = os.path.join(folder, name + ".sock")
        self.record_path = os.path.join(folder, name + ".json")
        if len(self.socket_path.encode()) > _SOCKET_PATH_MAX:
            raise RuntimeError(f"meshrt debugger: {folder} is too long a path for a Unix socket; set "
                               "MESHRT_DEBUG_DIR to a shorter one")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.listener.bind(self.socket_path)
            self.listener.listen(1)
            record = {**where, "pid": os.getpid(), "host": socket.gethostname(), "time": time.time(),
                      "socket": self.socket_path}
            partial = self.record_path + ".new"
            with open(partial, "w") as f:
                json.dump(record, f)
            os.replace(partial, self.record_path)  # (listed whole or not at all)
        except BaseException:
            self.close()
            raise

    def accept(self) -> socket.socket:
        """Wait for ``meshrt debug`` to attach; the record goes as it does (one terminal
        per breakpoint)."""
        conn, _ = self.listener.accept()
        self.close()
        return conn

    def close(self) -> None:
        self.listener.close()
        for path in (self.record_path, self.socket_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def waiting() -> list[dict]:
    """The breakpoints waiting on this host, oldest first."""
    folder = directory()
    host = socket.gethostname()
    found = []
    for entry in os.scandir(folder):
        if not entry.name.endswith(".json"):
            continue
        try:
            with open(entry.path) as f:
                record = json.load(f)
        except (OSError, ValueError):
            continue  # (went meanwhile)
        if record.get("host") != host:
            continue  # (a directory shared between hosts: another host's, whose pids are not ours)
        if not isinstance(record.get("pid"), int) or not log_files.alive(record["pid"]):
            forget(record, entry.path, folder)
            continue
        found.append(record)
    return sorted(found, key=lambda r: r.get("time", 0))


def forget(record: dict, record_path: str | None = None, folder: str | None = None) -> None:
    """Remove a record left by a process that was killed while it waited, and its socket."""
    folder = folder or directory()
    socket_path = str(record.get("socket") or "")
    record_path = record_path or socket_path.removesuffix(".sock") + ".json"
    for path in (record_path, socket_path):
        if path and os.path.dirname(os.path.abspath(path)) == folder:  # (never a path the record names elsewhere)
            try:
                os.unlink(path)
            except OSError:
                pass


def mesh_actor() -> dict:
    """The mesh actor running now, as a record names it (``attach NAME RANK``, ``cast``);
    {} outside one."""
    from ..mesh.actor import context

    instance = context().actor_instance
    if instance.name == "client":
        return {}
    return {"actor": instance.name, "rank": instance.rank.rank, "coords": dict(instance.rank)}


def post_mortem_wanted() -> bool:
    return os.environ.get("MESHRT_DEBUG_POST_MORTEM", "") not in ("", "0")


def failed(error: BaseException) -> None:
    """The executor: a call raised ``error``; with MESHRT_DEBUG_POST_MORTEM it waits for
    ``meshrt debug`` at the exception before its caller hears."""
    if post_mortem_wanted():
        from ..util import rpdb

        rpdb.stop_at(error)


def call_ended(task_id: int) -> None:
    """The executor: call ``task_id`` on this thread is over; a session it left open
    ends (not one of another call: an async actor's calls share their thread)."""
    thread = threading.get_ident()
    session = active.get(thread)
    if session is not None and session.task_id in (task_id, None):
        del active[thread]
        session.call_ended()


def install_breakpoint_hook() -> None:
    """In a worker: ``breakpoint()`` waits for ``meshrt debug`` (meshrt/util/rpdb.py)."""
    sys.breakpointhook = _breakpoint


def _breakpoint(*args, **kwargs):
    if os.environ.get("PYTHONBREAKPOINT"):  # (read at each call, as Python does: a task's env_vars may set it)
        return sys.__breakpointhook__(*args, **kwargs)
    from ..util import rpdb  # (pdb's modules load only when a breakpoint is hit)

    rpdb.stop_in(sys._getframe(1))
    return None

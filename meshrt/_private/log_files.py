"""Every worker's output kept in files on the head, for Ray's ``list_logs`` / ``get_log``
(meshrt.util.state) and ``meshrt logs``.

Mixed into the Controller (which provides workers, actors, config, node_id_of_host,
ended_tasks). The controller already reads each worker's stdout and stderr (through
its pipes, or its host agent's WorkerOutput): the lines are also appended to
``worker-<worker id>-<pid>.out`` / ``.err`` in ``<temp dir>/meshrt/session_<session>/logs``,
so they can be read after the fact (with ``log_to_driver=False`` too); one past
``MAX_FILE_BYTES`` starts over, the previous kept beside it as ``<name>.1``. The last
``SESSIONS_KEPT`` sessions' logs stay on disk, as Ray keeps its session directories;
older ones are removed when a driver starts (never a running driver's).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

from . import ids, temp_root

SESSIONS = "meshrt-sessions"  # (the directory of the sessions' logs, under temp_root.root())
SESSIONS_KEPT = 5
MAX_FILE_BYTES = 256 << 20  # a worker's log past this starts over (the old one kept as <name>.1)
SUFFIXES = ("out", "err")


def sessions_root() -> str:
    # Not "<temp dir>/meshrt": a directory of that name would be taken for the meshrt
    # package (an empty namespace package) by a program started in the temp directory
    # where meshrt is installed in editable mode.
    return os.path.join(temp_root.root(), SESSIONS)


def _remove_legacy_root() -> None:
    """The sessions' directory of earlier versions, "<temp dir>/meshrt", if it holds
    nothing but their sessions (see sessions_root)."""
    legacy = os.path.join(tempfile.gettempdir(), "meshrt")
    try:
        entries = os.listdir(legacy)
    except OSError:
        return
    if all(name.startswith("session_") for name in entries):
        shutil.rmtree(legacy, ignore_errors=True)


class LogFiles:
    def __init__(self) -> None:
        self.log_dir: str | None = None
        self.log_files: dict[str, dict] = {}  # file name -> its worker's id, pid, host, actor
        self._log_names: dict[tuple[int, str], str] = {}  # (worker id, "out" / "err") -> its file name

    def open_log_dir(self) -> None:
        """This session's log directory (older sessions' pruned first)."""
        root = sessions_root()
        _remove_legacy_root()
        _prune(root)
        path = os.path.join(root, f"session_{self.config['session']}", "logs")
        try:
            os.makedirs(path, exist_ok=True)
        except OSError:  # (no writable temp dir: output still reaches the driver, just not kept)
            return
        self.log_dir = path

    def log_keeper(self, w):
        """What appends worker ``w``'s lines to its files (None: none are kept)."""
        if self.log_dir is None:
            return None

        def keep(stream: str, lines: list[str]) -> None:
            suffix = "out" if stream == "stdout" else "err"
            name = self._log_names.get((w.id, suffix))
            if name is None:  # (named once: by its pid, once known)
                name = self._log_names[(w.id, suffix)] = self._name_of(w, suffix)
                self.log_files[name] = {"wid": w.id, "pid": w.pid, "host": w.host, "actor_id": w.actor_id}
            else:  # (its pid may have come since; a pool worker may have become an actor's process)
                info = self.log_files[name]
                info["pid"] = info["pid"] or w.pid
                info["actor_id"] = w.actor_id if w.actor_id is not None else info["actor_id"]
            path = os.path.join(self.log_dir, name)
            try:  # (opened per batch: no descriptor held for each of many workers)
                with open(path, "a", encoding="utf-8", errors="replace") as f:
                    f.write("".join(line + "\n" for line in lines))
                    full = f.tell() >= MAX_FILE_BYTES
                if full:  # (as Ray rotates its logs: the older half kept as .1, at most two files a stream)
                    os.replace(path, path + ".1")
            except OSError:
                pass  # (a full disk loses the kept copy, never the driver's)

        return keep

    # -- requests ---------------------------------------------------------------------------

    def rpc_log_files(self, caller: int) -> list:
        """(file name, node id, worker id, pid) of every kept log."""
        return [(name, self.node_id_of_host(info["host"]), ids.to_hex(info["wid"]), info["pid"])
                for name, info in self.log_files.items()]

    def rpc_log_lines(self, caller: int, how: str, key, suffix: str, tail: int, offset: int | None) -> tuple:
        """The log picked by ``how`` (filename, actor_id, task_id or pid) = ``key``: its
        lines from byte ``offset`` (None: the last ``tail``, -1: all), the offset after
        them, and whether its process may still write more."""
        if suffix not in SUFFIXES:
            raise ValueError(f"get_log(suffix={suffix!r}): use 'out' (stdout) or 'err' (stderr)")
        name, worker = self._log_of(how, key, suffix)
        start = offset or 0
        try:  # (written on this loop, a batch of whole lines at a time: no line is read half-written)
            with open(os.path.join(self.log_dir or "", name), "rb") as f:
                if start > os.fstat(f.fileno()).st_size:
                    start = 0  # (it started over since: MAX_FILE_BYTES)
                f.seek(start)
                data = f.read()
        except FileNotFoundError:  # (it has printed nothing on that stream yet)
            data = b""
        lines = data.decode("utf-8", errors="replace").splitlines()
        if offset is None and tail >= 0:
            lines = lines[-tail:] if tail else []
        w = self.workers.get(worker)
        return name, lines, start + len(data), w is not None and w.state != "dead"

    def _log_of(self, how: str, key, suffix: str) -> tuple[str, int]:
        """The file name and worker id of the log asked for (a clear error if none)."""
        if how == "filename":
            info = self.log_files.get(key) if isinstance(key, str) else None
            if info is not None:
                return key, info["wid"]
            for w in list(self.workers.values()):  # (a live process that has printed nothing yet)
                if w.id and key in (self._name_of(w, "out"), self._name_of(w, "err")):
                    return key, w.id
            raise ValueError(f"get_log(filename={key!r}): no such log; list_logs(node_id=...) names them")
        if how == "task_id":
            rows = [r for r in self.task_rows() if r["task_id"] == key and r.get("worker_pid")]
            if not rows:
                raise ValueError(f"get_log(task_id={key!r}): no task by that id has run in a worker; an actor "
                                 f"method's output is in its actor's log (get_log(actor_id=...))")
            how, key = "pid", rows[-1]["worker_pid"]
        if how == "actor_id":
            rec = self.actors.get(int(key, 16)) if _is_hex(key) else None
            if rec is None:
                raise ValueError(f"get_log(actor_id={key!r}): no such actor (list_actors() gives their ids)")
            if rec.worker in self.workers:  # (alive: its process now)
                return self._name_of(self.workers[rec.worker], suffix), rec.worker
            found = [(n, i["wid"]) for n, i in self.log_files.items()
                     if i["actor_id"] == rec.spec.actor_id and n.endswith("." + suffix)]
            if not found:
                raise ValueError(f"get_log(actor_id={key!r}): the actor's process has printed nothing")
            return found[-1]  # (its last process)
        if how == "pid":
            for w in list(self.workers.values()):
                if w.pid == key and w.id:
                    return self._name_of(w, suffix), w.id
            found = [(n, i["wid"]) for n, i in self.log_files.items() if i["pid"] == key and n.endswith("." + suffix)]
            if not found:
                raise ValueError(f"get_log(pid={key!r}): no worker of this cluster had that pid")
            return found[-1]
        raise ValueError(f"get_log: unknown selector {how!r}")

    def _name_of(self, w, suffix: str) -> str:
        named = self._log_names.get((w.id, suffix))
        if named is not None:
            return named
        return f"worker-{ids.to_hex(w.id)}-{w.pid}.{suffix}" if w.pid else f"worker-{ids.to_hex(w.id)}.{suffix}"


def _is_hex(text) -> bool:
    if not isinstance(text, str) or not text:
        return False
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


def _prune(root: str) -> None:
    """Keep the newest SESSIONS_KEPT sessions' logs, and the newest one of each driver
    that still runs (not the ones it shut down before)."""
    try:
        entries = [e for e in os.scandir(root) if e.is_dir() and e.name.startswith("session_")]
    except OSError:
        return
    entries.sort(key=lambda e: e.stat().st_mtime, reverse=True)
    newest_of: set = set()  # pids whose newest session was seen (a driver may have had several)
    for i, entry in enumerate(entries):
        pid = entry.name.rpartition("-")[2]
        current = pid not in newest_of
        newest_of.add(pid)
        if i < SESSIONS_KEPT or (current and pid.isdigit() and alive(int(pid))):
            continue
        with contextlib.suppress(OSError):
            shutil.rmtree(entry.path)


def alive(pid: int) -> bool:
    """Is process ``pid`` still there (a zombie counts)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

"""A host's side of ``HostMesh.sync_workspace`` (meshrt/mesh/workspace.py): the synced
directories under ``$WORKSPACE_DIR``, and the processes that import from them.

``$WORKSPACE_DIR`` is the variable Monarch's jobs set; where the host's agent (or the
driver) was started without it, the workspace lives in the host's runtime directory
and goes when the host leaves. Syncing writes only files whose bytes changed (so
``auto_reload`` reloads just those modules, and unchanged files keep their times) and
removes the files an earlier sync wrote that are gone from the source, as ``rsync
--delete`` would, but never a file it did not write.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib
import io
import json
import os
import sys
import zipfile

from ..exceptions import RuntimeEnvSetupError
from . import env_packages


def root() -> str:
    """``$WORKSPACE_DIR``, or the workspace in the host's runtime directory (named only:
    ``install`` makes it)."""
    given = os.environ.get("WORKSPACE_DIR")
    if given:
        return given
    host_dir = os.environ.get("MESHRT_ENV_DIR")
    if not host_dir:
        raise RuntimeEnvSetupError("this process has no host runtime directory to hold a workspace in")
    return os.path.join(host_dir, "workspace")


def install(core, items: list) -> list:
    """Write each package (``(uri, relative destination)``) under the workspace root;
    the names of the files that changed, per item."""
    base = root()
    os.makedirs(base, mode=0o700, exist_ok=True)
    changed_per_item = []
    with open(os.path.join(base, ".meshrt-sync.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # (one sync at a time on a host)
        for uri, rel in items:
            data = env_packages.fetch(core, uri)
            changed_per_item.append(_write(data, os.path.join(base, rel), _manifest(base, rel)))
    return changed_per_item


def _manifest(base: str, rel: str) -> str:
    return os.path.join(base, f".meshrt-synced-{hashlib.sha1(rel.encode()).hexdigest()[:12]}.json")


def _write(data: bytes, dest: str, manifest: str) -> list:
    dest_real = os.path.realpath(dest)
    changed, names = [], set()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            target = os.path.realpath(os.path.join(dest, info.filename))
            if not target.startswith(dest_real + os.sep):
                raise RuntimeEnvSetupError(f"workspace package entry {info.filename!r} points outside {dest}")
            names.add(info.filename)
            body = archive.read(info)
            if _same(target, body):
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            staging = f"{target}.meshrt-{os.getpid()}"
            try:
                with open(staging, "wb") as out:
                    out.write(body)
                mode = (info.external_attr >> 16) & 0o777
                if mode:
                    os.chmod(staging, mode)
                os.replace(staging, target)  # (a process importing meanwhile sees the old file or the new)
            except BaseException:
                if os.path.exists(staging):
                    os.remove(staging)
                raise
            _drop_bytecode(target)
            changed.append(info.filename)
    try:
        with open(manifest) as f:
            before = set(json.load(f))
    except (OSError, ValueError):
        before = set()
    for gone in sorted(before - names):
        try:
            os.remove(os.path.join(dest, gone))
            changed.append(gone)
        except OSError:
            pass
    with open(manifest, "w") as f:
        json.dump(sorted(names), f)
    return changed


def _drop_bytecode(source: str) -> None:
    """A module rewritten within the second it was cached, at the same size, would pass
    the bytecode cache's (whole-second mtime, size) check: drop the cache instead."""
    if not source.endswith(".py"):
        return
    cache = os.path.join(os.path.dirname(source), "__pycache__")
    stem = os.path.basename(source)[:-3] + "."
    try:
        names = os.listdir(cache)
    except OSError:
        return
    for name in names:
        if name.startswith(stem) and name.endswith(".pyc"):
            try:
                os.remove(os.path.join(cache, name))
            except OSError:
                pass


def _same(path: str, body: bytes) -> bool:
    try:
        if os.path.getsize(path) != len(body):
            return False
        with open(path, "rb") as f:
            return f.read() == body
    except OSError:
        return False


def enter(rels: list) -> list:
    """Put the synced directories first on ``sys.path`` and say where they are in
    ``$WORKSPACE_DIR``; the paths that exist on this host."""
    if not rels:
        return []
    try:
        base = root()
    except RuntimeEnvSetupError:
        return []
    paths = [os.path.join(base, rel) if rel else base for rel in rels]
    paths = [p for p in paths if os.path.isdir(p)]
    if paths:
        os.environ["WORKSPACE_DIR"] = base
    for path in reversed(paths):
        if path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)
    importlib.invalidate_caches()
    return paths


def reload_changed(files: list) -> list:
    """``importlib.reload`` the modules loaded from these files (those still there), in
    import order. (Objects made from the old code keep it, as after any reload.) What
    failed, as "module (file): error" lines; one failure does not stop the others."""
    wanted = {os.path.realpath(f) for f in files if os.path.exists(f)}
    failed = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and os.path.realpath(path) in wanted:
            try:
                importlib.reload(module)
            except Exception as err:  # noqa: BLE001 - (the user's module: said to the caller)
                failed.append(f"{name} ({path}): {type(err).__name__}: {err}")
    return failed

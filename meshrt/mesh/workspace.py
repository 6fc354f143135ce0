"""Monarch's code sync: ``await hosts.sync_workspace(Workspace(dirs=[...]), auto_reload=True)``.

Each local directory of the workspace is packed (``_private/env_packages.py``) and
handed to the driver's controller; one process per host writes it under
``$WORKSPACE_DIR/<name>`` (``_private/workspace_files.py``: changed files only, files
gone from the source removed). Then every process this driver spawned on those hosts
puts the synced directories first on ``sys.path`` and, with ``auto_reload``, reloads
the modules whose files changed, so the next call runs the new code; processes
spawned there later start with them on ``sys.path``. Monarch does the copying with
rsync between hosts; here the bytes travel through the cluster's own connections,
so hosts need nothing but the agent.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from .._private import env_packages, state
from .future import Future

__all__ = ["Workspace"]

STOP_TIMEOUT_S = 30.0  # (the short-lived processes that write the files)


class Workspace:
    """Local directories to copy to the hosts, as Monarch's
    ``monarch.tools.config.workspace.Workspace``: ``dirs=[path, ...]`` puts each under
    ``$WORKSPACE_DIR/<its name>``, ``dirs={path: "relative/destination"}`` where it says
    (``""``: ``$WORKSPACE_DIR`` itself)."""

    def __init__(self, dirs: Iterable | Mapping | None = None, env: Any = None) -> None:
        if env is not None:
            raise ValueError("Workspace(env=...): syncing a conda environment is not supported by meshrt; install "
                             "the environment on every host and leave env=None")
        if dirs is None:
            dirs = {}
        elif isinstance(dirs, (str, os.PathLike)):
            raise TypeError(f"Workspace(dirs={dirs!r}): give a list of directories (or a dict of directory -> "
                            "destination), e.g. Workspace(dirs=[...])")
        elif not isinstance(dirs, Mapping):
            dirs = {d: os.path.basename(os.path.normpath(os.path.expanduser(os.fspath(d)))) for d in dirs}
        self.dirs: dict[str, str] = {}
        for local, dest in dirs.items():
            path = os.path.abspath(os.path.expanduser(os.fspath(local)))
            if not os.path.isdir(path):
                raise ValueError(f"Workspace(dirs=...): {os.fspath(local)!r} is not a local directory")
            given = os.fspath(dest)
            if os.path.isabs(given) or ".." in given.split("/"):
                raise ValueError(f"Workspace(dirs=...): destination {given!r} must be relative to $WORKSPACE_DIR, "
                                 "without '..'")
            dest = given.strip("/")
            for other, taken in self.dirs.items():
                if _overlap(taken, dest):  # (one sync would delete what the other wrote)
                    raise ValueError(f"Workspace(dirs=...): {path} and {other} would both be written to "
                                     f"$WORKSPACE_DIR/{dest or taken} (one inside the other's place); give each its own "
                                     f"destination with a dict, e.g. {{{path!r}: 'a', {other!r}: 'b'}}")
            self.dirs[path] = dest

    @staticmethod
    def null() -> Workspace:
        return Workspace()

    def __repr__(self) -> str:
        return f"Workspace(dirs={self.dirs!r})"


def _overlap(a: str, b: str) -> bool:
    """One destination is the other or inside it (``""``: $WORKSPACE_DIR itself)."""
    return not a or not b or a == b or a.startswith(b + "/") or b.startswith(a + "/")


def sync(hosts: list, workspace: Workspace, conda: bool, auto_reload: bool) -> Future:
    """``sync_workspace`` on these hosts (ids), from a HostMesh or a ProcMesh."""
    if not isinstance(workspace, Workspace):
        raise TypeError(f"sync_workspace(workspace={workspace!r}): give a meshrt.Workspace(dirs=[...])")
    if conda:
        raise ValueError("sync_workspace(conda=True): syncing a conda environment is not supported by meshrt; "
                         "install the environment on every host")
    hosts = sorted(set(hosts))
    core = state.core()

    def run(timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        items = []
        for src, rel in workspace.dirs.items():
            uri, data = env_packages.pack(src, what="sync_workspace()")
            core.request_sync("put_package", uri, data, False)  # (dropped once written: the next sync sends anew)
            items.append((uri, rel, src))
        try:
            changed = _install(hosts, [(uri, rel) for uri, rel, _src in items], deadline)
        finally:
            for uri, _rel, _src in items:
                core.request_sync("drop_package", uri)
        core.request_sync("note_workspace", tuple(hosts), tuple(rel for _uri, rel, _src in items))
        failed = _refresh(core, hosts, items, changed, auto_reload, deadline)
        if failed:
            raise RuntimeError("sync_workspace(auto_reload=True): the files were synced, but these modules did "
                               "not reload (they keep their old code until they do):\n  " + "\n  ".join(failed))

    async def aget():
        await asyncio.to_thread(run, None)

    return Future(aget, run)


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _install(hosts: list, items: list, deadline: float | None) -> dict:
    """One short-lived process per host writes the packages there: {host: changed names per item}."""
    from .meshes import HostMesh
    from .shape import Shape

    procs = HostMesh(Shape.dense(("hosts",), (len(hosts),)), tuple(hosts)).spawn_procs(
        per_host={"sync": 1}, name="workspace-sync")
    procs._state.callers_handle_deaths = True  # (a death fails the sync, which says so: no failure to supervise)
    try:
        changed = _each(procs, "install_workspace", lambda rank: (items,), deadline)
    finally:
        procs.stop().get(STOP_TIMEOUT_S)  # (its own time: an error above is the one to see)
    return dict(zip(hosts, changed, strict=True))


def _refresh(core, hosts: list, items: list, changed: dict, reload: bool, deadline: float | None) -> list:
    """Every live process this driver spawned on these hosts imports from the copies;
    what failed to reload there ("module (file): error" lines)."""
    from .meshes import _spawned, _whole

    on = set(hosts)
    failed: list = []
    registry = _spawned(core)
    for mesh_state, (_refs, proc_hosts, _local) in list(registry.items()):
        if mesh_state.stopping or not on & set(proc_hosts):
            continue
        mesh = _whole(registry, mesh_state)
        if mesh is None:
            continue

        def args(rank, mesh=mesh):
            names = changed.get(mesh._hosts[rank])
            per_item = [(rel, src, names[i] if names else []) for i, (_uri, rel, src) in enumerate(items)]
            return per_item, reload

        for errors in _each(mesh, "refresh_workspace", args, deadline, only=on):
            failed.extend(error for error in errors if error not in failed)
    return failed


def _each(mesh, method: str, args_of, deadline: float | None, only: set | None = None) -> list:
    from .actor_mesh import _gather
    from .shape import Point

    core = state.core()
    ranks = [r for r in mesh._shape.ranks() if only is None or mesh._hosts[r] in only]
    refs = [core.call_actor(mesh._procs[r], method, args_of(r), {}, 1, inline=mesh._hosts[r] != core.host_id)
            for r in ranks]
    extent = mesh.extent
    points = [Point(i, extent) for i, r in enumerate(mesh._shape.ranks()) if r in ranks]
    return _gather(mesh._hosts_mesh(), refs, points, method).get(_left(deadline))

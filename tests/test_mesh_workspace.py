"""Monarch's code sync: HostMesh.sync_workspace copies local directories to the hosts'
$WORKSPACE_DIR, processes there import from them, and auto_reload reloads what changed
(the head and one agent's host on loopback, each with its own runtime directory)."""

from __future__ import annotations

import os
import pathlib

import pytest

import meshrt
from meshrt import Actor, Workspace, endpoint

from .test_multihost import TOKEN, AgentProcesses, _start_agent, stop_agent


class Importer(Actor):
    @endpoint
    def version(self):
        import synced_mod

        return synced_mod.VERSION, synced_mod.__file__, os.environ.get("WORKSPACE_DIR")

    @endpoint
    def exists(self, name):
        return os.path.exists(os.path.join(os.environ["WORKSPACE_DIR"], name))


def _write(project, version: int, extra: bool = True) -> None:
    (project / "synced_mod.py").write_text(f"VERSION = {version}\n")
    if extra:
        (project / "notes.txt").write_text("notes\n")
    elif (project / "notes.txt").exists():
        (project / "notes.txt").unlink()


def _project(tmp_path, name: str, version: int):
    project = tmp_path / name
    project.mkdir()
    _write(project, version)
    return project


def _touch(path: str) -> None:
    pathlib.Path(path).touch()


@pytest.fixture
def agent_host(monkeypatch):
    monkeypatch.setenv("MESHRT_TOKEN", TOKEN)
    info = meshrt.init(address="127.0.0.1:0", num_cpus=1)
    agent = _start_agent(info["tcp_address"], "synced")
    hosts = meshrt.hosts(min_hosts=1, timeout=60)
    spawned = AgentProcesses([agent])
    yield hosts, spawned.remember
    spawned.remember()
    meshrt.shutdown()
    stop_agent(agent)
    spawned.assert_gone()


@pytest.mark.timeout(120)
async def test_synced_code_is_imported_there_and_reloaded_when_it_changes(agent_host, tmp_path):
    hosts, remember = agent_host
    project = _project(tmp_path, "proj", 1)
    await hosts.sync_workspace(Workspace(dirs=[str(project)]))
    procs = hosts.spawn_procs(per_host={"gpus": 2})  # (started after the sync: they find it at once)
    importers = procs.spawn("importers", Importer)
    first = list((await importers.version.call()).values())
    assert {version for version, _file, _root in first} == {1}
    version, module_file, root = first[0]
    assert module_file == os.path.join(root, "proj", "synced_mod.py")
    assert not module_file.startswith(str(project))  # (the host's copy, not the original)
    assert await importers.slice(gpus=0).exists.call_one("proj/notes.txt")
    _touch(os.path.join(root, "kept.txt"))  # (not written by a sync: never removed by one)

    _write(project, 2, extra=False)
    await hosts.sync_workspace(Workspace(dirs=[str(project)]), auto_reload=True)
    assert {v for v, _f, _r in (await importers.version.call()).values()} == {2}
    assert not await importers.slice(gpus=0).exists.call_one("proj/notes.txt")  # (gone from the source)
    assert await importers.slice(gpus=0).exists.call_one("kept.txt")

    (project / "synced_mod.py").write_text("VERSION = (\n")  # (a syntax error: reported, the rest synced)
    with pytest.raises(RuntimeError, match=r"did not reload[\s\S]*synced_mod .*SyntaxError"):
        await hosts.sync_workspace(Workspace(dirs=[str(project)]), auto_reload=True)
    assert {v for v, _f, _r in (await importers.version.call()).values()} == {2}
    remember()
    await procs.stop()


@pytest.mark.timeout(120)
async def test_running_processes_import_a_workspace_synced_after_they_started(agent_host, tmp_path):
    hosts, remember = agent_host
    project = _project(tmp_path, "later", 7)
    procs = hosts.spawn_procs(per_host={"gpus": 1})
    importers = procs.spawn("importers", Importer)
    with pytest.raises(meshrt.ActorError, match="synced_mod"):
        await importers.version.call_one()
    await procs.sync_workspace(Workspace(dirs={str(project): ""}))  # (a ProcMesh syncs its hosts)
    version, module_file, root = await importers.version.call_one()
    assert version == 7 and module_file == os.path.join(root, "synced_mod.py")
    remember()
    await procs.stop()


def test_a_bad_workspace_is_named(tmp_path):
    with pytest.raises(TypeError, match="give a list of directories"):
        Workspace(dirs=str(tmp_path))
    with pytest.raises(ValueError, match="is not a local directory"):
        Workspace(dirs=[str(tmp_path / "missing")])
    with pytest.raises(ValueError, match="must be relative"):
        Workspace(dirs={str(tmp_path): "../up"})
    with pytest.raises(ValueError, match="must be relative"):
        Workspace(dirs={str(tmp_path): "/abs"})
    (tmp_path / "a" / "src").mkdir(parents=True)
    (tmp_path / "b" / "src").mkdir(parents=True)
    with pytest.raises(ValueError, match="would both be written to"):
        Workspace(dirs=[str(tmp_path / "a" / "src"), str(tmp_path / "b" / "src")])
    with pytest.raises(ValueError, match="would both be written to"):
        Workspace(dirs={str(tmp_path / "a"): "x", str(tmp_path / "b"): "x/y"})
    with pytest.raises(ValueError, match="conda environment"):
        Workspace(dirs=[str(tmp_path)], env="myenv")
    meshrt.init(num_cpus=1)
    with pytest.raises(ValueError, match="conda=True"):
        meshrt.this_host().sync_workspace(Workspace(dirs=[str(tmp_path)]), conda=True)
    with pytest.raises(TypeError, match="meshrt.Workspace"):
        meshrt.this_host().sync_workspace([str(tmp_path)])

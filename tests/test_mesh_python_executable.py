"""HostMesh.with_python_executable(path): a mesh's processes run that interpreter, and
so do the processes they spawn themselves (mesh/python_executable.py, zygote.py)."""

from __future__ import annotations

import os
import sys

import pytest

import meshrt
from meshrt import Actor, endpoint, this_host

from . import test_multihost_nodes

two_nodes = test_multihost_nodes.two_nodes  # (the fixture: the head and one agent's host)

pytestmark = pytest.mark.timeout(120)


class Probe(Actor):
    @endpoint
    def how(self):
        return os.environ.get("PROBE_WRAPPED"), os.getpid()

    @endpoint
    def nested(self):
        procs = this_host().spawn_procs(per_host={"gpus": 1})
        try:
            return procs.spawn("inner", Probe).how.call_one().get()[0]
        finally:
            procs.stop().get()


@pytest.fixture
def wrapped_python(tmp_path):
    """An interpreter that marks the processes it starts (a shell script running ours)."""
    script = tmp_path / "python-wrapped"
    script.write_text(f'#!/bin/sh\nPROBE_WRAPPED=yes exec "{sys.executable}" "$@"\n')
    script.chmod(0o755)
    return str(script)


def test_processes_run_the_given_interpreter_and_pass_it_on(rt, wrapped_python):
    host = this_host().with_python_executable(wrapped_python)
    procs = host.spawn_procs(per_host={"gpus": 2})
    probes = procs.spawn("probe", Probe)
    answers = list(probes.how.call().get().values())
    assert [wrapped for wrapped, _ in answers] == ["yes", "yes"] and len({pid for _, pid in answers}) == 2
    assert probes.slice(gpus=0).nested.call_one().get() == "yes"  # (its own spawn inherits it)
    plain = this_host().spawn_procs(per_host={"gpus": 1}).spawn("plain", Probe)
    assert plain.how.call_one().get()[0] is None  # (other meshes: the driver's interpreter)
    assert host.stream_logs is True
    procs.stop().get()


def test_an_interpreter_that_is_not_there_is_named(rt, tmp_path):
    with pytest.raises(ValueError, match="no executable file"):
        this_host().with_python_executable(str(tmp_path / "missing" / "python"))
    with pytest.raises(TypeError, match="with_python_executable"):
        this_host().with_python_executable(None)


def test_another_hosts_processes_run_it_too(two_nodes, wrapped_python):
    _head, _other, remember, _agent = two_nodes
    hosts = meshrt.hosts(min_hosts=1, timeout=60)
    procs = hosts.with_python_executable(wrapped_python).spawn_procs(per_host={"gpus": 1})
    probes = procs.spawn("probe", Probe)
    assert [wrapped for wrapped, _ in probes.how.call().get(timeout=60).values()] == ["yes"]
    remember()  # (its processes: gone by the end, the fixture checks)
    procs.stop().get(timeout=60)

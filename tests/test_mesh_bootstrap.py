"""Monarch's run_worker_loop_forever / attach_to_workers: worker machines that listen,
and a client that attaches them as a HostMesh (each "machine" here is a process of its
own running the worker loop, with its own agent, zygote and store once attached)."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

import meshrt
from meshrt import Actor, attach_to_workers, endpoint

from .helpers import wait_until

TOKEN = "7a" * 16
pytestmark = pytest.mark.timeout(120)


def _start_worker(token: str = TOKEN) -> tuple[subprocess.Popen, str]:
    code = ("from meshrt import run_worker_loop_forever; "
            "run_worker_loop_forever(address='tcp://127.0.0.1:0', ca='trust_all_connections')")
    worker = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, MESHRT_TOKEN=token),
                              stdout=subprocess.PIPE, text=True)
    line = worker.stdout.readline()  # "meshrt worker listening on tcp://127.0.0.1:PORT"
    assert line.startswith("meshrt worker listening on "), line
    return worker, line.split()[-1]


def _descendants(worker: subprocess.Popen) -> set:
    try:
        return {p.pid for p in psutil.Process(worker.pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


@pytest.fixture
def workers(monkeypatch):
    monkeypatch.setenv("MESHRT_TOKEN", TOKEN)
    started = [_start_worker() for _ in range(2)]
    yield started
    meshrt.shutdown()
    for worker, _ in started:
        worker.terminate()
        worker.wait(30)
        worker.stdout.close()


class Where(Actor):
    @endpoint
    def node(self):
        node_id = meshrt.get_runtime_context().get_node_id()
        return next(n["NodeName"] for n in meshrt.nodes() if n["NodeID"] == node_id)


def test_attached_workers_are_the_hosts_of_a_mesh_in_order(workers):
    hosts = attach_to_workers(workers=[address for _, address in workers], ca="trust_all_connections",
                              name="machine")
    assert hosts.sizes == {"hosts": 2}
    procs = hosts.spawn_procs(per_host={"gpus": 2})
    names = list(procs.spawn("where", Where).node.call().get(timeout=60).values())
    assert [n.split("-")[0] for n in names] == ["machine0", "machine0", "machine1", "machine1"]
    assert all(_descendants(w) for w, _ in workers)  # (each runs an agent, and its processes)
    meshrt.shutdown()  # the client goes: each worker ends what it started, and waits for the next
    assert wait_until(lambda: not any(_descendants(w) for w, _ in workers), timeout=30)
    again = attach_to_workers(workers=[address for _, address in workers], ca="trust_all_connections")
    assert len(again.spawn_procs().spawn("where", Where).node.call().get(timeout=60)) == 2
    again.shutdown().get(timeout=60)  # (their agents leave: the workers are free for this client again)
    third = attach_to_workers(workers=[workers[1][1]], ca="trust_all_connections", name="last")
    assert third.spawn_procs().spawn("where", Where).node.call_one().get(timeout=60).startswith("last0")


def test_bad_attachments_are_named(workers, monkeypatch):
    address = workers[0][1]
    with pytest.raises(NotImplementedError, match="trust_all_connections"):
        attach_to_workers(workers=[address], ca="my_ca.pem")
    with pytest.raises(TypeError, match="a list of worker addresses"):
        attach_to_workers(workers=address, ca="trust_all_connections")
    with pytest.raises(ValueError, match="not a TCP address"):
        attach_to_workers(workers=["unix:@sock"], ca="trust_all_connections")
    with pytest.raises(ValueError, match="listed twice"):
        attach_to_workers(workers=[address, address], ca="trust_all_connections")
    stranger, stranger_address = _start_worker(token="5e" * 16)
    try:
        with pytest.raises(ConnectionError, match="refused this client's cluster token"):
            attach_to_workers(workers=[address, stranger_address], ca="trust_all_connections")
        # (the worker that did answer was let go: it serves this client's next attach)
        assert attach_to_workers(workers=[address], ca="trust_all_connections").sizes == {"hosts": 1}
    finally:
        stranger.terminate()
        stranger.wait(30)
        stranger.stdout.close()
    meshrt.shutdown()
    gone = address.rsplit(":", 1)[0] + ":1"  # (nothing listens on port 1)
    monkeypatch.setattr("meshrt.mesh.bootstrap._DIAL_WAIT_S", 0.5)
    with pytest.raises(ConnectionError, match="start run_worker_loop_forever there first"):
        attach_to_workers(workers=[gone], ca="trust_all_connections")


def test_enable_transport_chooses_where_the_runtime_listens(monkeypatch):
    from meshrt import ChannelTransport, enable_transport
    from meshrt._private import driver, state

    monkeypatch.setattr(driver, "auto_init_address", None)
    with pytest.raises(NotImplementedError, match="TLS and QUIC are not supported"):
        enable_transport("metatls-hostname")
    with pytest.raises(NotImplementedError, match="TLS and QUIC are not supported"):
        enable_transport(ChannelTransport.Quic)  # (Monarch's enum, by its name)
    enable_transport(ChannelTransport.Unix)  # (this machine: as "ipc")
    assert driver.auto_init_address is None
    with pytest.raises(ValueError, match="give 'tcp', 'ipc'"):
        enable_transport("carrier-pigeon")
    enable_transport("tcp://127.0.0.1:0")
    meshrt.this_host()  # (the first call of the mesh API starts the runtime, listening there)
    assert state.core().controller.public_address.startswith("tcp:127.0.0.1:")
    with pytest.raises(RuntimeError, match="before anything else"):
        enable_transport("ipc")

"""Hosts in network namespaces of their own, joined by a bridge: each agent and its
processes see only their own interface and loopback (and their own abstract unix
sockets), as separate machines on one switch would. Loopback-port agents
(test_multihost.py) share all of that with the driver, so an address that only works
on the driver's host would pass there and fail here.

Needs root and iproute2's ``ip``; skipped where namespaces cannot be made.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import psutil
import pytest

import meshrt
from meshrt import endpoint

from .helpers import wait_until
from .test_multihost import TOKEN, Worker, stop_agent

SUBNET = "10.213.0"  # the bridge is .1 (the driver's host); namespaces are .2, .3


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def _undo(made: list) -> None:
    for kind, name in reversed(made):  # (a namespace takes its end of the veth pair with it)
        subprocess.run(["ip", kind, "del", name], capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def namespaces():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2's `ip`")
    tag = str(os.getpid() % 100000)
    bridge = f"mrb{tag}"
    names = [f"meshrt-{tag}-{i}" for i in (2, 3)]
    made: list = []
    try:
        _ip("link", "add", bridge, "type", "bridge")
        made.append(("link", bridge))
        _ip("addr", "add", f"{SUBNET}.1/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for i, ns in zip((2, 3), names, strict=True):
            _ip("netns", "add", ns)
            made.append(("netns", ns))
            outer, inner = f"mrh{tag}{i}", f"mrn{tag}{i}"
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            made.append(("link", outer))
            _ip("link", "set", inner, "netns", ns)
            _ip("link", "set", outer, "master", bridge)
            _ip("link", "set", outer, "up")
            _ip("-n", ns, "addr", "add", f"{SUBNET}.{i}/24", "dev", inner)
            _ip("-n", ns, "link", "set", inner, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
        _undo(made)
        pytest.skip(f"cannot make network namespaces here: {getattr(err, 'stderr', '') or err}")
    yield names
    _undo(made)


def _start_agent_in(ns: str, address: str, name: str) -> subprocess.Popen:
    # (`ip netns exec` enters the namespace and execs the agent: the pid is the agent's)
    return subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-m", "meshrt", "agent", "--address", address,
         "--name", name, "--object-store-memory", str(128 << 20)],
        env=dict(os.environ, MESHRT_TOKEN=TOKEN), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def ns_cluster(namespaces, monkeypatch):
    """A driver listening on the bridge, and one agent in each namespace."""
    monkeypatch.setenv("MESHRT_TOKEN", TOKEN)
    info = meshrt.init(address=f"{SUBNET}.1:0", num_cpus=1)
    port = info["tcp_address"].rsplit(":", 1)[1]
    agents = []
    for i, ns in enumerate(namespaces):  # one after the other: host i of the mesh is agent i
        agents.append(_start_agent_in(ns, f"{SUBNET}.1:{port}", f"ns-host{i}"))
        hosts = meshrt.hosts(min_hosts=i + 1, timeout=60)
    seen: set = set()

    def remember():
        for agent in agents:
            try:
                seen.update(p.pid for p in psutil.Process(agent.pid).children(recursive=True))
            except psutil.NoSuchProcess:
                pass

    yield hosts, agents, remember
    remember()
    meshrt.shutdown()
    for agent in agents:
        stop_agent(agent)
    assert wait_until(lambda: not [p for p in seen if psutil.pid_exists(p)
                                   and psutil.Process(p).status() != psutil.STATUS_ZOMBIE], 15)


class NsWorker(Worker):
    @endpoint
    def network(self):
        """This process's network namespace, and the address it told its peers to dial."""
        return os.readlink("/proc/self/ns/net"), meshrt._private.state.core().listen_address


@pytest.mark.timeout(120)
def test_a_mesh_spans_hosts_in_their_own_network_namespaces(ns_cluster):
    hosts, _, _ = ns_cluster
    mesh = hosts.spawn_procs(per_host={"gpus": 2}).spawn("w", NsWorker)
    nets = mesh.network.call().get(timeout=60)
    mine = os.readlink("/proc/self/ns/net")
    for host, ip in ((0, f"{SUBNET}.2"), (1, f"{SUBNET}.3")):
        seen = {nets.item(hosts=host, gpus=g) for g in (0, 1)}
        assert len({ns for ns, _ in seen}) == 1 and mine not in {ns for ns, _ in seen}
        assert all(address.startswith(f"tcp:{ip}:") for _, address in seen)
    assert mesh.slice(hosts=1).where.call().get(timeout=60).item(gpus=1)[0] != 0


@pytest.mark.timeout(120)
def test_objects_and_calls_cross_between_namespaced_hosts(ns_cluster):
    hosts, _, _ = ns_cluster
    mesh = hosts.spawn_procs(per_host={"gpus": 1}).spawn("w", Worker)
    first, second = mesh.slice(hosts=0), mesh.slice(hosts=1)
    n = 1 << 18
    want = float(np.arange(n, dtype=np.float64).sum())
    refs = first.put_big.call_one(n).get(timeout=60)  # owned by a process on host 0
    assert float(meshrt.get(refs[0], timeout=60).sum()) == want  # the driver pulls it
    assert second.in_shared_memory.call_one(refs).get(timeout=60) == (True, want)  # host 1 pulls it into its store
    assert first.call_other.call_one(mesh.slice(hosts=1)).get(timeout=60) == [
        second.where.call_one().get(timeout=60)[0]]  # an actor on host 0 calls host 1 itself
    big = np.arange(1 << 20, dtype=np.float64)
    assert np.array_equal(second.echo.call_one(big).get(timeout=60), big)


@pytest.mark.timeout(120)
def test_killing_a_namespaced_agent_fails_its_actors_and_the_rest_serves(ns_cluster, failures):
    hosts, agents, remember = ns_cluster
    workers = hosts.spawn_procs(per_host={"gpus": 1}).spawn("w", Worker)
    first = list(workers.where.call().get(timeout=60).values())
    remember()
    agents[0].kill()
    agents[0].wait(timeout=30)
    with pytest.raises(meshrt.exceptions.ActorDiedError, match="host agent 'ns-host0'.*went away"):
        workers.slice(hosts=0).where.call_one().get(timeout=30)
    assert workers.slice(hosts=1).where.call_one().get(timeout=30) == first[1]
    seen, _ = failures
    assert all("ns-host0" in f.report() for f in seen)


@pytest.mark.timeout(180)
def test_torch_distributed_between_namespaced_hosts(ns_cluster):
    """The rendezvous address is the first host's own (not the driver's loopback)."""
    pytest.importorskip("torch")
    from .test_multihost import Reducer

    hosts, _, remember = ns_cluster
    procs = hosts.spawn_procs(per_host={"gpus": 2})
    procs.init_torch_distributed(backend="gloo").get(timeout=120)
    remember()
    got = list(procs.spawn("r", Reducer).reduce.call().get(timeout=60).values())
    assert [g[:2] for g in got] == [(0, 0), (1, 1), (2, 0), (3, 1)]
    assert [g[2] for g in got] == [2.0, 4.0, 2.0, 4.0]  # along "hosts": {0,2} and {1,3}
    procs.stop().get(timeout=30)

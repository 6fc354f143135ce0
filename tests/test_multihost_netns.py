"""Hosts in network namespaces of their own, with host names of their own, on a
switch with the driver: each agent and its processes see only their own interface and
loopback (and their own abstract unix sockets), and meshrt takes them for other
machines (no cross-memory attach, no loans: the tensor engine goes over the network).
Loopback-port agents (test_multihost.py) share all of that with the driver, so an
address or a path that only works on the driver's machine would pass there and fail
here.

Needs root, iproute2's ``ip`` and ``unshare``; skipped where namespaces cannot be made.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import psutil
import pytest

import meshrt
from meshrt import endpoint

from .helpers import wait_until
from .test_multihost import (
    TOKEN,
    AgentProcesses,
    Worker,
    assert_a_buffer_crosses_hosts,
    assert_host1_serves,
    hang_on_host0,
    kill_agent_mid_call,
    stop_agent,
)

SUBNET = "10.213.0"  # the driver's host is .1; the namespaced hosts .2 and .3
BRIDGED = "10.214.0"  # a bridge on the driver's host (.1), and a host behind it (.2)
SIDE_LINK = "10.218.0"  # a second link between the driver's host (.1) and the first namespaced host (.2)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def _undo(made: list) -> None:
    for kind, name in reversed(made):  # (a namespace takes the veth ends inside it, and their peers)
        subprocess.run(["ip", kind, "del", name], capture_output=True, timeout=30)


def _remove_stale() -> None:
    """Namespaces and links a killed test run left behind (its process is gone): they
    hold this file's addresses, and a new run's hosts could not reach the driver."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    stale = {m.group(1) for m in re.finditer(r"^meshrt-(\d+)-", listed, re.M) if not psutil.pid_exists(int(m.group(1)))}
    if not stale:
        return
    for name in re.findall(r"^(meshrt-\d+-\S+)", listed, re.M):
        if name.split("-")[1] in stale:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, timeout=30).stdout
    for link in re.findall(r"^\d+: (mr[a-z](\d+)[a-z0-9]*)[@:]", links, re.M):
        if link[1] in stale or link[1][:-1] in stale:  # (mrb<tag>, mru<tag>h; mrh<tag><i>)
            subprocess.run(["ip", "link", "del", link[0]], capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def namespaces():
    """Two host namespaces and this one on a switch: a bridge inside a namespace of its
    own, so every host's interface is a plain veth (UCX's tcp transport skips bridge
    devices, as it should: docker0 has the same address on every machine)."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None:
        pytest.skip("hosts in namespaces need root, iproute2's `ip` and util-linux's `unshare`")
    _remove_stale()
    tag = str(os.getpid() % 100000)
    switch = f"meshrt-{tag}-switch"
    names = [f"meshrt-{tag}-{i}" for i in (2, 3)]
    made: list = []
    try:
        _ip("netns", "add", switch)
        made.append(("netns", switch))
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        for i, ns in ((1, None), *zip((2, 3), names, strict=True)):
            host_end, switch_end = f"mrh{tag}{i}", f"mrs{tag}{i}"
            _ip("link", "add", host_end, "type", "veth", "peer", "name", switch_end)
            made.append(("link", host_end))
            _ip("link", "set", switch_end, "netns", switch)
            _ip("-n", switch, "link", "set", switch_end, "master", "br0")
            _ip("-n", switch, "link", "set", switch_end, "up")
            where = []
            if ns is not None:  # (i == 1: the driver's end stays in this namespace)
                _ip("netns", "add", ns)
                made.append(("netns", ns))
                _ip("link", "set", host_end, "netns", ns)
                where = ["-n", ns]
                _ip(*where, "link", "set", "lo", "up")
            _ip(*where, "addr", "add", f"{SUBNET}.{i}/24", "dev", host_end)
            _ip(*where, "link", "set", host_end, "up")
        # And a host behind a bridge in this namespace, as a container behind docker0 is:
        # reachable over TCP, but not by UCX, which does not use bridges.
        bridged, bridge = f"meshrt-{tag}-b", f"mrb{tag}"
        _ip("link", "add", bridge, "type", "bridge")
        made.append(("link", bridge))
        _ip("addr", "add", f"{BRIDGED}.1/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        _ip("netns", "add", bridged)
        made.append(("netns", bridged))
        _ip("link", "add", f"mrb{tag}h", "type", "veth", "peer", "name", f"mrb{tag}n")
        _ip("link", "set", f"mrb{tag}h", "master", bridge)
        _ip("link", "set", f"mrb{tag}h", "up")
        _ip("link", "set", f"mrb{tag}n", "netns", bridged)
        _ip("-n", bridged, "link", "set", "lo", "up")
        _ip("-n", bridged, "addr", "add", f"{BRIDGED}.2/24", "dev", f"mrb{tag}n")
        _ip("-n", bridged, "link", "set", f"mrb{tag}n", "up")
        # And a second link between this namespace and the first host's, for a test
        # whose agent there narrows its UCX to it (made now: a process's UCX takes no
        # interface that appeared after it first opened).
        side_here, side_there = f"mru{tag}h", f"mru{tag}n"
        _ip("link", "add", side_here, "type", "veth", "peer", "name", side_there)
        made.append(("link", side_here))
        _ip("link", "set", side_there, "netns", names[0])
        _ip("addr", "add", f"{SIDE_LINK}.1/24", "dev", side_here)
        _ip("link", "set", side_here, "up")
        _ip("-n", names[0], "addr", "add", f"{SIDE_LINK}.2/24", "dev", side_there)
        _ip("-n", names[0], "link", "set", side_there, "up")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
        _undo(made)
        pytest.skip(f"cannot make network namespaces here: {getattr(err, 'stderr', '') or err}")
    yield Namespaces(names, switch, [f"mrs{tag}{i}" for i in (2, 3)], bridged, side_there)
    _undo(made)


class Namespaces:
    """The hosts' namespaces, and the switch ports that connect them."""

    def __init__(self, names: list, switch: str, ports: list, bridged: str, side_link: str) -> None:
        self.names, self.switch, self.ports, self.bridged = names, switch, ports, bridged
        self.side_link = side_link  # the first host's end of its second link with this namespace

    def cut(self, host: int) -> None:
        """Unplug a host from the switch: its connections stay open, nothing gets through."""
        _ip("-n", self.switch, "link", "set", self.ports[host], "down")

    def mend(self, host: int) -> None:
        _ip("-n", self.switch, "link", "set", self.ports[host], "up")

    def block_side_link(self) -> None:
        """From here on, neither end of the side link reaches the other over it: its
        connections are reset and a connect either way fails at once (an unreachable
        route on each side, more specific than the link's)."""
        _ip("route", "add", "unreachable", f"{SIDE_LINK}.2/32")
        _ip("-n", self.names[0], "route", "add", "unreachable", f"{SIDE_LINK}.1/32")
        for ns, far in ((None, 2), (self.names[0], 1)):
            where = ["ip", "netns", "exec", ns] if ns else []
            subprocess.run([*where, "ss", "-K", "dst", f"{SIDE_LINK}.{far}"], check=True, capture_output=True,
                           timeout=30)
            left = subprocess.run([*where, "ss", "-Htn", "dst", f"{SIDE_LINK}.{far}"], check=True,
                                  capture_output=True, text=True, timeout=30).stdout.strip()
            if left:  # (ss -K needs the kernel's CONFIG_INET_DIAG_DESTROY, and says nothing without it)
                pytest.skip(f"this kernel cannot reset TCP connections (`ss -K`); still open: {left}")

    def unblock_side_link(self) -> None:
        subprocess.run(["ip", "route", "del", "unreachable", f"{SIDE_LINK}.2/32"], capture_output=True, timeout=30)
        subprocess.run(["ip", "-n", self.names[0], "route", "del", "unreachable", f"{SIDE_LINK}.1/32"],
                       capture_output=True, timeout=30)


def _start_agent_in(ns: str, address: str, name: str, **env: str) -> subprocess.Popen:
    # `ip netns exec` enters the network namespace, `unshare --uts` gives the host a name
    # of its own (so meshrt sees another machine: no cross-memory attach, no loans, the
    # tensor engine over the network), and each execs the next: the pid is the agent's.
    agent = [sys.executable, "-m", "meshrt", "agent", "--address", address, "--name", name,
             "--object-store-memory", str(128 << 20)]
    return subprocess.Popen(
        ["ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c", f'hostname {name} && exec "$@"', "sh", *agent],
        env=dict(os.environ, MESHRT_TOKEN=TOKEN, **env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)


@pytest.fixture
def ns_cluster(namespaces, monkeypatch):
    """A driver listening on the bridge, and one agent in each namespace."""
    monkeypatch.setenv("MESHRT_TOKEN", TOKEN)
    info = meshrt.init(address=f"{SUBNET}.1:0", num_cpus=1)
    port = info["tcp_address"].rsplit(":", 1)[1]
    agents = []
    for i, ns in enumerate(namespaces.names):  # one after the other: host i of the mesh is agent i
        agents.append(_start_agent_in(ns, f"{SUBNET}.1:{port}", f"ns-host{i}"))
        hosts = meshrt.hosts(min_hosts=i + 1, timeout=60)
    spawned = AgentProcesses(agents)
    yield hosts, agents, spawned.remember
    spawned.remember()
    meshrt.shutdown()
    for agent in agents:
        stop_agent(agent)
    spawned.assert_gone()


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
    assert meshrt._private.state.core().controller.ucx_unreached == set()  # (checked as they joined)
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
    blob = os.urandom(5 << 20)  # (bytes are lent on one machine; pulled between machines)
    assert second.echo.call_one(blob).get(timeout=60) == blob


@pytest.mark.timeout(120)
def test_killing_a_namespaced_agent_mid_call_fails_the_call_and_the_rest_serves(ns_cluster, failures):
    hosts, agents, remember = ns_cluster
    kill_agent_mid_call(hosts, agents, remember, "ns-host0")
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


@pytest.mark.timeout(180)
def test_large_values_between_namespaced_hosts_are_pulled_over_the_network(ns_cluster):
    """Hosts with names of their own are other machines to meshrt: an 8 MiB argument is
    pulled by each host's agent, and 8 MiB results by the driver, through the tensor
    engine over the network; the control connections carry only handles."""
    torch = pytest.importorskip("torch")
    hosts, _, remember = ns_cluster
    workers = hosts.spawn_procs(per_host={"gpus": 2}).spawn("w", Worker)
    workers.where.call().get(timeout=60)
    remember()
    conns = [h.conn for h in meshrt._private.state.core().controller.hosts.values()]
    before = [(c.bytes_out, c.bytes_in) for c in conns]
    t = torch.arange(1 << 21, dtype=torch.float32)  # 8 MiB
    assert list(workers.sum_of.call(t).get(timeout=60).values()) == [float(t.sum())] * 4
    assert all(torch.equal(v, t) for v in workers.slice(gpus=0).echo.call(t).get(timeout=60).values())
    moved = [(c.bytes_out - out, c.bytes_in - into) for c, (out, into) in zip(conns, before, strict=True)]
    assert all(out < 256 * 1024 and into < 256 * 1024 for out, into in moved), moved


@pytest.mark.timeout(180)
def test_a_tensor_buffer_is_read_and_written_from_another_namespaced_host(ns_cluster):
    pytest.importorskip("torch")
    hosts, _, remember = ns_cluster
    assert_a_buffer_crosses_hosts(hosts, remember)


@pytest.fixture
def short_host_timeout(monkeypatch):
    monkeypatch.setenv("MESHRT_HOST_TIMEOUT_S", "2")


@pytest.mark.timeout(120)
def test_a_host_cut_off_the_network_is_taken_for_dead_and_leaves(short_host_timeout, namespaces, ns_cluster,
                                                                failures):
    """A partition, not a crash: no connection closes. The head hears nothing from the
    host for MESHRT_HOST_TIMEOUT_S and fails its actors' callers; the agent hears
    nothing from the head and exits with its processes."""
    hosts, agents, remember = ns_cluster
    stuck, pending = hang_on_host0(hosts)
    remember()
    controller = meshrt._private.state.core().controller
    cut_id = next(h.id for h in controller.hosts.values() if h.name == "ns-host0")
    conns = [w.conn for w in controller.workers.values() if w.host == cut_id]  # its processes' own, to us
    namespaces.cut(0)
    try:
        with pytest.raises(meshrt.exceptions.ActorDiedError, match="'ns-host0'.*stopped answering"):
            pending.get(timeout=60)
        # No goodbye can arrive from there: taken for dead, its connections are closed here.
        assert conns and wait_until(lambda: all(c.closed for c in conns), 10)
        assert_host1_serves(stuck)
        assert agents[0].wait(timeout=60) is not None  # cut off, it left (with its processes: ns_cluster checks)
    finally:
        namespaces.mend(0)


@meshrt.remote
class _Sender:
    def sum_there(self, mesh, values):
        return mesh.sum_of.call_one(values).get(timeout=60)


@pytest.mark.timeout(180)
def test_a_host_ucx_does_not_reach_gets_its_large_values_inline(namespaces, monkeypatch, caplog):
    """A host reached over TCP through a bridge only (UCX skips bridge devices): the
    check as it joins finds that, says so once, and large values still cross both ways
    inside the messages: a result, an object owned over there, an argument, a driver
    object it fetches."""
    monkeypatch.setenv("MESHRT_TOKEN", TOKEN)
    monkeypatch.setenv("MESHRT_PULL_ENGINE", "1")
    values = np.arange(1 << 18, dtype=np.float64)
    want = float(values.sum())
    info = meshrt.init(address=f"{BRIDGED}.1:0", num_cpus=1)
    sender = _Sender.remote()  # a process of the head's, started before the host joins
    meshrt.get(sender.__ray_ready__.remote(), timeout=60)
    agent = _start_agent_in(namespaces.bridged, f"{BRIDGED}.1:{info['tcp_address'].rsplit(':', 1)[1]}", "bridged")
    try:
        with caplog.at_level("WARNING", logger="meshrt"):
            hosts = meshrt.hosts(min_hosts=1, timeout=60)
        said = [r.getMessage() for r in caplog.records if "UCX does not connect" in r.getMessage()]
        assert len(said) == 1 and "'bridged'" in said[0] and "UCX_TCP_BRIDGE_ENABLE" in said[0], said
        worker = hosts.spawn_procs(per_host={"gpus": 1}).spawn("w", Worker)
        refs = worker.put_big.call_one(1 << 18).get(timeout=60)  # owned over there
        assert float(meshrt.get(refs[0], timeout=60).sum()) == want
        assert float(worker.echo.call_one(values).get(timeout=60).sum()) == want  # there and back
        assert worker.total.call_one([meshrt.put(values)]).get(timeout=60) == want  # the driver's, fetched there
        assert meshrt.get(sender.sum_there.remote(worker, values), timeout=60) == want  # told after it started
    finally:
        meshrt.shutdown()
        stop_agent(agent)


@pytest.mark.timeout(180)
def test_two_hosts_ucx_does_not_connect_send_their_large_values_inline(namespaces, monkeypatch, caplog):
    """Both hosts reach the head through UCX, but not each other: the first one's UCX is
    narrowed (UCX_NET_DEVICES) to a second link that only the head is on, while its TCP
    stays on the switch. The check as the second host joins finds that and says so
    once; large values between those two cross inside the messages, and each still
    lends to and pulls from the head."""
    monkeypatch.setenv("MESHRT_TOKEN", TOKEN)
    monkeypatch.setenv("MESHRT_PULL_ENGINE", "1")
    agents = []
    try:
        info = meshrt.init(address=f"{SUBNET}.1:0", num_cpus=1)
        head = f"{SUBNET}.1:{info['tcp_address'].rsplit(':', 1)[1]}"
        with caplog.at_level("WARNING", logger="meshrt"):
            agents.append(_start_agent_in(namespaces.names[0], head, "narrowed",
                                          UCX_NET_DEVICES=namespaces.side_link))
            meshrt.hosts(min_hosts=1, timeout=60)
            agents.append(_start_agent_in(namespaces.names[1], head, "plain"))
            hosts = meshrt.hosts(min_hosts=2, timeout=60)
        said = [r.getMessage() for r in caplog.records if "UCX does not connect" in r.getMessage()]
        assert len(said) == 1 and "host 'plain' and host 'narrowed'" in said[0], said
        controller = meshrt._private.state.core().controller
        assert controller.ucx_unreached == {frozenset(controller.hosts)}  # (the two hosts, and no more)
        mesh = hosts.spawn_procs(per_host={"gpus": 1}).spawn("w", Worker)
        narrowed, plain = mesh.slice(hosts=0), mesh.slice(hosts=1)
        values = np.arange(1 << 18, dtype=np.float64)  # 2 MiB
        want = float(values.sum())
        refs = narrowed.put_big.call_one(1 << 18).get(timeout=60)
        assert plain.total.call_one(refs).get(timeout=60) == want  # owned on one, fetched on the other
        assert narrowed.ask.call_one(plain, values).get(timeout=60)[1:] == (want, want)  # argument and result
        assert plain.ask.call_one(narrowed, values).get(timeout=60)[1:] == (want, want)
        conns = [h.conn for h in controller.hosts.values()]
        before = [(c.bytes_out, c.bytes_in) for c in conns]
        assert float(meshrt.get(refs[0], timeout=60).sum()) == want  # the head still pulls from both
        assert all(float(w.echo.call_one(values).get(timeout=60).sum()) == want for w in (narrowed, plain))
        moved = [(c.bytes_out - out, c.bytes_in - into) for c, (out, into) in zip(conns, before, strict=True)]
        assert all(out < 256 * 1024 and into < 256 * 1024 for out, into in moved), moved
    finally:
        meshrt.shutdown()
        for agent in agents:
            stop_agent(agent)


@pytest.fixture
def narrowed_worker(namespaces, monkeypatch):
    """(controller, worker): an agent whose UCX goes over the side link only, which
    passes its check as the host joins, and an actor there. Its tests block the link."""
    monkeypatch.setenv("MESHRT_TOKEN", TOKEN)
    monkeypatch.setenv("MESHRT_PULL_ENGINE", "1")
    agent = None
    try:
        info = meshrt.init(address=f"{SUBNET}.1:0", num_cpus=1)
        head = f"{SUBNET}.1:{info['tcp_address'].rsplit(':', 1)[1]}"
        agent = _start_agent_in(namespaces.names[0], head, "narrowed", UCX_NET_DEVICES=namespaces.side_link)
        hosts = meshrt.hosts(min_hosts=1, timeout=60)
        controller = meshrt._private.state.core().controller
        assert not controller.ucx_unreached  # (the check passed)
        yield controller, hosts.spawn_procs(per_host={"gpus": 1}).spawn("w", Worker)
    finally:
        namespaces.unblock_side_link()
        meshrt.shutdown()
        if agent is not None:
            stop_agent(agent)


def _warned_once_of_cut(caplog, controller, between: str) -> None:
    said = [r.getMessage() for r in caplog.records if "UCX does not connect" in r.getMessage()]
    assert len(said) == 1 and f"{between} any more" in said[0], said
    assert controller.ucx_unreached == {frozenset([0, *controller.hosts])}


@pytest.mark.timeout(180)
def test_a_ucx_route_that_breaks_after_its_check_loses_no_value(namespaces, narrowed_worker, caplog):
    """A read through a route that broke after its check fails, its lender sends the
    bytes inside a message instead, the head says so once, and from then on large
    values between the two go inline."""
    controller, worker = narrowed_worker
    values = np.arange(1 << 18, dtype=np.float64)  # 2 MiB
    want = float(values.sum())
    refs = worker.put_big.call_one(1 << 18).get(timeout=60)  # owned there: lent to us when we get it
    namespaces.block_side_link()
    with caplog.at_level("WARNING", logger="meshrt"):
        assert float(meshrt.get(refs[0], timeout=60).sum()) == want
    _warned_once_of_cut(caplog, controller, "the head and host 'narrowed'")
    conn = next(iter(controller.hosts.values())).conn
    before = conn.bytes_in
    assert float(worker.echo.call_one(values).get(timeout=60).sum()) == want  # inline both ways now
    assert conn.bytes_in - before > values.nbytes


@pytest.mark.timeout(180)
def test_a_driver_value_lent_over_a_route_that_broke_reaches_its_host(namespaces, narrowed_worker, caplog):
    """The driver lends a large argument to a host whose route broke after its check:
    the host's agent cannot read it through the tensor engine, asks the head for the
    bytes inside a message instead, and the call runs with them."""
    controller, worker = narrowed_worker
    values = np.arange(1 << 18, dtype=np.float64)  # 2 MiB: stored here, pulled by the host's agent
    namespaces.block_side_link()
    with caplog.at_level("WARNING", logger="meshrt"):
        assert float(worker.echo.call_one(values).get(timeout=60).sum()) == float(values.sum())
    _warned_once_of_cut(caplog, controller, "host 'narrowed' and the head")


def _connecting_to(address: str) -> bool:
    """This process has a TCP connect to ``address`` that no answer has reached yet."""
    import psutil

    return any(c.status == psutil.CONN_SYN_SENT and c.raddr and c.raddr[0] == address
               for c in psutil.Process().net_connections(kind="tcp"))


@pytest.mark.timeout(180)
def test_a_connect_to_a_cut_off_host_holds_up_no_other_transfer(short_host_timeout, namespaces, ns_cluster,
                                                                failures):
    """UCX connects to a peer when it first reads from it. To a host cut off the network
    that connect gets no answer for minutes; it must not hold up this process's
    transfers with other hosts (UCX_TCP_CONN_NB, set by meshrt)."""
    torch = pytest.importorskip("torch")
    from .test_multihost import BufferOwner

    hosts, _, remember = ns_cluster
    procs = hosts.spawn_procs(per_host={"gpus": 1})
    owners = [procs.slice(hosts=h).spawn(f"owner{h}", BufferOwner, 1 << 20) for h in (0, 1)]
    remember()
    cut_off, reachable = (o.handle.call_one().get(timeout=60) for o in owners)  # no transfer yet: no connect
    namespaces.cut(0)
    try:
        stuck = cut_off.read_into(torch.empty(1 << 20), timeout=10)
        assert wait_until(lambda: _connecting_to(f"{SUBNET}.2"), 30), "no connect to the cut-off host"
        got = torch.empty(1 << 20)
        reachable.read_into(got).get(timeout=30)  # while that connect waits
        assert torch.equal(got, torch.arange(1 << 20, dtype=torch.float32))
        with pytest.raises((meshrt.exceptions.ObjectLostError, RuntimeError)):
            stuck.get(timeout=60)
    finally:
        namespaces.mend(0)


@meshrt.remote
class Hop:
    def forward(self, values):
        return [*values, os.readlink("/proc/self/ns/net")]


@pytest.mark.timeout(120)
def test_a_compiled_graph_goes_host_to_host_over_tcp(ns_cluster):
    from meshrt.dag import InputNode
    from meshrt.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    hosts, _, remember = ns_cluster
    others = [n["NodeID"] for n in meshrt.nodes() if n["NodeManagerAddress"] in (f"{SUBNET}.2", f"{SUBNET}.3")]
    assert len(others) == 2
    hops = [Hop.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote() for node in others]
    head_hop = Hop.remote()  # (the driver's host: a Unix socket to the driver, TCP to the others)
    with InputNode() as inp:
        dag = head_hop.forward.bind(hops[1].forward.bind(hops[0].forward.bind(inp)))
    compiled = dag.experimental_compile()
    remember()
    try:
        assert compiled.path == "channels"
        big = np.arange(1 << 17, dtype=np.float64)  # (a 1 MiB buffer beside the pickle, over TCP)
        out = meshrt.get(compiled.execute([big]), timeout=60)
        assert np.array_equal(out[0], big) and len(set(out[1:])) == 3  # three network namespaces
        assert [meshrt.get(compiled.execute([i]), timeout=60)[0] for i in range(5)] == list(range(5))
    finally:
        compiled.teardown()

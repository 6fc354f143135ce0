"""Several hosts on one machine: agents joined over TCP, each with its own store.

Each agent is a separate ``python -m meshrt agent`` process with its own zygote
and shared-memory store, so calls, arguments and results between the driver and
its processes really cross hosts (TCP, and the tensor engine's pulls) instead of
sharing memory.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading

import numpy as np
import psutil
import pytest

import meshrt
from meshrt import Actor, Channel, endpoint

from .helpers import wait_until

TOKEN = "5e" * 16


def _start_agent(address: str | None, name: str | None, token: str = TOKEN, **env) -> subprocess.Popen:
    env = dict(os.environ, MESHRT_TOKEN=token, **env)
    flags = (["--address", address] if address else []) + (["--name", name] if name else [])
    return subprocess.Popen(
        [sys.executable, "-m", "meshrt", "agent", *flags, "--object-store-memory", str(128 << 20)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop_agent(agent: subprocess.Popen) -> None:
    """Wait for an agent to leave (it does once the driver is gone); kill it if it does not."""
    try:
        agent.wait(timeout=30)
    except subprocess.TimeoutExpired:
        agent.kill()
        agent.wait()
    agent.stderr.close()


@contextlib.contextmanager
def head_with_one_agent(monkeypatch, runtime_env: dict | None = None, **agent_env):
    """A driver (1 CPU) listening on loopback TCP and one agent, "otherhost", joined:
    yields the check that notes what the agent started (gone once the cluster is down)."""
    monkeypatch.setenv("MESHRT_TOKEN", TOKEN)
    info = meshrt.init(address="127.0.0.1:0", num_cpus=1, runtime_env=runtime_env)
    agent = _start_agent(info["tcp_address"], "otherhost", **agent_env)
    meshrt.hosts(min_hosts=1, timeout=60)
    spawned = AgentProcesses([agent])
    yield spawned.remember
    spawned.remember()
    meshrt.shutdown()
    stop_agent(agent)
    spawned.assert_gone()


@pytest.fixture
def cluster(monkeypatch):
    """A driver listening on loopback TCP, and two agents acting as two hosts."""
    monkeypatch.setenv("MESHRT_TOKEN", TOKEN)
    info = meshrt.init(address="127.0.0.1:0", num_cpus=1)
    address = info["tcp_address"]
    agents = []
    for i in range(2):  # one after the other: host i of the mesh is agent i
        agents.append(_start_agent(address, f"host{i}"))
        hosts = meshrt.hosts(min_hosts=i + 1, timeout=60)
    spawned = AgentProcesses(agents)
    yield hosts, agents, address, spawned.remember
    spawned.remember()
    meshrt.shutdown()
    for agent in agents:
        stop_agent(agent)
    spawned.assert_gone()


class AgentProcesses:
    """What the agents started (their processes are not this test's children): noted
    while they run, so the test can check each one exited once the cluster is down."""

    def __init__(self, agents: list) -> None:
        self.agents = agents
        self.seen: set = set()

    def remember(self) -> None:
        for agent in self.agents:
            try:
                self.seen.update(p.pid for p in psutil.Process(agent.pid).children(recursive=True))
            except psutil.NoSuchProcess:
                pass

    def assert_gone(self) -> None:
        assert wait_until(lambda: not [p for p in self.seen if psutil.pid_exists(p)
                                       and psutil.Process(p).status() != psutil.STATUS_ZOMBIE], 15)


class Worker(Actor):
    @endpoint
    def where(self):
        return (int(os.environ.get("MESHRT_HOST_ID", "0")), os.getpid(), meshrt.context().actor_instance.rank.rank)

    @endpoint
    def echo(self, value):
        return value

    @endpoint
    def count(self, counter):
        counter.inc(tags={"host": os.environ.get("MESHRT_HOST_ID", "0")})

    @endpoint
    def abort(self, reason):
        meshrt.context().actor_instance.abort(reason)
        return "aborting"

    @endpoint
    def total(self, refs):
        return float(meshrt.get(refs[0]).sum())

    @endpoint
    def put_big(self, n):
        return [meshrt.put(np.arange(n, dtype=np.float64))]  # owned by this process

    @endpoint
    def sum_of(self, value):
        return float(value.sum())

    @endpoint
    def in_shared_memory(self, refs):
        """Is the fetched array a view of this host's store (not a private copy)?"""
        value = meshrt.get(refs[0])
        addr = value.__array_interface__["data"][0]
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                lo, hi = (int(h, 16) for h in parts[0].split("-"))
                if lo <= addr < hi:
                    return len(parts) > 5 and "meshrt-objects" in parts[5], float(value.sum())
        return False, float(value.sum())

    @endpoint
    def host_store_used(self):
        return meshrt._private.state.core().store_request_sync("store_summary")["usage"]["used"]

    @endpoint
    def call_other(self, mesh):
        return [w[0] for w in mesh.where.call().get(timeout=30).values()]

    @endpoint
    def ask(self, mesh, value):
        """Call a one-actor mesh with ``value``: where it ran, and what it got and gave back."""
        return (mesh.where.call_one().get(timeout=30)[1], mesh.sum_of.call_one(value).get(timeout=30),
                float(mesh.echo.call_one(value).get(timeout=30).sum()))


class Relayer(Actor):
    """Answers through its response port, handed to an actor on another host."""

    @endpoint(explicit_response_port=True)
    def via(self, port, other, send):
        (other.echo_to if send else other.drop).call_one(port).get(timeout=30)


class Far(Actor):
    @endpoint
    def echo_to(self, port):
        port.send(int(os.environ.get("MESHRT_HOST_ID", "0")))

    @endpoint
    def drop(self, port):
        pass

    @endpoint
    def host_id(self):
        return int(os.environ.get("MESHRT_HOST_ID", "0"))


def test_a_response_port_crosses_hosts_and_a_dropped_one_fails_its_call(cluster):
    hosts, _, _, remember = cluster
    near = hosts.slice(hosts=0).spawn_procs(per_host={"gpus": 1}).spawn("near", Relayer)
    far_procs = hosts.slice(hosts=1).spawn_procs(per_host={"gpus": 1})
    far = far_procs.spawn("far", Far)
    remember()
    assert near.via.call_one(far, True).get(timeout=30) not in (0, None)  # (answered from the far host)
    with pytest.raises(RuntimeError, match="every copy of it was dropped"):
        near.via.call_one(far, False).get(timeout=30)  # (it waited for ever)
    port, receiver = meshrt.Channel.open()
    meshrt.send(far.host_id, (), {}, port=port)  # (the far actor sends its result to the driver's port)
    assert receiver.recv().get(timeout=30) not in (0, None)


def test_spawn_across_hosts_and_slice_by_host(cluster):
    hosts, _, _, remember = cluster
    assert hosts.sizes == {"hosts": 2}
    procs = hosts.spawn_procs(per_host={"gpus": 2})
    assert procs.sizes == {"hosts": 2, "gpus": 2}
    workers = procs.spawn("w", Worker)
    where = list(workers.where.call().get(timeout=60).values())
    remember()
    host_ids = [w[0] for w in where]
    assert host_ids[0] == host_ids[1] != host_ids[2] == host_ids[3] and 0 not in host_ids
    assert [w[2] for w in where] == [0, 1, 2, 3]
    second = list(workers.slice(hosts=1).where.call().get(timeout=30).values())
    assert second == where[2:]
    # a mesh handed to an actor on one host, called from there across hosts
    assert workers.slice(hosts=0, gpus=0).call_other.call_one(workers.slice(hosts=1)).get(timeout=30) == \
        host_ids[2:]
    # and a mesh of the head host, called from an agent's host
    local = meshrt.this_host().spawn_procs(per_host={"gpus": 2}).spawn("local", Worker)
    assert workers.slice(hosts=1, gpus=1).call_other.call_one(local).get(timeout=30) == [0, 0]
    controller = meshrt._private.state.core().controller
    assert all(w.address.startswith("tcp:") for w in controller.workers.values() if w.address)
    procs.stop().get(timeout=30)
    # the same hosts take a new mesh after a stop
    again = hosts.spawn_procs(per_host={"gpus": 1}).spawn("again", Worker)
    assert [w[0] for w in again.where.call().get(timeout=60).values()] == host_ids[1:3]


def test_an_actor_in_the_driver_answers_other_hosts(cluster):
    hosts, _, _, remember = cluster
    in_driver = meshrt.this_proc().spawn("d", Worker)  # in this very process
    askers = hosts.spawn_procs(per_host={"gpus": 1}).spawn("a", Worker)
    big = np.arange(1 << 20, dtype=np.float64)  # 8 MiB each way, between hosts
    expected = (os.getpid(), float(big.sum()), float(big.sum()))
    assert list(askers.ask.call(in_driver, big).get(timeout=60).values()) == [expected, expected]
    remember()


def test_large_values_cross_hosts_bit_exact(pull_path, cluster):
    hosts, _, _, remember = cluster
    workers = hosts.spawn_procs(per_host={"gpus": 1}).spawn("w", Worker)
    remember()
    for dtype, n in ((np.float64, 1 << 20), (np.uint8, 3 << 20), (np.int32, 7)):
        value = np.arange(n).astype(dtype)
        replies = workers.echo.call(value).get(timeout=60)
        assert all(np.array_equal(v, value) and v.dtype == value.dtype for v in replies.values())
    blob = os.urandom(5 << 20)
    assert workers.slice(hosts=1).echo.call_one(blob).get(timeout=60) == blob
    # a driver-owned object, borrowed and fetched by a process on another host
    big = np.ones(1 << 20)
    ref = meshrt.put(big)
    assert list(workers.total.call([ref]).get(timeout=60).values()) == [float(1 << 20)] * 2


def test_large_call_arguments_are_pulled_by_each_host_not_sent(pull_path, cluster):
    """A mesh call with an 8 MiB tensor to 2 processes on each of 2 hosts: each
    agent pulls it once through the tensor engine; no frame carries the bytes."""
    torch = pytest.importorskip("torch")
    hosts, _, _, remember = cluster
    workers = hosts.spawn_procs(per_host={"gpus": 2}).spawn("w", Worker)
    workers.where.call().get(timeout=60)
    remember()
    conns = [h.conn for h in meshrt._private.state.core().controller.hosts.values()]
    before = [c.bytes_out for c in conns]
    t = torch.arange(1 << 21, dtype=torch.float32)  # 8 MiB
    assert list(workers.sum_of.call(t).get(timeout=60).values()) == [float(t.sum())] * 4
    sent = [c.bytes_out - b for c, b in zip(conns, before, strict=True)]
    if pull_path == "inline":
        assert all(n > t.nbytes for n in sent)
    else:
        assert all(n < 256 * 1024 for n in sent), sent


class BufferOwner(Actor):
    def __init__(self, n):
        import torch

        self.t = torch.arange(n, dtype=torch.float32)
        from meshrt.tensor import TensorBuffer

        self.buf = TensorBuffer(self.t)

    @endpoint
    def handle(self):
        return self.buf

    @endpoint
    def head(self, k):
        return self.t[:k].tolist()


class BufferPeer(Actor):
    @endpoint
    async def halve(self, buf):
        import torch

        dst = torch.empty(buf.numel, dtype=buf.dtype)
        await buf.read_into(dst)
        await buf.write_from(dst * 0.5)
        return float(dst.double().sum())  # exact: every value and the total are integers < 2**53


@pytest.fixture(params=["auto", "ucx"])
def buffer_path(request, monkeypatch):
    if request.param == "ucx":
        monkeypatch.setenv("MESHRT_TENSOR_TRANSPORT", "ucx")
    return request.param


def test_tensor_buffers_between_hosts(buffer_path, cluster):
    """An actor on one host reads and writes a tensor owned on the other, one-sided
    (same-machine path, or UCX over tcp with MESHRT_TENSOR_TRANSPORT=ucx)."""
    pytest.importorskip("torch")
    hosts, _, _, remember = cluster
    assert_a_buffer_crosses_hosts(hosts, remember)


def assert_a_buffer_crosses_hosts(hosts, remember) -> None:
    """An actor on host 1 reads and halves a tensor owned by an actor on host 0."""
    import torch

    procs = hosts.spawn_procs(per_host={"gpus": 1})
    owner = procs.slice(hosts=0).spawn("owner", BufferOwner, 1 << 22)
    peer = procs.slice(hosts=1).spawn("peer", BufferPeer)
    remember()
    buf = owner.handle.call_one().get(timeout=60)
    assert peer.halve.call_one(buf).get(timeout=60) == float(torch.arange(1 << 22, dtype=torch.float64).sum())
    assert owner.head.call_one(4).get(timeout=30) == [0.0, 0.5, 1.0, 1.5]


def test_large_results_from_other_hosts_are_pulled_not_sent(pull_path, cluster):
    """8 MiB results from a process on each host reach the driver's store by a pull
    through the tensor engine; the control connections carry only handles."""
    torch = pytest.importorskip("torch")
    hosts, _, _, remember = cluster
    workers = hosts.spawn_procs(per_host={"gpus": 1}).spawn("w", Worker)
    workers.where.call().get(timeout=60)
    remember()
    conns = [h.conn for h in meshrt._private.state.core().controller.hosts.values()]
    before = [c.bytes_in for c in conns]
    t = torch.arange(1 << 21, dtype=torch.float32)  # 8 MiB
    for _ in range(2):
        replies = workers.echo.call(t).get(timeout=60)
        assert all(torch.equal(v, t) for v in replies.values())
    received = [c.bytes_in - b for c, b in zip(conns, before, strict=True)]
    if pull_path == "inline":
        assert all(n > 2 * t.nbytes for n in received), received
    else:
        assert all(n < 256 * 1024 for n in received), received


def test_objects_owned_on_other_hosts_are_pulled_by_the_driver(pull_path, cluster):
    """The driver gets an 8 MiB array owned by a process on another host: the driver
    reads it through the tensor engine, the bytes stay off the control connection."""
    hosts, _, _, remember = cluster
    workers = hosts.spawn_procs(per_host={"gpus": 1}).spawn("w", Worker)
    remember()
    refs = [r[0] for r in workers.put_big.call(1 << 20).get(timeout=60).values()]
    conns = [h.conn for h in meshrt._private.state.core().controller.hosts.values()]
    before = [c.bytes_in for c in conns]
    for ref in refs:
        assert np.array_equal(meshrt.get(ref, timeout=60), np.arange(1 << 20, dtype=np.float64))
    received = [c.bytes_in - b for c, b in zip(conns, before, strict=True)]
    if pull_path == "inline":
        assert all(n > 8 << 20 for n in received), received
    else:
        assert all(n < 256 * 1024 for n in received), received


def test_killing_an_agent_fails_its_actors_and_the_rest_serves(cluster, failures):
    hosts, agents, _, remember = cluster
    workers = hosts.spawn_procs(per_host={"gpus": 1}).spawn("w", Worker)
    first = list(workers.where.call().get(timeout=60).values())
    remember()
    agents[0].kill()
    agents[0].wait(timeout=30)
    with pytest.raises(meshrt.exceptions.ActorDiedError, match="host agent 'host0'.*went away"):
        workers.slice(hosts=0).where.call_one().get(timeout=30)
    assert workers.slice(hosts=1).where.call_one().get(timeout=30) == first[1]
    seen, _ = failures
    assert all("host0" in f.report() for f in seen)  # nobody waited on those: supervision


class Stuck(Actor):
    @endpoint
    def hang(self, started):
        """Says it started, then never returns (until its process dies)."""
        started.send(os.getpid())
        threading.Event().wait()


def hang_on_host0(hosts):
    """A Stuck mesh over ``hosts``, and a call of it running (for good) on host 0."""
    stuck = hosts.spawn_procs(per_host={"gpus": 1}).spawn("stuck", Stuck)
    port, started = Channel.open()
    pending = stuck.slice(hosts=0).hang.call_one(port)
    started.recv().get(timeout=60)
    return stuck, pending


def assert_host1_serves(stuck) -> None:
    port, started = Channel.open()
    stuck.slice(hosts=1).hang.broadcast(port)
    assert started.recv().get(timeout=60) != 0


def kill_agent_mid_call(hosts, agents, remember, name: str) -> None:
    """Kill host 0's agent while a call runs there: the call fails naming the host,
    host 1 still serves."""
    stuck, pending = hang_on_host0(hosts)
    remember()
    agents[0].kill()
    agents[0].wait(timeout=30)
    with pytest.raises(meshrt.exceptions.ActorDiedError, match=f"host agent '{name}'.*went away"):
        pending.get(timeout=30)
    assert_host1_serves(stuck)


def test_killing_an_agent_mid_call_fails_the_call_and_the_rest_serves(cluster, failures):
    hosts, agents, _, remember = cluster
    kill_agent_mid_call(hosts, agents, remember, "host0")


def test_a_wrong_token_is_refused_and_the_head_keeps_serving(cluster):
    hosts, _, address, _ = cluster
    intruder = _start_agent(address, "intruder", token="00" * 16)
    try:
        code = intruder.wait(timeout=60)
        err = intruder.stderr.read()
    finally:
        intruder.stderr.close()
    assert code != 0 and "handshake" in err.lower()
    assert meshrt.hosts(min_hosts=2, timeout=5).sizes == {"hosts": 2}
    workers = hosts.spawn_procs(per_host={"gpus": 1}).spawn("w", Worker)
    assert len(list(workers.where.call().get(timeout=60).values())) == 2


def test_hosts_times_out_naming_the_command(rt):
    with pytest.raises(TimeoutError, match="meshrt agent --address"):
        meshrt.hosts(min_hosts=1, timeout=0.2)


def test_srun_style_agent_needs_no_flags(monkeypatch):
    """Under SLURM the head is the job's first node and the name is SLURMD_NODENAME."""
    monkeypatch.setenv("MESHRT_TOKEN", TOKEN)
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "1")
    info = meshrt.init(address="127.0.0.1:0", num_cpus=1)
    port = info["tcp_address"].rsplit(":", 1)[1]
    agent = _start_agent(None, None, SLURM_JOB_NODELIST="127.0.0.1,127.0.0.2", SLURMD_NODENAME="node7",
                         MESHRT_PORT=port, SLURM_JOB_NUM_NODES="1")
    try:
        hosts = meshrt.hosts(timeout=60)  # min_hosts from SLURM_JOB_NUM_NODES
        assert hosts.sizes == {"hosts": 1}
        mesh = hosts.spawn_procs(per_host={"gpus": 1}).spawn("w", Worker)
        assert mesh.where.call_one().get(timeout=60)[0] != 0
    finally:
        meshrt.shutdown()
        agent.wait(timeout=30)
        agent.stderr.close()


def test_slurm_nodelists_expand():
    from meshrt._private.slurm import expand_nodelist

    assert expand_nodelist("gpu[01-03,07],cpu5") == ["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"]
    assert expand_nodelist("a[8-10]-ib") == ["a8-ib", "a9-ib", "a10-ib"]
    assert expand_nodelist("node1") == ["node1"]


class Reducer(Actor):
    @endpoint
    def reduce(self):
        import torch
        import torch.distributed as dist

        t = torch.tensor([float(meshrt.current_rank().rank)])
        dist.all_reduce(t, group=meshrt.device_mesh().get_group("hosts"))
        return (int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), float(t.item()))


def test_torch_distributed_across_hosts(cluster):
    pytest.importorskip("torch")
    hosts, _, _, remember = cluster
    procs = hosts.spawn_procs(per_host={"gpus": 2})
    procs.init_torch_distributed(backend="gloo").get(timeout=120)
    remember()
    got = list(procs.spawn("r", Reducer).reduce.call().get(timeout=60).values())
    assert [g[:2] for g in got] == [(0, 0), (1, 1), (2, 0), (3, 1)]
    assert [g[2] for g in got] == [2.0, 4.0, 2.0, 4.0]  # along "hosts": {0,2} and {1,3}
    procs.stop().get(timeout=30)


def test_calls_fan_out_through_one_agent_per_host(cluster):
    """A call to 4 processes on each of 2 hosts: the driver sends one frame per host
    and gets the replies back gathered, not one frame per process."""
    hosts, _, _, remember = cluster
    workers = hosts.spawn_procs(per_host={"gpus": 4}).spawn("w", Worker)
    workers.where.call().get(timeout=60)
    remember()
    controller = meshrt._private.state.core().controller
    agent_conns = [h.conn for h in controller.hosts.values()]
    worker_conns = [w.conn for w in controller.workers.values() if w.host]

    def frames():
        return (sum(c.frames_out for c in agent_conns), sum(c.frames_in for c in agent_conns),
                sum(c.frames_out + c.frames_in for c in worker_conns))

    before = frames()
    calls = 20
    for _ in range(calls):
        assert len(list(workers.where.call().get(timeout=30).values())) == 8
    out, back, direct = (a - b for a, b in zip(frames(), before, strict=True))
    assert out <= calls * 2 + 4  # one frame per host per call (+ refcount traffic)
    assert back <= calls * 2 * 2  # replies gathered per host (a slow one may go alone)
    assert direct == 0  # nothing went to the 8 processes one by one


def test_meshrt_status_lists_hosts_actors_and_objects(cluster):
    hosts, _, address, remember = cluster
    workers = hosts.spawn_procs(per_host={"gpus": 1}).spawn("w", Worker)
    workers.where.call().get(timeout=60)
    remember()
    ref = meshrt.put(np.ones(1 << 18))  # 2 MiB in the head's store
    run = [sys.executable, "-m", "meshrt", "status", "--address", address]
    out = subprocess.run(run, capture_output=True, text=True, timeout=60, env=dict(os.environ, MESHRT_TOKEN=TOKEN))
    assert out.returncode == 0, out.stderr
    assert "hosts: 3" in out.stdout and "'host0' (agent)" in out.stdout and "'host1' (agent)" in out.stdout
    assert out.stdout.count("1 x ProcHost alive on host") == 2
    assert ref.hex() in out.stdout and "2.0 MiB" in out.stdout
    refused = subprocess.run(run, capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, MESHRT_TOKEN="00" * 16))
    assert refused.returncode == 1 and "cannot ask" in refused.stderr


@pytest.fixture(params=["engine", "engine-ucx", "inline"])
def pull_path(request, monkeypatch):
    """How a driver object crosses to an agent's host: pulled through the tensor engine
    (cross-memory attach on this one machine, or UCX over tcp), or inside the message."""
    if request.param == "engine-ucx":
        monkeypatch.setenv("MESHRT_TENSOR_TRANSPORT", "ucx")
    elif request.param == "inline":
        monkeypatch.setenv("MESHRT_PULL_ENGINE", "0")
    return request.param


def test_objects_are_pulled_once_per_host(pull_path, cluster):
    """Two processes of one host read the same driver object: its bytes cross to that
    host once (pulled by the agent, not on the control connection, unless inline),
    and both read it from the host's shared memory."""
    hosts, _, _, remember = cluster
    procs = hosts.slice(hosts=0).spawn_procs(per_host={"gpus": 2})
    workers = procs.spawn("w", Worker)
    workers.where.call().get(timeout=60)
    remember()
    big = np.arange(1 << 20, dtype=np.float64)  # 8 MiB
    ref = meshrt.put(big)
    host = next(iter(meshrt._private.state.core().controller.hosts.values()))
    start = host.conn.bytes_out
    assert workers.slice(gpus=0).in_shared_memory.call_one([ref]).get(timeout=60) == (True, float(big.sum()))
    first = host.conn.bytes_out - start
    assert workers.slice(gpus=1).in_shared_memory.call_one([ref]).get(timeout=60) == (True, float(big.sum()))
    second = host.conn.bytes_out - start - first
    if pull_path == "inline":
        assert first > big.nbytes
    else:
        assert first < 64 * 1024
    assert second < 64 * 1024
    one = workers.slice(gpus=0)
    assert one.host_store_used.call_one().get(timeout=30) >= big.nbytes
    del ref  # the owner frees it, and tells the host to drop its copy
    assert wait_until(lambda: one.host_store_used.call_one().get(timeout=30) == 0, timeout=15)


def test_an_actor_aborting_on_another_host_reaches_the_driver(cluster, failures):
    hosts, _, _, _ = cluster
    seen, event = failures
    procs = hosts.spawn_procs(per_host={"gpus": 1})
    mesh = procs.spawn("w", Worker)
    assert mesh.slice(hosts=1).abort.call_one("host 1 gave up").get(timeout=60) == "aborting"
    assert event.wait(30)
    assert seen[0].report() == "mesh 'w' at Point(hosts=1, gpus=0): it aborted (actor_instance.abort()): host 1 gave up"
    with pytest.raises(meshrt.exceptions.ActorDiedError, match="host 1 gave up"):
        mesh.slice(hosts=1).echo.call_one(1).get(timeout=30)
    assert mesh.slice(hosts=0).echo.call_one(2).get(timeout=30) == 2
    procs.stop().get(timeout=60)


def test_metrics_from_other_hosts_reach_the_driver(cluster):
    from meshrt.util.metrics import Counter, collect

    hosts, _, _, _ = cluster
    procs = hosts.spawn_procs(per_host={"gpus": 1})
    counter = Counter("mesh_calls", tag_keys=("host",))
    procs.spawn("w", Worker).count.call(counter).get(timeout=60)

    def series():
        return {dict(tags)["host"]: value for m in collect() if m["name"] == "mesh_calls"
                for tags, value in m["series"]}
    assert wait_until(lambda: len(series()) == 2, timeout=30)
    assert sorted(series().values()) == [1.0, 1.0]
    procs.stop().get(timeout=60)


def host_of(_item):
    return int(os.environ.get("MESHRT_HOST_ID", "0"))


def test_a_pool_spans_the_hosts(cluster):
    from meshrt.util.multiprocessing import Pool

    with Pool(4) as pool:  # (1 CPU on the head, the rest on the agents' hosts)
        hosts = set(pool.map(host_of, range(64), chunksize=1))
    assert len(hosts) >= 2, hosts


def test_host_mesh_stop_and_shutdown(cluster, failures):
    hosts, agents, _, remember = cluster
    mesh = hosts.spawn_procs(per_host={"gpus": 1}).spawn("w", Worker)
    assert len(list(mesh.where.call().get(timeout=60).values())) == 2
    remember()
    hosts.stop().get(timeout=60)  # the processes end; the hosts stay
    with pytest.raises(meshrt.exceptions.ActorDiedError, match="stopped with stop"):
        mesh.where.call().get(timeout=30)
    again = hosts.spawn_procs(per_host={"gpus": 1}).spawn("again", Worker)
    first, second = (w[0] for w in again.where.call().get(timeout=60).values())
    remember()
    with pytest.raises(ValueError, match="includes the head host"):
        meshrt.this_host().shutdown()
    hosts.slice(hosts=1).shutdown().get(timeout=60)  # its agent exits (and `again`, on it, is stopped first)
    assert agents[1].wait(timeout=30) is not None
    with pytest.raises(TimeoutError, match="only 1 host agent"):
        meshrt.hosts(min_hosts=2, timeout=0.5)
    left = hosts.slice(hosts=0).spawn_procs(per_host={"gpus": 1}).spawn("left", Worker)
    assert left.where.call_one().get(timeout=60)[0] == first != second  # the other host serves on
    seen, _ = failures
    assert seen == []  # a shutdown is no failure

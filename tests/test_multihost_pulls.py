"""Large values between processes on different hosts go through the tensor engine.

Whoever sends a large value to a process on another host (a call's arguments or
result, a fetched object, a stream item, a Port value) lends it as TensorBuffer
handles; the receiver pulls the bytes, so the connection between the two carries
only the handles. ``pull_path`` runs each test with the bytes pulled (cross-memory
attach on this machine, or UCX over tcp) and sent inline (``MESHRT_PULL_ENGINE=0``).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import meshrt
from meshrt import Actor, Channel, endpoint

from .helpers import wait_until
from .test_multihost import Worker, cluster, pull_path  # noqa: F401 - fixtures

N = 1 << 20  # float64s: 8 MiB
SMALL = 256 * 1024  # what the connection may carry when the bytes are pulled


def _peer_traffic() -> int:
    """Bytes in and out on this process's connections to other workers."""
    core = meshrt._private.state.core()
    return sum(c.conn.bytes_in + c.conn.bytes_out for c in core.channels.values() if c.conn is not None)


class Peer(Actor):
    @endpoint
    def traffic(self):
        return _peer_traffic()

    @endpoint
    def still_lent(self):
        """Values this process lent that nobody has finished pulling."""
        return len(meshrt._private.state.core().lent_out)

    @endpoint
    def echo(self, value):
        return value

    @endpoint
    def echo_through(self, other, n):
        """Call ``other`` (on another host) with a large array; it comes back."""
        value = np.arange(n, dtype=np.float64)
        before = _peer_traffic()
        back = other.echo.call_one(value).get(timeout=60)
        return bool(np.array_equal(back, value) and back.dtype == value.dtype), _peer_traffic() - before

    @endpoint
    def put_big(self, n):
        return [meshrt.put(np.arange(n, dtype=np.float64))]

    @endpoint
    def fetch(self, refs):
        before = _peer_traffic()
        value = meshrt.get(refs[0], timeout=60)
        return float(value.sum()), _peer_traffic() - before

    @endpoint
    def fetch_twice(self, refs):
        first, second = meshrt.get(refs[0], timeout=60), meshrt.get(refs[0], timeout=60)
        first += 1  # (a mesh process's values are its own: the other get's array does not change)
        return float(first[1]), float(second[1])

    @endpoint
    def open_port(self):
        self.port, self.receiver = Channel.open()
        return self.port

    @endpoint
    def send_through(self, port, n):
        port.send(np.arange(n, dtype=np.float64))

    @endpoint
    def receive(self):
        return float(self.receiver.recv().get(timeout=60).sum())

    @endpoint
    def stream_from(self, handle, n, k):
        """Ask a Ray-style actor on the head host for ``k`` large items, streamed."""
        before = _peer_traffic()
        gen = handle.chunks.options(num_returns="streaming").remote(np.arange(n, dtype=np.float64), k)
        sums = [float(meshrt.get(ref, timeout=60).sum()) for ref in gen]
        return sums, _peer_traffic() - before

    @endpoint
    def call_task(self, fn, n):
        return meshrt.get(fn.remote(np.arange(n, dtype=np.float64)), timeout=60)

    @endpoint
    def call_fragile(self, handle, n, marker):
        return meshrt.get(handle.total_once_dead.remote(np.arange(n, dtype=np.float64), marker), timeout=60)

    @endpoint
    def task_result(self, fn, n):
        return float(meshrt.get(fn.remote(n), timeout=60).sum())

    @endpoint
    def pass_refs(self, handles, fn, n):
        """A value stored on this host, passed as a ref to head-host actors and a task."""
        ref = meshrt.put(np.arange(n, dtype=np.float64))
        return meshrt.get([h.total.remote(ref) for h in handles] + [fn.remote(ref)], timeout=60)


@meshrt.remote
class Streamer:
    def chunks(self, value, k):
        for i in range(k):
            yield value * (i + 1)

    def total(self, value):
        return float(value.sum())


@meshrt.remote(max_restarts=1, max_task_retries=1)
class Fragile:
    def total_once_dead(self, value, marker):
        """Dies on the first attempt (after its arguments were pulled), then answers."""
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)
        return float(value.sum())


@meshrt.remote
class AsyncSummer:
    async def total(self, value):
        return float(value.sum())


@meshrt.remote
def total(value):
    return float(value.sum())


@meshrt.remote
def arange(n):
    return np.arange(n, dtype=np.float64)


def _check(path: str, moved: int, nbytes: int) -> None:
    if path == "inline":
        assert moved > nbytes, moved
    else:
        assert moved < SMALL, moved


@pytest.fixture
def peers(cluster):  # noqa: F811 - the fixture imported above
    hosts, _, _, remember = cluster
    procs = hosts.spawn_procs(per_host={"gpus": 1})
    mesh = procs.spawn("p", Peer)
    mesh.traffic.call().get(timeout=60)
    remember()
    return mesh.slice(hosts=0), mesh.slice(hosts=1)


def test_calls_between_hosts_pull_arguments_and_results(pull_path, peers):  # noqa: F811
    a, b = peers
    same, moved = a.echo_through.call_one(b, N).get(timeout=90)
    assert same
    _check(pull_path, moved, 2 * N * 8)
    # again, on the connection now open, and with a small value (never lent)
    assert a.echo_through.call_one(b, N).get(timeout=60)[0]
    same, moved = a.echo_through.call_one(b, 10).get(timeout=60)
    assert same and moved < SMALL
    # every handle goes once its bytes were read (results: PullDone; arguments: the call's end)
    assert wait_until(lambda: b.still_lent.call_one().get(timeout=30) == 0, 15)


def test_objects_fetched_between_hosts_are_pulled(pull_path, peers):  # noqa: F811
    a, b = peers
    refs = a.put_big.call_one(N).get(timeout=60)
    value, moved = b.fetch.call_one(refs).get(timeout=60)
    assert value == float(np.arange(N, dtype=np.float64).sum())
    _check(pull_path, moved, N * 8)
    assert b.fetch_twice.call_one(refs).get(timeout=60) == (2.0, 1.0)
    assert wait_until(lambda: a.still_lent.call_one().get(timeout=30) == 0, 15)


def test_objects_owned_on_another_host_are_pulled_once_per_host(pull_path, cluster):  # noqa: F811
    """Two processes of one host read an object a process on another host owns: its
    host's agent pulls it once into the host's store, both read that copy, and it goes
    when the owner frees the object."""
    hosts, _, _, remember = cluster
    owner = hosts.slice(hosts=0).spawn_procs(per_host={"gpus": 1}).spawn("owner", Worker)
    readers = hosts.slice(hosts=1).spawn_procs(per_host={"gpus": 2}).spawn("readers", Worker)
    head = meshrt.this_host().spawn_procs(per_host={"gpus": 2}).spawn("head", Worker)  # the driver's host
    readers.where.call().get(timeout=60)
    head.where.call().get(timeout=60)
    remember()
    head_store = meshrt._private.state.core().controller.store
    head_before = head_store.usage()["used"]
    refs = owner.put_big.call_one(N).get(timeout=60)
    base = float(np.arange(N, dtype=np.float64).sum())
    for mesh in (readers, head):
        for i in range(2):
            shared, value = mesh.slice(gpus=i).in_shared_memory.call_one(refs).get(timeout=60)
            assert value == base and shared == (pull_path != "inline")
    one = readers.slice(gpus=0)
    if pull_path != "inline":
        assert N * 8 <= one.host_store_used.call_one().get(timeout=30) < 2 * N * 8
        assert N * 8 <= head_store.usage()["used"] - head_before < 2 * N * 8
    del refs
    assert wait_until(lambda: one.host_store_used.call_one().get(timeout=30) == 0, 15)
    assert wait_until(lambda: head_store.usage()["used"] == head_before, 15)
    if pull_path == "inline":
        return
    # an owner that goes away without freeing: the copies of what it owned go too
    owner_procs = hosts.slice(hosts=0).spawn_procs(per_host={"gpus": 1})
    refs = owner_procs.spawn("owner2", Worker).put_big.call_one(N).get(timeout=60)
    remember()
    assert one.in_shared_memory.call_one(refs).get(timeout=60) == (True, base)
    assert one.host_store_used.call_one().get(timeout=30) >= N * 8
    owner_procs.stop().get(timeout=30)
    assert wait_until(lambda: one.host_store_used.call_one().get(timeout=30) == 0, 15)


def test_lent_arguments_outlive_a_retried_call(pull_path, peers, tmp_path):  # noqa: F811
    """A call from an agent's host to a head-host actor that dies after pulling its
    arguments is retried on the restarted actor, which pulls them again: the caller
    keeps lent arguments until the call is over."""
    _, b = peers
    marker = str(tmp_path / "died")
    total = b.call_fragile.call_one(Fragile.remote(), N, marker).get(timeout=90)
    assert os.path.exists(marker) and total == float(np.arange(N, dtype=np.float64).sum())


def test_port_values_between_hosts_are_pulled(pull_path, peers):  # noqa: F811
    a, b = peers
    port = a.open_port.call_one().get(timeout=60)
    before = a.traffic.call_one().get(timeout=30)
    b.send_through.call_one(port, N).get(timeout=60)
    assert a.receive.call_one().get(timeout=60) == float(np.arange(N, dtype=np.float64).sum())
    _check(pull_path, a.traffic.call_one().get(timeout=30) - before, N * 8)


def test_head_host_actors_and_tasks_called_from_another_host(pull_path, peers):  # noqa: F811
    """A Ray-style actor (on the head host) streams large items to a mesh actor on
    an agent's host, and takes a large argument from it; so does a task."""
    _, b = peers
    streamer = Streamer.remote()
    sums, moved = b.stream_from.call_one(streamer, N, 3).get(timeout=90)
    base = float(np.arange(N, dtype=np.float64).sum())
    assert sums == [base, 2 * base, 3 * base]
    _check(pull_path, moved, 4 * N * 8)
    assert b.call_task.call_one(total, N).get(timeout=90) == base
    assert b.task_result.call_one(arange, N).get(timeout=90) == base
    # top-level ref arguments: the value sits in the agent host's store, so the head
    # host's processes fetch it from its owner (and pull it) instead of mapping it
    handles = [streamer, AsyncSummer.remote()]
    assert b.pass_refs.call_one(handles, total, N).get(timeout=90) == [base, base, base]

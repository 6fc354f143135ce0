"""Compiled graphs on their own sockets (meshrt/dag/channel.py, stage.py, wiring.py):
results go actor to actor; failures, deaths and bad input end in errors, never hangs;
only a connector that knows the cluster token is read from."""
import asyncio
import os
import threading

import numpy as np
import pytest

import meshrt
from meshrt import exceptions as exc
from meshrt.dag import InputNode, MultiOutputNode, channel

pytestmark = pytest.mark.timeout(120)


@meshrt.remote
class Stage:
    def __init__(self, weight=1):
        self.weight = weight
        self.seen = []

    def forward(self, x):
        self.seen.append(threading.current_thread().name)
        return x * self.weight

    def boom(self, x):
        raise ValueError(f"bad {x}")

    def lock(self, x):
        return threading.Lock()  # (cannot be pickled)

    def threads(self):
        return self.seen


@meshrt.remote
class Holder:
    def __init__(self):
        self.gate = threading.Event()

    def hold(self, x):
        self.gate.wait(60)
        return x

    def release(self):
        self.gate.set()


@meshrt.remote
class AsyncStage:
    async def forward(self, x):
        await asyncio.sleep(0)
        return x + 1


def test_results_go_through_the_graphs_sockets(rt):
    first, second = Stage.remote(2), Stage.remote(10)
    with InputNode() as inp:
        dag = MultiOutputNode([second.forward.bind(first.forward.bind(inp[0])), first.forward.bind(inp.k)])
    compiled = dag.experimental_compile(_max_inflight_executions=20)
    try:
        assert compiled.path == "channels"
        refs = [compiled.execute(i, k=i) for i in range(20)]  # (many in flight, read in any order)
        assert [meshrt.get(r) for r in reversed(refs)] == [[20 * i, 2 * i] for i in reversed(range(20))]
        array = np.arange(1 << 18, dtype=np.float64)  # 2 MiB, beside the pickle
        assert np.array_equal(meshrt.get(compiled.execute(array, k=0))[0], array * 20)
        assert meshrt.get(second.forward.remote(1)) == 10  # (ordinary calls go on meanwhile)
        assert "meshrt-dag" in meshrt.get(first.threads.remote())[0]
    finally:
        compiled.teardown()


def test_errors_reach_the_caller_and_the_graph_goes_on(rt):
    stage, after = Stage.remote(), Stage.remote()
    with InputNode() as inp:
        dag = MultiOutputNode([after.forward.bind(stage.boom.bind(inp)), stage.lock.bind(inp), after.forward.bind(inp)])
    compiled = dag.experimental_compile()
    try:
        failed, unpicklable, fine = compiled.execute(3)
        with pytest.raises(ValueError, match="bad 3"):
            failed.get(timeout=60)  # (raised upstream, passed on)
        with pytest.raises(TypeError, match="Stage.lock returned a value that cannot be serialized"):
            unpicklable.get(timeout=60)
        assert fine.get(timeout=60) == 3
        with pytest.raises(TypeError, match="cannot be serialized"):
            compiled.execute(threading.Lock())  # (nothing sent: the next execution lines up)
        assert meshrt.get(compiled.execute(4)[2]) == 4
    finally:
        compiled.teardown()


def test_async_methods_run_on_the_actors_loop(rt):
    stage = AsyncStage.remote()
    with InputNode() as inp:
        dag = stage.forward.bind(stage.forward.bind(inp))
    compiled = dag.experimental_compile()
    try:
        assert compiled.path == "channels"
        assert meshrt.get(compiled.execute(1)) == 3
    finally:
        compiled.teardown()


def test_a_killed_actor_fails_the_execution_not_hangs(rt):
    first, second = Stage.remote(), Stage.remote()
    with InputNode() as inp:
        dag = second.forward.bind(first.forward.bind(inp))
    compiled = dag.experimental_compile()
    assert meshrt.get(compiled.execute(1)) == 1
    meshrt.kill(first)
    with pytest.raises(exc.ActorDiedError):
        meshrt.get(first.forward.remote(0), timeout=60)  # (dead now)
    with pytest.raises(exc.MeshrtError, match="died or was killed"):
        meshrt.get(compiled.execute(2), timeout=60)  # (refused at execute, or its result fails)
    compiled.teardown()


def test_graphs_that_cannot_be_wired_make_calls(rt):
    stage = Stage.remote()
    with InputNode() as inp:
        nested = stage.forward.bind([inp, inp])  # (a node inside an argument)
    compiled = nested.experimental_compile()
    try:
        assert compiled.path.startswith("calls")
        assert meshrt.get(compiled.execute(2)) == [2, 2]
    finally:
        compiled.teardown()


def test_shutdown_closes_a_graph_left_open():
    meshrt.init(num_cpus=1)
    stage = Stage.remote()
    with InputNode() as inp:
        compiled = stage.forward.bind(inp).experimental_compile()
    assert meshrt.get(compiled.execute(5)) == 5
    meshrt.shutdown()  # (the no_leaks fixture checks the sockets are gone)
    assert compiled._wiring._closed


def test_a_connector_without_the_token_is_not_read():
    graph = os.urandom(16)
    listener, address = channel.listen(graph)
    try:
        stranger = channel.connect(address, b"not the token", graph, 7)
        with pytest.raises(TimeoutError, match="did not connect"):
            channel.accept([listener], b"the token", graph, {7}, timeout=0.5)
        assert stranger.recv(1) == b""  # (closed on it, unread)
        stranger.close()
        friend = channel.connect(address, b"the token", graph, 7)
        got = channel.accept([listener], b"the token", graph, {7}, timeout=5)
        channel.send(friend, {"x": 1})
        assert channel.recv(got[7]) == {"x": 1}
        friend.close()
        got[7].close()
    finally:
        listener.close()


def test_an_actor_fed_by_nothing_makes_calls(rt):
    fed, unfed = Stage.remote(), Stage.remote(3)
    with InputNode() as inp:
        dag = MultiOutputNode([fed.forward.bind(inp), unfed.forward.bind(2)])
    compiled = dag.experimental_compile()
    try:
        assert compiled.path.startswith("calls")
        assert meshrt.get(compiled.execute(1)) == [1, 6]
    finally:
        compiled.teardown()


def test_compiling_over_a_dead_actor_says_so(rt):
    alive, dead = Stage.remote(), Stage.remote()
    meshrt.kill(dead)
    with pytest.raises(exc.ActorDiedError):
        meshrt.get(dead.forward.remote(0), timeout=60)
    with InputNode() as inp:
        dag = dead.forward.bind(alive.forward.bind(inp))
    with pytest.raises(exc.ActorDiedError):
        dag.experimental_compile()
    assert meshrt.get(alive.forward.remote(2)) == 2


def test_a_backed_up_graph_reads_its_results_rather_than_hang(rt):
    """Many large executions, none read, and an output never read: the driver keeps the
    results that come while it waits to send more (the stages would wait on it)."""
    first, second = Stage.remote(), Stage.remote()
    with InputNode() as inp:
        dag = MultiOutputNode([second.forward.bind(first.forward.bind(inp)), first.forward.bind(inp)])
    compiled = dag.experimental_compile(_max_inflight_executions=100)
    try:
        array = np.ones(1 << 18)  # 2 MiB: the sockets fill after a few
        refs = [compiled.execute(array * i) for i in range(60)]
        assert [meshrt.get(r[0])[0] for r in refs] == list(range(60))  # (output 1 is never read)
        assert [meshrt.get(r[1])[-1] for r in refs[-3:]] == [57, 58, 59]
    finally:
        compiled.teardown()


def test_rays_limits_on_executions_in_flight_and_results_kept(rt):
    stage = Stage.remote()
    with InputNode() as inp:
        dag = stage.forward.bind(inp)
    for compiled in (dag.experimental_compile(), MultiOutputNode([dag]).experimental_compile()):
        try:
            refs = [compiled.execute(i) for i in range(10)]  # (Ray's default: 10)
            with pytest.raises(exc.RayCgraphCapacityExceeded, match="_max_inflight_executions=10"):
                compiled.execute(10)
            meshrt.get(refs[4])  # (five came back: five more may go)
            refs += [compiled.execute(i) for i in range(10, 15)]
            with pytest.raises(exc.RayCgraphCapacityExceeded):
                compiled.execute(15)
        finally:
            compiled.teardown()
    compiled = dag.experimental_compile(_max_inflight_executions=50, _max_buffered_results=3)
    try:
        refs = [compiled.execute(i) for i in range(6)]
        with pytest.raises(exc.RayCgraphCapacityExceeded, match="_max_buffered_results=3"):
            meshrt.get(refs[5])  # (it would keep 0..4 unread)
        assert [meshrt.get(r) for r in refs] == list(range(6))  # (in order: nothing piles up; 5 read again)
    finally:
        compiled.teardown()
    with pytest.raises(ValueError, match="_max_inflight_executions=0"):
        dag.experimental_compile(_max_inflight_executions=0)


def test_teardown_wakes_a_get_waiting_in_another_thread(rt):
    holder = Holder.remote()
    with InputNode() as inp:
        dag = holder.hold.bind(inp)
    compiled = dag.experimental_compile()
    waiting = compiled.execute(1)  # (its result comes only once released)
    outcome = []
    started = threading.Event()

    def read():
        started.set()
        try:
            outcome.append(waiting.get(timeout=60))
        except Exception as err:  # noqa: BLE001
            outcome.append(err)

    reader = threading.Thread(target=read)
    reader.start()
    started.wait(10)
    compiled.teardown()
    reader.join(30)
    meshrt.get(holder.release.remote())
    assert not reader.is_alive() and len(outcome) == 1
    assert isinstance(outcome[0], (exc.RaySystemError, exc.ActorDiedError)), outcome


def test_visualize_shows_the_calls_and_their_edges(rt, tmp_path):
    first, second = Stage.remote(), Stage.remote()
    with InputNode() as inp:
        dag = MultiOutputNode([second.forward.bind(first.forward.bind(inp[0])), first.forward.bind(inp[1])])
    compiled = dag.experimental_compile()
    try:
        text = compiled.visualize(format="ascii")
        lines = text.splitlines()
        assert lines[0] == "0: input" and lines[-1].startswith(f"{len(lines) - 1}: output <- ")
        assert sum("Stage.forward (actor" in line for line in lines) == 3
        dot = compiled.visualize(filename=str(tmp_path / "graph"), format="dot", channel_details=True)
        assert (tmp_path / "graph.dot").read_text().strip() == dot
        edges = sum(len(line.split(" <- ")[1].split(", ")) for line in lines if " <- " in line)
        assert dot.startswith("digraph") and dot.count("->") == edges == 7
        assert '[label="channels"]' in dot
        with pytest.raises(ValueError, match="channel_details"):
            compiled.visualize(format="ascii", channel_details=True)
    finally:
        compiled.teardown()


def test_execute_gives_up_after_the_submit_timeout_when_the_graph_takes_nothing(rt):
    holder = Holder.remote()
    with InputNode() as inp:
        dag = holder.hold.bind(inp)
    compiled = dag.experimental_compile(_submit_timeout=0.5, _max_inflight_executions=100)
    try:
        big = np.ones(1 << 18)  # 2 MiB: the first is taken (and held), the next fill the socket
        with pytest.raises(exc.RayChannelTimeoutError, match="_submit_timeout=0.5"):
            for _ in range(50):
                compiled.execute(big)
        with pytest.raises(exc.RaySystemError):  # (gone out in part: the graph cannot go on; or still full)
            compiled.execute(big)
    finally:
        meshrt.get(holder.release.remote())
        compiled.teardown()
    with pytest.raises(ValueError, match="_submit_timeout"):
        dag.experimental_compile(_submit_timeout=0)

"""Remote functions: arguments, dependencies, returns, streaming, retries, options."""

from __future__ import annotations

import collections
import os
import re

import numpy as np
import pytest

import meshrt
from meshrt.exceptions import TaskError, WorkerCrashedError
from tests import helpers


@meshrt.remote
def add(a, b):
    return a + b


@meshrt.remote
def echo(x):
    return x


@meshrt.remote
def pid():
    return os.getpid()


def test_args_kwargs_and_defaults(rt):
    @meshrt.remote
    def f(a, b=2, *, c=3):
        return a + b + c

    assert meshrt.get(f.remote(1)) == 6
    assert meshrt.get(f.remote(1, 10, c=100)) == 111
    assert meshrt.get(add.remote(b=1, a=2)) == 3


def test_refs_as_arguments_are_resolved(rt):
    assert meshrt.get(add.remote(add.remote(1, 2), 3)) == 6
    ref = meshrt.put(40)
    assert meshrt.get(add.remote(ref, b=add.remote(1, 1))) == 42


def test_nested_refs_pass_through_as_refs(rt):
    @meshrt.remote
    def inspect(items):
        kinds = [type(x).__name__ for x in items["refs"]]
        return kinds, meshrt.get(items["refs"])

    refs = [meshrt.put(i) for i in range(3)]
    kinds, values = meshrt.get(inspect.remote({"refs": refs}))
    assert kinds == ["ObjectRef"] * 3
    assert values == [0, 1, 2]


def test_large_numpy_round_trip(rt):
    data = np.arange(1 << 20, dtype=np.float64)
    out = meshrt.get(echo.remote(data))
    assert isinstance(out, np.ndarray) and np.array_equal(out, data)


def test_pool_workers_are_reused(rt):
    pids = set(meshrt.get([pid.remote() for _ in range(20)]))
    assert 1 <= len(pids) <= 2


def test_tasks_submit_and_get_tasks_without_deadlock(rt):
    # Every worker waits on a child task: they lend their CPU back while blocked.
    @meshrt.remote
    def parent(depth):
        if depth == 0:
            return 1
        return sum(meshrt.get([parent.remote(depth - 1) for _ in range(2)]))

    assert meshrt.get(parent.remote(3), timeout=60) == 8


def test_num_returns(rt):
    @meshrt.remote(num_returns=3)
    def three():
        return 1, "two", [3]

    a, b, c = three.remote()
    assert meshrt.get([a, b, c]) == [1, "two", [3]]

    @meshrt.remote(num_returns=0)
    def nothing():
        return None

    assert nothing.remote() is None


def test_num_returns_mismatch_is_a_clear_error(rt):
    @meshrt.remote(num_returns=2)
    def one():
        return 1

    a, b = one.remote()
    with pytest.raises(ValueError, match="num_returns=2"):
        meshrt.get(a)


def test_streaming_generator_yields_in_order_while_running(rt):
    @meshrt.remote
    def gen(n):
        for i in range(n):
            yield i * i

    stream = gen.remote(5)
    assert isinstance(stream, meshrt.ObjectRefGenerator)
    assert [meshrt.get(ref) for ref in stream] == [0, 1, 4, 9, 16]


def test_streaming_first_item_arrives_before_generator_ends(rt):
    @meshrt.remote(num_returns="streaming")
    def gated(q):
        yield "first"
        meshrt.get(q.wait.remote())  # blocks until the driver has seen "first"
        yield "second"

    gate = helpers.gate()
    stream = gated.remote(gate)
    assert meshrt.get(next(stream)) == "first"
    assert not stream.next_ready()  # (Ray's: nothing to hand out at once, the generator waits)
    assert stream._next_sync(timeout_s=0.05).is_nil()  # (Ray's: a nil ref when none came in time)
    meshrt.get(gate.open.remote())
    assert meshrt.get(stream._next_sync(timeout_s=30)) == "second"
    with pytest.raises(StopIteration):
        next(stream)
    assert not stream.next_ready() and stream.is_finished()


def test_streaming_error_becomes_last_ref(rt):
    @meshrt.remote
    def gen():
        yield 1
        raise KeyError("boom")

    refs = list(gen.remote())
    assert meshrt.get(refs[0]) == 1
    with pytest.raises(KeyError, match="boom"):
        meshrt.get(refs[1])


async def test_streaming_async_iteration(rt):
    @meshrt.remote
    def gen(n):
        yield from range(n)

    seen = [await ref async for ref in gen.remote(4)]
    assert seen == [0, 1, 2, 3]


def test_max_retries_on_worker_death(rt, tmp_path, caplog):
    marker = tmp_path / "died-once"

    @meshrt.remote(max_retries=2)
    def flaky(path):
        if not os.path.exists(path):
            open(path, "w").close()
            os._exit(1)
        return "ok"

    assert meshrt.get(flaky.remote(str(marker)), timeout=60) == "ok"
    assert re.search(r"meshrt: the worker running .*flaky \(pid \d+\) died: .*exited with code 1; "
                     r"retrying it \(retry 1 of 2\)", caplog.text)  # (the driver is told, as Ray's is)


def test_worker_death_without_retries_raises(rt):
    @meshrt.remote(max_retries=0)
    def die():
        import sys

        print("about to exit", file=sys.stderr, flush=True)
        os._exit(3)

    with pytest.raises(WorkerCrashedError, match="exited with code 3") as info:
        meshrt.get(die.remote(), timeout=60)
    assert "about to exit" in str(info.value)


def test_retry_exceptions(rt, tmp_path):
    counter = tmp_path / "count"
    counter.write_text("0")

    @meshrt.remote(max_retries=3, retry_exceptions=[ConnectionError])
    def sometimes(path):
        n = int(open(path).read()) + 1
        open(path, "w").write(str(n))
        if n < 3:
            raise ConnectionError(f"try {n}")
        return n

    assert meshrt.get(sometimes.remote(str(counter))) == 3

    @meshrt.remote(max_retries=3, retry_exceptions=[ConnectionError])
    def wrong_kind():
        raise ValueError("not retried")

    with pytest.raises(ValueError, match="not retried"):
        meshrt.get(wrong_kind.remote())


def test_options_override(rt):
    @meshrt.remote(num_returns=1)
    def pair():
        return 1, 2

    a, b = pair.options(num_returns=2).remote()
    assert meshrt.get([a, b]) == [1, 2]
    assert meshrt.get(pair.remote()) == (1, 2)


def test_generator_function_defaults_to_streaming(rt):
    @meshrt.remote
    def gen():
        yield "x"

    assert isinstance(gen.remote(), meshrt.ObjectRefGenerator)


def test_closures_and_lambdas_travel_by_value(rt):
    scale = 7
    square = lambda x: x * x  # noqa: E731

    @meshrt.remote
    def f(x):
        return square(x) * scale

    assert meshrt.get(f.remote(3)) == 63


def test_error_in_dependency_propagates(rt):
    @meshrt.remote
    def fail():
        raise RuntimeError("upstream")

    with pytest.raises(RuntimeError, match="upstream"):
        meshrt.get(add.remote(fail.remote(), 1))


def test_task_error_is_instance_of_original(rt):
    @meshrt.remote
    def bad():
        raise ValueError("nope")

    with pytest.raises(ValueError) as info:
        meshrt.get(bad.remote())
    assert isinstance(info.value, TaskError)
    assert "nope" in str(info.value) and "bad" in info.value.traceback_str


# -- pipelining: many queued tasks go to busy workers in batches ---------------------------


def test_deep_queue_of_tasks_that_block_on_children(rt):
    # Parents queued behind a parent that blocks in get() are handed back, so the
    # children they wait for always find a CPU.
    @meshrt.remote
    def child(i):
        return i

    @meshrt.remote
    def parent(i):
        return meshrt.get(child.remote(i)) * 2

    assert meshrt.get([parent.remote(i) for i in range(60)], timeout=90) == [2 * i for i in range(60)]


def test_cancel_a_task_queued_behind_others(rt):
    # Every CPU is held by a task that blocks on a socket the test holds open (not in
    # meshrt.get(), which would hand its CPU back), so the quick tasks stay queued.
    import socket

    @meshrt.remote
    def hold(address):
        import socket

        try:
            with socket.create_connection(address) as conn:
                conn.recv(1)  # returns (or raises) when the test closes its listener
        except OSError:
            pass
        return "held"

    @meshrt.remote
    def quick(i):
        return i

    with socket.create_server(("127.0.0.1", 0)) as listener:
        holders = [hold.remote(listener.getsockname()) for _ in range(2)]  # (the 2 CPUs of rt)
        refs = [quick.remote(i) for i in range(40)]
        meshrt.cancel(refs[30])
        with pytest.raises(meshrt.exceptions.TaskCancelledError):
            meshrt.get(refs[30], timeout=60)
    assert meshrt.get(holders, timeout=60) == ["held", "held"]
    assert [meshrt.get(r, timeout=60) for i, r in enumerate(refs) if i != 30] == [i for i in range(40) if i != 30]


def test_worker_death_retries_tasks_queued_behind(rt, tmp_path):
    marker = tmp_path / "crashed"

    @meshrt.remote(max_retries=2)
    def maybe_crash(i, path):
        if i == 5 and not os.path.exists(path):
            open(path, "w").close()
            os._exit(1)
        return i

    assert meshrt.get([maybe_crash.remote(i, str(marker)) for i in range(50)], timeout=90) == list(range(50))


def test_many_zero_cpu_tasks(rt):
    import psutil

    @meshrt.remote(num_cpus=0)
    def light(i):
        return i

    assert meshrt.get([light.remote(i) for i in range(300)], timeout=60) == list(range(300))
    assert len(psutil.Process().children(recursive=True)) < 20


@meshrt.remote
def _leaf(i):
    return i


@meshrt.remote
def _mid(i):
    return meshrt.get(_leaf.remote(i))


def test_nested_gets_do_not_start_a_process_per_waiting_task(rt):
    # Each blocked _mid lends its CPU; its _leaf (one level deeper) runs on it before the
    # next queued _mid starts, so the pool stays small (it grew to one process per _mid).
    from meshrt._private import state

    controller = state.core().controller
    before = {w.id for w in controller.workers.values() if w.kind == "task"}
    assert meshrt.get([_mid.remote(i) for i in range(200)]) == list(range(200))
    started = [w for w in controller.workers.values() if w.kind == "task" and w.id not in before]
    assert len(started) < 40, f"{len(started)} task processes for 200 nested gets on 2 CPUs"


@meshrt.remote(max_calls=1)
def _pid_once(i):
    return os.getpid()


def test_max_calls_gives_each_worker_that_many_tasks_of_the_function(rt):
    # As in Ray (a fresh process per call frees what the task leaves behind, GPU memory say).
    pids = meshrt.get([_pid_once.remote(i) for i in range(5)])
    assert len(set(pids)) == 5
    twice = _pid_once.options(max_calls=2)
    pids = meshrt.get([twice.remote(i) for i in range(6)])
    assert max(collections.Counter(pids).values()) == 2 and len(set(pids)) >= 3  # (at most 2 each)
    with pytest.raises(ValueError, match="max_calls must be an int >= 0"):
        _pid_once.options(max_calls=-1)


@meshrt.remote(num_returns="streaming")
def _gated_numbers(g, n):
    for i in range(n):
        if i == 1:
            meshrt.get(g.wait.remote())
        yield i


def test_wait_takes_streaming_generators_as_in_ray(rt):
    g = helpers.gate()
    numbers = _gated_numbers.remote(g, 3)
    assert meshrt.wait([numbers], timeout=30) == ([numbers], [])  # (its first value is there)
    assert meshrt.get(next(numbers)) == 0
    assert meshrt.wait([numbers], timeout=0.2) == ([], [numbers])  # (the next waits on the gate)
    meshrt.get(g.open.remote())
    ready, _ = meshrt.wait([numbers, g.open.remote()], num_returns=2, timeout=30)
    assert numbers in ready and [meshrt.get(r) for r in numbers] == [1, 2]
    assert meshrt.wait([numbers], timeout=30) == ([numbers], [])  # (ended: ready)


def test_a_function_sent_by_value_that_calls_itself_keeps_its_defaults(rt):
    # (defined here, so it travels by value; it refers to itself, so it is rebuilt in the
    # worker before its defaults are filled in)
    @meshrt.remote(num_cpus=0)
    def countdown(n, step=1):
        return meshrt.get(countdown.remote(n - step), timeout=30) + 1 if n > 0 else 0

    assert meshrt.get(countdown.remote(2), timeout=30) == 2

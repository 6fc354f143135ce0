"""meshrt.util.multiprocessing.Pool: multiprocessing.Pool's calls and meanings on meshrt
actors (Ray's ray.util.multiprocessing), and what they do better: a dead worker fails its
work instead of hanging it, terminate() fails what was left, errors are named."""

from __future__ import annotations

import itertools
import os
import threading

import pytest

import meshrt
from meshrt.exceptions import ActorDiedError
from meshrt.util.multiprocessing import Pool, TimeoutError
from meshrt.util.multiprocessing.dispatch import PoolTerminated

from .helpers import gate

pytestmark = pytest.mark.timeout(120)


def square(x):
    return x * x


def add(a, b=0):
    return a + b


def fails_on_three(x):
    if x == 3:
        raise ValueError("three is not allowed")
    return x


def pid(_x=None):
    return os.getpid()


def set_greeting(word):
    global GREETING
    GREETING = word


def greet(name):
    return f"{GREETING}, {name}"


def refuse_to_start():
    raise RuntimeError("no GPU here")


def die(x):
    if x == "die":
        os._exit(3)
    return x


def wait_for(opened):
    return meshrt.get(opened.wait.remote())


def test_the_calls_of_multiprocessing_pool(rt):
    with Pool(2) as pool:
        assert pool.map(square, range(10)) == [x * x for x in range(10)]
        assert pool.map(square, []) == []
        assert pool.map(square, range(7), chunksize=3) == [x * x for x in range(7)]
        assert pool.starmap(add, [(1, 2), (3, 4)]) == [3, 7]
        assert list(pool.imap(square, range(6))) == [x * x for x in range(6)]
        assert list(pool.imap(square, range(6), chunksize=4)) == [x * x for x in range(6)]
        assert sorted(pool.imap_unordered(square, range(6))) == sorted(x * x for x in range(6))
        assert pool.apply(add, (2,), {"b": 5}) == 7
        assert pool.map(lambda x: x + 1, [1, 2]) == [2, 3]  # (closures go by value)
        done = threading.Event()
        got = []
        result = pool.map_async(square, range(50), callback=lambda values: (got.append(values), done.set()))
        assert result.get(30) == [x * x for x in range(50)]
        assert done.wait(30) and got == [[x * x for x in range(50)]]
        assert result.ready() and result.successful()
        async_one = pool.apply_async(square, (9,))
        async_one.wait(30)
        assert async_one.get() == 81
        assert pool.starmap_async(add, [(1, 1)]).get(30) == [2]


def test_work_spreads_over_the_processes_and_the_initializer_runs_in_each(rt):
    with Pool(2, initializer=set_greeting, initargs=("hello",)) as pool:
        assert pool.map(greet, ["a", "b"]) == ["hello, a", "hello, b"]
        assert len(set(pool.map(pid, range(40), chunksize=1))) == 2
    with pytest.raises(RuntimeError, match="no GPU here"):
        Pool(1, initializer=refuse_to_start)


def test_errors_raise_where_their_results_would_come(rt):
    with Pool(2) as pool:
        with pytest.raises(ValueError, match="three is not allowed"):
            pool.map(fails_on_three, range(6))
        seen = []
        it = pool.imap(fails_on_three, range(6))
        while True:
            try:
                seen.append(next(it))
            except StopIteration:
                break
            except ValueError:
                seen.append("error")
        assert seen == [0, 1, 2, "error", 4, 5]
        failed = threading.Event()
        errors = []
        result = pool.map_async(fails_on_three, range(6), chunksize=1,
                                error_callback=lambda err: (errors.append(err), failed.set()))
        assert failed.wait(30) and type(errors[0]) is ValueError  # (as multiprocessing's Pool gives it)
        assert "fails_on_three" in str(errors[0].__cause__)  # (a RemoteTraceback, as there)
        result.wait(30)
        assert result.ready() and not result.successful()


def test_tiny_calls_sent_together_keep_their_own_results_and_errors(rt):
    with Pool(2) as pool:
        pool.map(fails_on_three, [0, 1], chunksize=1)  # (the pool learns that these are tiny)
        results = [pool.apply_async(fails_on_three, (i % 5,)) for i in range(300)]
        for i, result in enumerate(results):
            if i % 5 == 3:
                with pytest.raises(ValueError, match="three"):
                    result.get(30)
            else:
                assert result.get(30) == i % 5
        assert sorted(pool.imap_unordered(square, range(500))) == sorted(x * x for x in range(500))


def test_a_worker_that_dies_fails_its_work_and_is_replaced(rt):
    with Pool(1) as pool:
        with pytest.raises(ActorDiedError):
            pool.apply(die, ("die",))
        assert pool.map(die, [1, 2, 3]) == [1, 2, 3]  # a new process serves on


def test_maxtasksperchild_replaces_processes(rt):
    with Pool(1, maxtasksperchild=2) as pool:
        pids = pool.map(pid, range(6), chunksize=1)
    assert len(set(pids)) == 3 and pids[0] == pids[1] != pids[2]


def test_timeouts_terminate_and_the_pools_life(rt):
    opened = gate()
    pool = Pool(2)
    blocked = pool.apply_async(wait_for, (opened,))
    with pytest.raises(TimeoutError):
        blocked.get(timeout=0.2)
    assert not blocked.ready()
    with pytest.raises(ValueError, match="not ready"):
        blocked.successful()
    with pytest.raises(ValueError, match="still running"):
        pool.join()
    pool.terminate()
    with pytest.raises(PoolTerminated):
        blocked.get(30)  # (never left waiting)
    pool.join(30)
    with pytest.raises(ValueError, match="terminated"):
        pool.map(square, [1])
    opened.open.remote()

    pool = Pool(2)
    results = pool.map_async(square, range(20), chunksize=1)
    pool.close()
    pool.join(60)  # the work given before close() finishes
    assert results.get(0) == [x * x for x in range(20)]
    with pytest.raises(ValueError, match="closed"):
        pool.apply(square, (1,))


def test_imap_reads_its_input_as_processes_free_up(rt):
    with Pool(2) as pool:
        first = list(itertools.islice(pool.imap(square, itertools.count()), 5))
    assert first == [0, 1, 4, 9, 16]


def test_an_input_that_raises_fails_at_its_place(rt):
    def numbers():
        yield from range(3)
        raise OSError("the input file went away")

    with Pool(2) as pool:
        it = pool.imap(square, numbers())
        assert [next(it) for _ in range(3)] == [0, 1, 4]
        with pytest.raises(OSError, match="went away"):
            next(it)
        with pytest.raises(StopIteration):
            next(it)


def test_bad_arguments_are_named(rt):
    with pytest.raises(ValueError, match="ray_remote_args"):
        Pool(16)  # (2 CPUs here)
    with pytest.raises(ValueError, match="processes"):
        Pool(0)
    with pytest.raises(ValueError, match="meshrt start --head"):
        Pool(1, ray_address="10.0.0.1:6379")
    with Pool(4, ray_remote_args={"num_cpus": 0.5}) as pool:
        assert pool.map(square, [3]) == [9]
        with pytest.raises(TypeError, match="callable"):
            pool.map(42, [1])
        with pytest.raises(ValueError, match="chunksize"):
            pool.map(square, [1], chunksize=0)
        with pytest.raises(TypeError, match="not iterable"):
            pool.imap(square, 5)
        with pytest.raises(TypeError, match="tuple"):
            pool.apply_async(square, 5)


def test_a_pool_starts_the_runtime_when_it_is_not_running():
    try:
        with Pool(2) as pool:
            assert pool.map(square, [2]) == [4]
        assert meshrt.cluster_resources()["CPU"] == 2
    finally:
        meshrt.shutdown()


def test_a_pool_outliving_the_runtime_fails_its_work_and_starts_nothing():
    import gc

    meshrt.init(num_cpus=2)
    pool = Pool(2)
    opened = gate()
    blocked = pool.apply_async(wait_for, (opened,))
    meshrt.shutdown()
    with pytest.raises((PoolTerminated, ActorDiedError)):
        blocked.get(30)
    del pool
    gc.collect()
    assert not meshrt.is_initialized()

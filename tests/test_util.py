"""ActorPool and Queue, Ray's helpers, on real actors."""

from __future__ import annotations

import pytest

import meshrt
from meshrt.util import ActorPool
from meshrt.util.queue import Empty, Full, Queue


@meshrt.remote
class Doubler:
    def double(self, x):
        return 2 * x


def test_actor_pool_map_keeps_order(rt):
    pool = ActorPool([Doubler.remote() for _ in range(3)])
    assert list(pool.map(lambda a, v: a.double.remote(v), range(10))) == [2 * v for v in range(10)]
    assert sorted(pool.map_unordered(lambda a, v: a.double.remote(v), range(6))) == [0, 2, 4, 6, 8, 10]


def test_actor_pool_submit_get_next_and_idle(rt):
    actors = [Doubler.remote() for _ in range(2)]
    pool = ActorPool(actors)
    for v in range(4):
        pool.submit(lambda a, v: a.double.remote(v), v)
    assert [pool.get_next() for _ in range(4)] == [0, 2, 4, 6]
    assert not pool.has_next()
    idle = pool.pop_idle()
    assert idle in actors
    pool.push(idle)
    with pytest.raises(ValueError):
        pool.push(idle)
    with pytest.raises(StopIteration):
        pool.get_next()


def test_queue_between_tasks(rt):
    q = Queue(maxsize=10)

    @meshrt.remote
    def produce(queue, n):
        for i in range(n):
            queue.put(i)
        return n

    @meshrt.remote
    def consume(queue, n):
        return [queue.get(timeout=30) for _ in range(n)]

    items = consume.remote(q, 20)
    assert meshrt.get(produce.remote(q, 20)) == 20
    assert meshrt.get(items, timeout=60) == list(range(20))
    assert q.empty() and q.qsize() == 0


def test_queue_nonblocking_and_batches(rt):
    q = Queue(maxsize=2)
    q.put_nowait("a")
    q.put("b")
    assert q.full() and len(q) == 2
    with pytest.raises(Full):
        q.put_nowait("c")
    with pytest.raises(Full):
        q.put("c", timeout=0.05)
    assert q.get_nowait_batch(2) == ["a", "b"]
    with pytest.raises(Empty):
        q.get(block=False)
    unbounded = Queue(maxsize=-1)  # (0 or less: no limit, as in Ray and queue.Queue)
    unbounded.put_nowait_batch(list(range(50)))
    assert len(unbounded) == 50 and not unbounded.full()
    with pytest.raises(Empty):
        q.get(timeout=0.05)
    q.put_nowait_batch([1, 2])
    with pytest.raises(Full):
        q.put_nowait_batch([3])
    q.shutdown()


async def test_queue_async_api(rt):
    q = Queue()
    await q.put_async(5)
    assert await q.get_async() == 5
    with pytest.raises(Empty):
        await q.get_async(block=False)


def test_list_named_actors(rt):
    from meshrt.util import list_named_actors

    kept = [Doubler.options(name="alpha").remote(),  # noqa: F841 - (a name alone does not keep them)
            Doubler.options(name="beta", namespace="other").remote()]
    assert list_named_actors() == ["alpha"]
    assert {"name": "beta", "namespace": "other"} in list_named_actors(all_namespaces=True)


def test_get_node_ip_address_is_this_hosts_address_everywhere(rt):
    import socket

    @meshrt.remote
    def where():
        return meshrt.util.get_node_ip_address()

    here = meshrt.util.get_node_ip_address()
    socket.inet_aton(here)  # an IPv4 address
    assert meshrt.get(where.remote(), timeout=30) == here


class _Handle:
    """Stands for a value pickle refuses (a C library's handle)."""

    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        raise TypeError("a _Handle cannot be pickled")


class _SubHandle(_Handle):
    pass


@meshrt.remote
def _name_of(value):
    return (type(value).__name__, value.name)


def test_register_serializer_checks_and_applies_to_exactly_its_class(rt):
    from meshrt.util import deregister_serializer, register_serializer

    with pytest.raises(TypeError, match="class whose values"):
        register_serializer(_Handle(1), serializer=str, deserializer=str)
    with pytest.raises(ValueError, match="built-in int"):
        register_serializer(int, serializer=str, deserializer=int)
    with pytest.raises(TypeError, match=r"deserializer=\.\.\.\): give a function"):
        register_serializer(_Handle, serializer=str, deserializer=3)
    register_serializer(_Handle, serializer=lambda h: h.name.upper(), deserializer=lambda s: _Handle(s))
    try:  # (lambdas travel by value: the worker registered nothing)
        assert meshrt.get(_name_of.remote(_Handle("db"))) == ("_Handle", "DB")
        with pytest.raises(TypeError, match="cannot be pickled"):
            _name_of.remote(_SubHandle("x"))  # (a subclass is not covered, as in Ray)
    finally:
        deregister_serializer(_Handle)
    with pytest.raises(TypeError, match="cannot be pickled"):
        _name_of.remote(_Handle("db"))

"""A tour of meshrt: tasks, refs, actors, async, streaming, errors, and Ray-style helpers.

Run it with ``python examples/quickstart.py``; every step prints what it does.
"""

from __future__ import annotations

import asyncio
import os
import time

import numpy as np

import meshrt
from meshrt.dag import InputNode
from meshrt.exceptions import ActorUnavailableError
from meshrt.util import ActorPool
from meshrt.util.multiprocessing import Pool
from meshrt.util.state import list_actors


def square(x):
    return x * x


def step(title: str) -> None:
    print(f"\n== {title}")


@meshrt.remote
def add(a, b):
    return a + b


@meshrt.remote(num_cpus=1, max_restarts=2)
class Counter:
    def __init__(self, start=0):
        self.n = start

    def incr(self, k=1):
        self.n += k
        return self.n

    async def later(self):
        await asyncio.sleep(0.01)
        return self.n

    def pid(self):
        return os.getpid()

    def crash(self):
        os._exit(1)


@meshrt.remote
def squares(n):
    for i in range(n):
        yield i * i


@meshrt.remote
def parse(text):
    return int(text)


@meshrt.remote
class Resizer:
    def resize(self, size):
        return size // 2


def main() -> None:
    step("start the runtime (controller in this process, workers forked from a zygote)")
    t0 = time.perf_counter()
    meshrt.init(num_cpus=4)  # logical CPUs to hand out; two actors below reserve one each
    print(f"CPUs: {meshrt.cluster_resources()['CPU']}")

    step("tasks: f.remote() returns an ObjectRef at once; get() waits for the value")
    ref = add.remote(1, 2)
    print(f"add.remote(1, 2) -> {ref}; get -> {meshrt.get(ref)} "
          f"(first result {time.perf_counter() - t0:.3f} s after init started)")
    print(f"refs as arguments resolve first: add(add(1, 2), 3) = {meshrt.get(add.remote(ref, 3))}")

    step("actors: state lives in one worker process; calls run in the order you made them")
    counter = Counter.remote(10)
    print(f"incr -> {meshrt.get(counter.incr.remote())}, "
          f"100 more calls -> last = {meshrt.get([counter.incr.remote() for _ in range(100)])[-1]}")

    step("async: await refs from your own event loop")

    async def from_asyncio():
        total = await add.remote(20, 22)
        values = await asyncio.gather(*(counter.incr.remote() for _ in range(5)))
        return total, values, await counter.later.remote()

    print("await results:", asyncio.run(from_asyncio()))

    step("put: store a value once, hand the ref to many tasks")
    big = np.arange(1_000_000, dtype=np.float64)
    big_ref = meshrt.put(big)
    view = meshrt.get(big_ref)
    print(f"array of {big.nbytes >> 20} MiB, read back read-only={not view.flags.writeable}, "
          f"sum={view.sum():.0f}")

    step("streaming: a generator's values arrive as refs while it still runs")
    print("squares:", [meshrt.get(r) for r in squares.remote(6)])

    step("errors keep their type, with the remote traceback")
    try:
        meshrt.get(parse.remote("not a number"))
    except ValueError as err:  # a remote ValueError is still a ValueError
        print("caught:", str(err).splitlines()[0])

    step("fault tolerance: an actor with max_restarts comes back after a crash")
    before = meshrt.get(counter.pid.remote())
    try:
        meshrt.get(counter.crash.remote())
    except ActorUnavailableError as err:  # (Ray's error for a call lost while its actor restarts)
        print("the call that crashed it:", str(err).splitlines()[0])
    print(f"restarted in a new process ({before} -> {meshrt.get(counter.pid.remote())}), "
          f"state rebuilt by __init__: n = {meshrt.get(counter.incr.remote(0))}")

    step("named actors and Ray-style helpers")
    hits = Counter.options(name="hits").remote(0)  # noqa: F841 - (a name alone does not keep it, as in Ray)
    print("get_actor('hits').incr ->", meshrt.get(meshrt.get_actor("hits").incr.remote()))
    pool = ActorPool([Resizer.remote() for _ in range(2)])
    print("ActorPool.map:", list(pool.map(lambda a, v: a.resize.remote(v), [64, 128, 256])))
    ready, not_ready = meshrt.wait([add.remote(i, i) for i in range(4)], num_returns=2, timeout=10)
    print(f"wait: {len(ready)} ready, {len(not_ready)} not yet")

    step("multiprocessing.Pool's calls, on meshrt's processes (and state of what runs)")
    with Pool(2) as mp_pool:
        print("Pool.map:", mp_pool.map(square, range(8)))
        print("imap_unordered, summed:", sum(mp_pool.imap_unordered(square, range(100))))
    alive = list_actors(filters=[("state", "=", "ALIVE")])
    print("alive actors:", sorted({a.class_name for a in alive}))

    step("a call graph (Ray's DAG API), compiled: results go actor to actor")
    first, second = Resizer.remote(), Resizer.remote()
    with InputNode() as size:
        graph = second.resize.bind(first.resize.bind(size))
    compiled = graph.experimental_compile()
    print("resize twice, 3 executions:", [meshrt.get(ref) for ref in [compiled.execute(n) for n in (8, 16, 32)]],
          f"({compiled.path})")
    compiled.teardown()

    step("shutdown: every worker exits with the driver")
    meshrt.shutdown()
    print(f"done in {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()

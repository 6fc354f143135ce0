"""Actor lifecycle: singletons, killing, self-termination, identity, threads.

* A global event counter created with ``get_if_exists=True`` (and
  ``lifetime="detached"``) from many tasks at once: all of them end up
  talking to the same single actor.
* ``ray.kill`` of a wedged actor: the stuck call and every later call fail
  with ``RayActorError`` / ``ActorDiedError``.
* Graceful shutdown: a worker that calls ``ray.actor.exit_actor()`` after
  flushing, and ``__ray_terminate__`` letting already-queued calls finish; the
  ``__ray_shutdown__``, ``atexit`` and ``__del__`` hooks of actors that end gracefully (not killed);
  a named actor ends with its last handle; a threaded or async actor ends gracefully only
  once the calls it is running have finished.
* ``ray.get_runtime_context()`` inside the driver, tasks and actors.
* A threaded actor (``max_concurrency``) serving blocking I/O-style calls
  concurrently, with a lock around its shared state.
* An actor class's static and class methods called on the class; subclassing one refused.
"""
import asyncio
import atexit
import threading
import time

import pytest

import meshrt as ray
from meshrt.exceptions import ActorDiedError, RayActorError

pytestmark = pytest.mark.timeout(120)


@ray.remote
class GlobalCounter:
    def __init__(self):
        self.value = 0

    def incr(self, n=1):
        self.value += n
        return self.value

    def actor_id(self):
        return ray.get_runtime_context().get_actor_id()


@ray.remote
def record_event(n):
    # Detached: a non-detached actor would be owned by (and die with) whichever
    # task happened to create it.
    counter = GlobalCounter.options(
        name="events", get_if_exists=True, lifetime="detached").remote()
    ray.get(counter.incr.remote(n))
    return ray.get(counter.actor_id.remote())


def test_get_if_exists_singleton_from_many_tasks():
    ray.init(num_cpus=4, namespace="metrics")
    actor_ids = ray.get([record_event.remote(i) for i in range(1, 11)])
    assert len(set(actor_ids)) == 1

    counter = ray.get_actor("events")
    assert ray.get(counter.incr.remote(0)) == sum(range(1, 11))
    same = GlobalCounter.options(name="events", get_if_exists=True).remote()
    assert ray.get(same.actor_id.remote()) == actor_ids[0]
    with pytest.raises(ValueError):
        GlobalCounter.options(name="events").remote()  # name already taken


@ray.remote
class Downloader:
    def __init__(self):
        self.never = threading.Event()

    def ping(self):
        return "pong"

    def download_forever(self):
        self.never.wait()  # wedged on a connection that never answers


def test_kill_wedged_actor():
    ray.init(num_cpus=4)
    dl = Downloader.remote()
    assert ray.get(dl.ping.remote()) == "pong"
    stuck = dl.download_forever.remote()
    ready, _ = ray.wait([stuck], timeout=0.3)
    assert ready == []

    ray.kill(dl)
    with pytest.raises(RayActorError):
        ray.get(stuck, timeout=60)
    with pytest.raises(ActorDiedError):
        ray.get(dl.ping.remote(), timeout=60)
    # Other actors of the same class are unaffected.
    assert ray.get(Downloader.remote().ping.remote()) == "pong"


@ray.remote
class BufferedWriter:
    def __init__(self, sink):
        self.sink = sink
        self.buffer = []

    def write(self, line):
        self.buffer.append(line)
        return len(self.buffer)

    def close(self):
        ray.get(self.sink.extend.remote(self.buffer))
        ray.actor.exit_actor()


@ray.remote
class ListSink:
    def __init__(self):
        self.items = []

    def extend(self, items):
        self.items.extend(items)

    def get(self):
        return list(self.items)


def test_exit_actor_and_ray_terminate():
    ray.init(num_cpus=4)
    sink = ListSink.remote()
    writer = BufferedWriter.remote(sink)
    assert ray.get([writer.write.remote(f"line {i}") for i in range(3)]) == [1, 2, 3]
    with pytest.raises(RayActorError):
        ray.get(writer.close.remote())  # the actor exited while running close()
    assert ray.get(sink.get.remote()) == ["line 0", "line 1", "line 2"]
    with pytest.raises(RayActorError):
        ray.get(writer.write.remote("too late"))

    # __ray_terminate__ is queued behind calls already submitted.
    writer2 = BufferedWriter.remote(sink)
    queued = [writer2.write.remote(f"x{i}") for i in range(5)]
    terminated = writer2.__ray_terminate__.remote()
    assert ray.get(queued) == [1, 2, 3, 4, 5]
    with pytest.raises(RayActorError):
        ray.get(terminated, timeout=60)  # (its ref says the actor is gone)
    with pytest.raises(RayActorError):
        ray.get(writer2.write.remote("after terminate"), timeout=60)


@ray.remote
class CleansUp:
    """Writes which of its cleanup hooks ran into a file of the test's."""

    def __init__(self, path, tag):
        self.path, self.tag = path, tag
        atexit.register(self.mark, "atexit")

    def mark(self, hook):
        with open(self.path, "a") as f:
            f.write(f"{hook}:{self.tag}\n")

    def __ray_shutdown__(self):
        self.mark("ray_shutdown")

    def __del__(self):  # (last: Ray lets go of the instance as the actor ends)
        self.mark("del")

    def ping(self):
        return self.tag

    def quit(self):
        ray.actor.exit_actor()


def _marks(path, expected: int, timeout: float = 60) -> list:
    """The marks in ``path`` once there are ``expected`` of them (polled: they come from
    processes as they end, with nothing else to wait on)."""
    deadline = time.monotonic() + timeout
    while True:
        marks = path.read_text().split() if path.exists() else []
        if len(marks) >= expected or time.monotonic() > deadline:
            return sorted(marks)
        threading.Event().wait(0.05)


def test_cleanup_hooks_run_when_an_actor_ends_gracefully(tmp_path):
    ray.init(num_cpus=2)
    path = tmp_path / "marks.txt"
    dropped, terminated, quitting, killed = (CleansUp.remote(str(path), tag)
                                             for tag in ("dropped", "terminated", "quit", "killed"))
    assert ray.get([a.ping.remote() for a in (dropped, terminated, quitting, killed)]) == [
        "dropped", "terminated", "quit", "killed"]
    del dropped
    terminated.__ray_terminate__.remote()
    with pytest.raises(RayActorError):
        ray.get(quitting.quit.remote())
    ray.kill(killed)  # (no hooks: as a crash)
    assert _marks(path, 9) == sorted(f"{hook}:{tag}" for hook in ("ray_shutdown", "atexit", "del")
                                     for tag in ("dropped", "terminated", "quit"))


def test_a_named_actor_ends_with_its_last_handle(tmp_path):
    ray.init(num_cpus=2)
    path = tmp_path / "marks.txt"
    named = CleansUp.options(name="scratch").remote(str(path), "named")
    by_name = ray.get_actor("scratch")
    assert ray.get(by_name.ping.remote()) == "named"
    del named  # (what get_actor() gives does not count: a name alone does not keep it, as in Ray)
    assert _marks(path, 3) == ["atexit:named", "del:named", "ray_shutdown:named"]
    with pytest.raises(RayActorError):  # (a handle from get_actor() fails as it is used)
        ray.get(by_name.ping.remote(), timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # (its name is freed as the process is seen gone)
        try:
            ray.get_actor("scratch")
        except ValueError:
            break
        threading.Event().wait(0.05)
    again = CleansUp.options(name="scratch").remote(str(path), "again")
    assert ray.get(again.ping.remote()) == "again"


@ray.remote
class Gate:
    """Holds callers until opened, and tells how many are held (so a test waits for them)."""

    def __init__(self):
        self.opened = asyncio.Event()
        self.held = asyncio.Condition()
        self.count = 0

    async def wait(self):
        async with self.held:
            self.count += 1
            self.held.notify_all()
        await self.opened.wait()

    async def holding(self, n):
        async with self.held:
            await self.held.wait_for(lambda: self.count >= n)

    def open(self):
        self.opened.set()


class _Job:
    def __init__(self, gate, path):
        self.gate, self.path = gate, path

    def mark(self, text):
        with open(self.path, "a") as f:
            f.write(text + "\n")

    def __ray_shutdown__(self):
        self.mark("shutdown")

    def ping(self):
        return "pong"


class _ThreadedWork(_Job):
    def work(self, i):
        ray.get(self.gate.wait.remote())
        self.mark(f"done:{i}")
        return i * 10


ThreadedJob = ray.remote(max_concurrency=4)(_ThreadedWork)
ThreadedWithGroups = ray.remote(concurrency_groups={"io": 2})(_ThreadedWork)  # (its default group: one thread)


@ray.remote(max_concurrency=4)
class AsyncJob(_Job):
    async def work(self, i):
        await self.gate.wait.remote()
        self.mark(f"done:{i}")
        return i * 10


@pytest.mark.parametrize("job_class, options", [
    (ThreadedJob, {}),
    (AsyncJob, {"max_concurrency": 1}),
    (ThreadedWithGroups, {}),
], ids=["threaded", "async_one_slot", "threaded_groups"])
def test_calls_after_an_end_fail_and_a_second_end_changes_nothing(job_class, options, tmp_path):
    ray.init(num_cpus=2)
    path = tmp_path / "marks.txt"
    gate = Gate.remote()
    job = job_class.options(**options).remote(gate, str(path))
    running = job.work.remote(0)
    ray.get(gate.holding.remote(1))
    ends = [job.__ray_terminate__.remote(), job.__ray_terminate__.remote()]
    # (sent after the end, with no free slot: it fails, as the actor is gone; where a thread
    # is free, Ray may run it before the end takes hold)
    after = [job.ping.remote()] if job_class is not ThreadedJob else []
    gate.open.remote()
    assert ray.get(running, timeout=60) == 0
    for ref in (*ends, *after):
        with pytest.raises(RayActorError):
            ray.get(ref, timeout=60)
    assert _marks(path, 2) == ["done:0", "shutdown"]


@pytest.mark.parametrize("how", ["handles_dropped", "ray_terminate"])
@pytest.mark.parametrize("job_class", [ThreadedJob, AsyncJob], ids=["threaded", "async"])
def test_concurrent_actor_ends_after_the_calls_it_is_running(job_class, how, tmp_path):
    ray.init(num_cpus=2)
    path = tmp_path / "marks.txt"
    gate = Gate.remote()
    job = job_class.remote(gate, str(path))
    running = [job.work.remote(i) for i in range(3)]
    ray.get(gate.holding.remote(3))  # all three are running, held at the gate
    if how == "handles_dropped":
        del job
    else:
        terminated = job.__ray_terminate__.remote()
    gate.open.remote()
    assert ray.get(running, timeout=60) == [0, 10, 20]
    if how == "ray_terminate":
        with pytest.raises(RayActorError):
            ray.get(terminated, timeout=60)
    marks = _marks(path, 4)
    assert marks == sorted(["done:0", "done:1", "done:2", "shutdown"])
    assert path.read_text().split()[-1] == "shutdown"  # (its cleanup ran after them)


@ray.remote
def task_context():
    ctx = ray.get_runtime_context()
    return {"job": ctx.get_job_id(), "task": ctx.get_task_id(), "actor": ctx.get_actor_id(),
            "node": ctx.get_node_id(), "namespace": ctx.namespace}


@ray.remote
class Identified:
    def context(self):
        ctx = ray.get_runtime_context()
        return {"job": ctx.get_job_id(), "task": ctx.get_task_id(), "actor": ctx.get_actor_id(),
                "worker": ctx.get_worker_id(), "node": ctx.get_node_id()}


def test_runtime_context_everywhere():
    ray.init(num_cpus=4, namespace="ctx-demo")
    driver = ray.get_runtime_context()
    job_id = driver.get_job_id()
    node_id = driver.get_node_id()
    assert isinstance(job_id, str) and job_id
    assert isinstance(node_id, str) and node_id
    assert driver.get_actor_id() is None
    assert driver.namespace == "ctx-demo"
    assert isinstance(driver.get_worker_id(), str)

    tasks = ray.get([task_context.remote() for _ in range(3)])
    for t in tasks:
        assert t["job"] == job_id and t["node"] == node_id
        assert t["actor"] is None
        assert t["namespace"] == "ctx-demo"
        assert isinstance(t["task"], str) and t["task"]
    assert len({t["task"] for t in tasks}) == 3

    a, b = Identified.remote(), Identified.remote()
    a1, a2, b1 = ray.get([a.context.remote(), a.context.remote(), b.context.remote()])
    assert a1["actor"] == a2["actor"] != b1["actor"]
    assert a1["worker"] == a2["worker"] != b1["worker"]
    assert a1["task"] != a2["task"]
    assert a1["job"] == b1["job"] == job_id
    assert a1["node"] == node_id


@ray.remote
class ConnectionPool:
    def __init__(self, size):
        self.barrier = threading.Barrier(size, timeout=30)
        self.lock = threading.Lock()
        self.served = 0
        self.threads = set()

    def query(self, q):
        # Every caller waits here until `size` calls are in progress at once:
        # this only completes if the actor really runs calls concurrently.
        self.barrier.wait()
        with self.lock:
            self.served += 1
            self.threads.add(threading.get_ident())
        return q.upper()

    def stats(self):
        with self.lock:
            return self.served, len(self.threads)


def test_threaded_actor_max_concurrency():
    ray.init(num_cpus=4)
    pool = ConnectionPool.options(max_concurrency=4).remote(4)
    results = ray.get([pool.query.remote(f"select {i}") for i in range(8)])
    assert results == [f"SELECT {i}" for i in range(8)]
    served, threads = ray.get(pool.stats.remote())
    assert served == 8
    assert threads >= 4


class Shape:
    def __init__(self, sides):
        self.sides = sides


@ray.remote
class Square(Shape):
    """A remote class that subclasses a plain one, with static and class methods."""

    def __init__(self):
        super().__init__(4)

    @staticmethod
    def area(side):
        return side * side

    @classmethod
    def unit_area(cls):
        return cls.area(1)

    def count(self):
        return self.sides


def test_an_actor_class_s_static_methods_and_its_subclassing():
    ray.init(num_cpus=1)
    assert Square.area(3) == 9 and Square.unit_area() == 1  # (on the class, as on a plain one)
    square = Square.remote()
    assert ray.get([square.count.remote(), square.area.remote(2)]) == [4, 4]
    with pytest.raises(ray.actor.ActorClassInheritanceException):
        class Cube(Square):  # noqa: F841 - (an actor class is no base: subclass Shape instead)
            pass


@ray.remote(max_concurrency=4)
class Leaving:
    """Its exit hook holds until the test lets it go, so a call can come meanwhile."""

    def __init__(self, in_hook, release):
        self.in_hook, self.release = in_hook, release

    def quit(self):
        ray.actor.exit_actor()

    def __ray_shutdown__(self):
        ray.get(self.in_hook.wait.remote())  # (counted by holding(): the test knows it got here)
        ray.get(self.release.wait.remote())

    def ping(self):
        return "pong"


def test_a_call_that_comes_while_an_actor_ends_is_not_run():
    ray.init(num_cpus=2)
    in_hook, release = Gate.remote(), Gate.remote()
    leaving = Leaving.remote(in_hook, release)
    assert ray.get(leaving.ping.remote()) == "pong"
    quitting = leaving.quit.remote()
    ray.get(in_hook.holding.remote(1))  # (its exit hook runs now)
    in_hook.open.remote()
    late = leaving.ping.remote()
    release.open.remote()
    for ref in (quitting, late):
        with pytest.raises(RayActorError):
            ray.get(ref, timeout=60)

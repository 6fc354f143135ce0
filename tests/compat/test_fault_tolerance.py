"""Failures and recovery.

* Flaky tasks (a remote shard that times out twice) retried by
  ``max_retries`` + ``retry_exceptions``, including the allow-list form, and a
  task that exhausts its retries.
* Application errors caught on the driver with ``except ValueError`` around
  ``ray.get`` (also custom subclasses, errors re-raised through a nested
  task, and errors flowing into a dependent task).
* A cache actor with ``max_restarts`` that ``os._exit``s: the in-flight call
  fails with ``RayActorError``, the actor comes back with fresh state in a
  new process, and once restarts are exhausted calls raise ``ActorDiedError``.
* A supervisor restarting a wedged actor with ``ray.kill(no_restart=False)``,
  then retiring it for good with a plain ``ray.kill``.
* ``max_task_retries`` making an actor crash invisible to the caller, and a method's
  own ``@ray.method(max_task_retries=...)`` (and ``.options()``) retrying its errors.
* A task whose worker process dies: ``WorkerCrashedError`` without retries,
  transparent recovery with them.
* An actor whose constructor fails.
"""
import os
import threading

import pytest

import meshrt as ray
from meshrt.exceptions import (
    ActorDiedError,
    RayActorError,
    RayError,
    RayTaskError,
    WorkerCrashedError,
)

pytestmark = pytest.mark.timeout(120)


@ray.remote
class AttemptLog:
    def __init__(self):
        self.attempts = {}

    def record(self, key):
        self.attempts[key] = self.attempts.get(key, 0) + 1
        return self.attempts[key]

    def count(self, key):
        return self.attempts.get(key, 0)


@ray.remote
def fetch_shard(shard, log, failures_before_success, error_type="connection"):
    attempt = ray.get(log.record.remote(shard))
    if attempt <= failures_before_success:
        if error_type == "connection":
            raise ConnectionError(f"shard {shard}: upstream timed out (attempt {attempt})")
        raise ValueError(f"shard {shard}: corrupt payload")
    return {"shard": shard, "rows": shard * 10, "attempt": attempt}


def test_flaky_tasks_are_retried():
    ray.init(num_cpus=4)
    log = AttemptLog.remote()

    resilient = fetch_shard.options(max_retries=3, retry_exceptions=True)
    results = ray.get([resilient.remote(s, log, 2) for s in range(4)])
    assert [r["rows"] for r in results] == [0, 10, 20, 30]
    assert all(r["attempt"] == 3 for r in results)
    assert ray.get([log.count.remote(s) for s in range(4)]) == [3, 3, 3, 3]

    # Only retry the errors we know to be transient.
    selective = fetch_shard.options(max_retries=3, retry_exceptions=[ConnectionError])
    assert ray.get(selective.remote("s1", log, 1))["attempt"] == 2
    with pytest.raises(ValueError, match="corrupt payload"):
        ray.get(selective.remote("s2", log, 1, "value"))
    assert ray.get(log.count.remote("s2")) == 1  # not retried

    # Application exceptions are not retried unless asked to.
    with pytest.raises(ConnectionError):
        ray.get(fetch_shard.options(max_retries=3).remote("s3", log, 1))
    assert ray.get(log.count.remote("s3")) == 1

    # Out of retries: the last error is what the caller sees.
    with pytest.raises(ConnectionError, match="attempt 2"):
        ray.get(fetch_shard.options(max_retries=1, retry_exceptions=True).remote("s4", log, 5))
    assert ray.get(log.count.remote("s4")) == 2


class InvalidRecord(ValueError):
    def __init__(self, record_id):
        super().__init__(f"invalid record {record_id}")
        self.record_id = record_id


@ray.remote
def validate(record_id):
    if record_id % 4 == 3:
        raise InvalidRecord(record_id)
    return record_id


@ray.remote
def validate_all(ids):
    return ray.get([validate.remote(i) for i in ids])  # re-raises the child's error


@ray.remote
def store(value):
    return f"stored {value}"


@ray.remote
def divide(a, b):
    return a / b


def test_application_errors_on_get():
    ray.init(num_cpus=4)
    good, bad = [], []
    for ref in [validate.remote(i) for i in range(8)]:
        try:
            good.append(ray.get(ref))
        except ValueError as exc:  # the user's exception type is preserved
            bad.append(exc.record_id)
            assert isinstance(exc, InvalidRecord)
            assert isinstance(exc, RayTaskError)
            assert isinstance(exc, RayError)
            assert "invalid record" in str(exc)
    assert good == [0, 1, 2, 4, 5, 6]
    assert bad == [3, 7]

    with pytest.raises(ZeroDivisionError):
        ray.get(divide.remote(1, 0))
    with pytest.raises(RayTaskError):
        ray.get(divide.remote(1, 0))

    # Through a nested task.
    with pytest.raises(InvalidRecord) as info:
        ray.get(validate_all.remote([1, 2, 3]))
    assert info.value.record_id == 3

    # A failed ref passed to another task fails that task with the same error.
    with pytest.raises(ValueError, match="invalid record 11"):
        ray.get(store.remote(validate.remote(11)))
    assert ray.get(store.remote(validate.remote(10))) == "stored 10"

    # One failure in a list fails the whole ray.get.
    with pytest.raises(ValueError):
        ray.get([validate.remote(i) for i in range(5)])


def call_with_retry(method, *args, attempts=50):
    """Call an actor method, retrying while the actor is (re)starting."""
    for attempt in range(attempts):
        try:
            return ray.get(method.remote(*args), timeout=60)
        except RayActorError:
            if attempt == attempts - 1:
                raise


@ray.remote(max_restarts=1)
class CacheShard:
    def __init__(self):
        self.cache = {}

    def put(self, key, value):
        self.cache[key] = value
        return len(self.cache)

    def get(self, key):
        return self.cache.get(key)

    def pid(self):
        return os.getpid()

    def crash(self):
        os._exit(1)


def test_actor_restarts_after_crash():
    ray.init(num_cpus=4)
    shard = CacheShard.remote()
    first_pid = ray.get(shard.pid.remote())
    assert ray.get(shard.put.remote("a", 1)) == 1

    with pytest.raises(RayActorError):
        ray.get(shard.crash.remote())

    # Restarted: same handle, new process, constructor ran again (state is gone).
    assert call_with_retry(shard.get, "a") is None
    assert ray.get(shard.pid.remote()) != first_pid
    assert ray.get(shard.put.remote("b", 2)) == 1

    # The single restart is used up: this crash is final.
    with pytest.raises(RayActorError):
        ray.get(shard.crash.remote())
    with pytest.raises(ActorDiedError):
        ray.get(shard.get.remote("b"))


@ray.remote(max_restarts=1)
class StreamConsumer:
    def __init__(self):
        self.hang = threading.Event()

    def pid(self):
        return os.getpid()

    def consume_forever(self):
        self.hang.wait()  # stuck on a broker that stopped responding


def test_supervisor_restarts_wedged_actor():
    ray.init(num_cpus=4)
    consumer = StreamConsumer.remote()
    old_pid = ray.get(consumer.pid.remote())
    stuck = consumer.consume_forever.remote()
    ready, _ = ray.wait([stuck], timeout=0.3)
    assert ready == []

    # Kill the process but let the actor restart (uses up its one restart).
    ray.kill(consumer, no_restart=False)
    with pytest.raises(RayActorError):
        ray.get(stuck, timeout=60)
    new_pid = call_with_retry(consumer.pid)
    assert new_pid != old_pid

    # A plain ray.kill is final.
    ray.kill(consumer)
    with pytest.raises(RayActorError):
        ray.get(consumer.pid.remote(), timeout=60)


@ray.remote(max_restarts=2, max_task_retries=2)
class FlakyNativeWorker:
    def process(self, marker_path, x):
        if not os.path.exists(marker_path):
            # First time we see this input the "native library" segfaults.
            open(marker_path, "w").close()
            os._exit(1)
        return x * 2, os.getpid()


def test_actor_task_retries_hide_crash(tmp_path):
    ray.init(num_cpus=4)
    worker = FlakyNativeWorker.remote()
    value, pid = ray.get(worker.process.remote(str(tmp_path / "seen-21"), 21))
    assert value == 42
    assert pid != os.getpid()
    assert (tmp_path / "seen-21").exists()
    # Still usable afterwards.
    assert ray.get(worker.process.remote(str(tmp_path / "seen-21"), 5))[0] == 10


@ray.remote
class FlakyClient:
    """An actor with no max_task_retries of its own: one method asks for retries."""

    def __init__(self):
        self.attempts = 0

    @ray.method(max_task_retries=3, retry_exceptions=[ConnectionError])
    def fetch(self, failures):
        self.attempts += 1
        if self.attempts <= failures:
            raise ConnectionError(f"attempt {self.attempts} dropped")
        return self.attempts

    @ray.method
    def attempts_so_far(self):
        return self.attempts


def test_a_method_retries_by_its_own_max_task_retries():
    ray.init(num_cpus=2)
    client = FlakyClient.remote()
    assert ray.get(client.fetch.remote(2)) == 3
    with pytest.raises(ConnectionError):
        ray.get(client.fetch.options(max_task_retries=0).remote(10))  # (per call: no retries)
    assert ray.get(client.attempts_so_far.remote()) == 4


@ray.remote
def render_frame(marker_path, frame):
    if marker_path is not None and not os.path.exists(marker_path):
        open(marker_path, "w").close()
        os._exit(1)  # the worker process dies, not an exception
    return f"frame-{frame}.png"


def test_worker_crash_in_task(tmp_path):
    ray.init(num_cpus=4, log_to_driver=False)
    with pytest.raises(WorkerCrashedError):
        ray.get(render_frame.options(max_retries=0).remote(str(tmp_path / "crash-a"), 1))

    # System failures are retried (max_retries), so a one-off crash is invisible.
    marker = str(tmp_path / "crash-b")
    assert ray.get(render_frame.options(max_retries=2).remote(marker, 2)) == "frame-2.png"
    assert ray.get(render_frame.remote(None, 3)) == "frame-3.png"


@ray.remote
class DatabaseClient:
    def __init__(self, dsn):
        if not dsn.startswith("postgres://"):
            raise ValueError(f"unsupported dsn {dsn!r}")
        self.dsn = dsn

    def query(self, sql):
        return f"{self.dsn}: {sql}"


def test_actor_constructor_failure():
    ray.init(num_cpus=4)
    ok = DatabaseClient.remote("postgres://db/main")
    broken = DatabaseClient.remote("mysql://db/main")
    assert ray.get(ok.query.remote("select 1")) == "postgres://db/main: select 1"
    with pytest.raises(RayActorError) as info:
        ray.get(broken.query.remote("select 1"))
    assert "unsupported dsn" in str(info.value)
    with pytest.raises(RayActorError):
        ray.get(broken.query.remote("select 2"))

"""Results as they become ready: ``ray.util.as_completed`` over refs, and
``ray.util.map_unordered`` with back-pressure on the tasks in flight."""
import threading

import pytest

import meshrt as ray
from meshrt.util import as_completed, map_unordered

pytestmark = pytest.mark.timeout(120)


@ray.remote
class Gate:
    def __init__(self):
        self.opened = threading.Event()

    def open(self):
        self.opened.set()

    def wait(self):
        return self.opened.wait(60)


@ray.remote
def slow(gate, x):
    ray.get(gate.wait.remote())
    return x


@ray.remote
def double(x):
    return 2 * x


def test_values_come_as_they_are_ready():
    ray.init(num_cpus=2)
    gate = Gate.options(max_concurrency=4).remote()
    held = slow.remote(gate, "last")
    quick = [double.remote(i) for i in range(5)]
    seen = []
    for value in as_completed([held] + quick, chunk_size=1):
        seen.append(value)
        if len(seen) == 5:
            gate.open.remote()  # (the held task can finish only once the quick ones were all seen)
    assert sorted(seen[:5]) == [0, 2, 4, 6, 8] and seen[5] == "last"
    refs = list(as_completed([double.remote(3)], yield_obj_refs=True))
    assert ray.get(refs) == [6]
    with pytest.raises(ValueError):
        list(as_completed([double.remote(1)], chunk_size=0))


def test_map_unordered_keeps_at_most_the_backpressure_in_flight():
    ray.init(num_cpus=2)
    assert sorted(map_unordered(double, range(50), backpressure_size=4, chunk_size=2)) == [2 * i for i in range(50)]
    assert sorted(map_unordered(double, range(5), backpressure_size=None)) == [0, 2, 4, 6, 8]


def test_inspect_serializability_finds_the_part_that_cannot_be_pickled():
    import io

    from meshrt.util import inspect_serializability

    lock = threading.Lock()

    def uses_a_lock():
        with lock:
            return 1

    class Holder:
        def __init__(self):
            self.fine = [1, 2]
            self.bad = lock

    assert inspect_serializability(double, print_file=io.StringIO())[0]
    ok, failures = inspect_serializability(uses_a_lock, name="uses_a_lock", print_file=io.StringIO())
    assert not ok and [f.obj for f in failures] == [lock]
    ok, failures = inspect_serializability(Holder(), print_file=io.StringIO())
    assert not ok and [f.obj for f in failures] == [lock]

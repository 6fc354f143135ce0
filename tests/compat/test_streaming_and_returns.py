"""Streaming generators and multiple return values.

* A log-tailing task declared with ``num_returns="streaming"`` yields parsed
  records; the driver consumes the ``ObjectRefGenerator`` as items arrive and
  pipelines each ref into a downstream task before the stream has ended.
* A streaming actor method that pages through a table, and a stream that
  fails midway: items before the error are delivered, then the error surfaces
  on the next ``ray.get``.
* ``num_returns=3`` for a train/validation/test split, ``@ray.method(num_returns=2)``
  on an actor and ``.options(num_returns=...)`` overriding it per call.
"""
import numpy as np
import pytest

import meshrt as ray

pytestmark = pytest.mark.timeout(120)

LOG_LINES = [f"{i:04d} {'ERROR' if i % 7 == 0 else 'INFO'} request {i} took {i % 13}ms"
             for i in range(40)]


@ray.remote(num_returns="streaming")
def tail_log(lines):
    for line in lines:
        seq, level, *_rest, took = line.split()
        yield {"seq": int(seq), "level": level, "ms": int(took[:-2])}


@ray.remote
def alert_if_error(record):
    return record["seq"] if record["level"] == "ERROR" else None


def test_streaming_task_consumed_incrementally():
    ray.init(num_cpus=4)
    stream = tail_log.remote(LOG_LINES)
    assert isinstance(stream, ray.ObjectRefGenerator)
    assert ray.get(stream) is stream  # (get() gives a generator back as it is)

    first = next(stream)
    assert isinstance(first, ray.ObjectRef)
    assert ray.get(first)["seq"] == 0

    alerts = [alert_if_error.remote(first)]
    total_ms = ray.get(first)["ms"]
    count = 1
    for ref in stream:
        alerts.append(alert_if_error.remote(ref))  # hand the ref on right away
        total_ms += ray.get(ref)["ms"]
        count += 1

    assert count == 40
    assert total_ms == sum(i % 13 for i in range(40))
    assert [s for s in ray.get(alerts) if s is not None] == [0, 7, 14, 21, 28, 35]
    with pytest.raises(StopIteration):
        next(stream)


@ray.remote
class Table:
    def __init__(self, rows):
        self.rows = rows

    def scan(self, page_size):
        for start in range(0, len(self.rows), page_size):
            yield self.rows[start:start + page_size]

    def scan_until_corrupt(self, bad_row):
        for i, row in enumerate(self.rows):
            if i == bad_row:
                raise ValueError(f"checksum mismatch at row {i}")
            yield row


def test_streaming_actor_method_and_midstream_error():
    ray.init(num_cpus=4)
    table = Table.remote([{"id": i, "v": i * i} for i in range(23)])

    pages = [ray.get(ref) for ref in table.scan.options(num_returns="streaming").remote(5)]
    assert [len(p) for p in pages] == [5, 5, 5, 5, 3]
    assert [row["id"] for page in pages for row in page] == list(range(23))

    received = []
    with pytest.raises(ValueError, match="checksum mismatch at row 4"):
        for ref in table.scan_until_corrupt.options(num_returns="streaming").remote(4):
            received.append(ray.get(ref)["id"])
    assert received == [0, 1, 2, 3]
    # The actor itself is fine.
    assert len(ray.get(next(table.scan.options(num_returns="streaming").remote(100)))) == 23


@ray.remote(num_returns=3)
def split_dataset(data, seed):
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(data))
    n_train, n_val = int(0.6 * len(data)), int(0.2 * len(data))
    return data[idx[:n_train]], data[idx[n_train:n_train + n_val]], data[idx[n_train + n_val:]]


@ray.remote
def halves(values):
    mid = len(values) // 2
    return values[:mid], values[mid:]


@ray.remote
def fit_mean(train):
    return float(train.mean())


@ray.remote
class Normalizer:
    def __init__(self):
        self.mean = None
        self.std = None

    @ray.method(num_returns=2)
    def fit(self, values):
        self.mean, self.std = float(np.mean(values)), float(np.std(values))
        return self.mean, self.std

    def transform(self, values):
        return (np.asarray(values) - self.mean) / self.std

    def min_max(self, values):
        return float(np.min(values)), float(np.max(values))


def test_multiple_return_values():
    ray.init(num_cpus=4)
    data = np.arange(100, dtype=np.float64)
    train_ref, val_ref, test_ref = split_dataset.remote(data, seed=7)
    train, val, test = ray.get([train_ref, val_ref, test_ref])
    assert (len(train), len(val), len(test)) == (60, 20, 20)
    assert sorted(np.concatenate([train, val, test]).tolist()) == data.tolist()
    assert ray.get(fit_mean.remote(train_ref)) == pytest.approx(train.mean())

    norm = Normalizer.remote()
    mean_ref, std_ref = norm.fit.remote(train_ref)
    assert ray.get(mean_ref) == pytest.approx(train.mean())
    assert ray.get(std_ref) == pytest.approx(train.std())
    scaled = ray.get(norm.transform.remote(train_ref))
    assert abs(scaled.mean()) < 1e-9

    lo_ref, hi_ref = norm.min_max.options(num_returns=2).remote(test_ref)
    assert (ray.get(lo_ref), ray.get(hi_ref)) == (test.min(), test.max())
    single = norm.min_max.remote(test_ref)  # default: one ref holding the tuple
    assert ray.get(single) == (test.min(), test.max())

    # The same task function with a different arity for one call.
    first_half, second_half = halves.options(num_returns=2).remote(data)
    assert ray.get(first_half)[-1] == 49.0
    assert ray.get(second_half)[0] == 50.0
    assert len(ray.get(halves.remote(data))) == 2

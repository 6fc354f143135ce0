"""Map/reduce with tasks.

* A word count with a hash-partitioned shuffle: every mapper returns one
  partition per reducer (``num_returns`` set per call through ``.options``),
  and each reducer receives its slice of every mapper's output as refs.
* Column statistics over a numpy matrix that is ``ray.put`` once and shared by
  all the map tasks.
* A pairwise tree reduction where partial results flow between tasks as
  refs and never come back to the driver until the end.
"""
import collections
import zlib

import numpy as np
import pytest

import meshrt as ray

pytestmark = pytest.mark.timeout(120)

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A lazy afternoon: the dog sleeps, the fox waits.",
    "Brown leaves fall; the quick wind carries them away.",
    "Over the hills and far away the fox runs quick and brown.",
    "Dogs and foxes are not friends, said the old farmer.",
    "The farmer's dog barks at the moon over the quiet hills.",
    "Quick thinking saved the hen from the hungry fox.",
    "Away from the farm, the lazy dog dreams of bones.",
]


def _normalize(word):
    return word.strip(".,;:!?'\"").lower()


@ray.remote
def map_words(lines, num_partitions):
    # Python's hash() is salted per process, so partition with a stable hash:
    # every mapper process must send the same word to the same reducer.
    partitions = [collections.Counter() for _ in range(num_partitions)]
    for line in lines:
        for raw in line.split():
            word = _normalize(raw)
            if word:
                partitions[zlib.crc32(word.encode()) % num_partitions][word] += 1
    return tuple(partitions)


@ray.remote
def reduce_counts(*partials):
    total = collections.Counter()
    for partial in partials:
        total.update(partial)
    return dict(total)


def test_word_count_shuffle():
    ray.init(num_cpus=4)
    num_mappers, num_reducers = 4, 3

    chunks = [CORPUS[i::num_mappers] for i in range(num_mappers)]
    # Each call returns a list of `num_reducers` ObjectRefs.
    map_outputs = [
        map_words.options(num_returns=num_reducers).remote(chunk, num_reducers)
        for chunk in chunks
    ]
    assert all(len(out) == num_reducers for out in map_outputs)
    assert all(isinstance(ref, ray.ObjectRef) for out in map_outputs for ref in out)

    reduce_refs = [
        reduce_counts.remote(*[out[r] for out in map_outputs])
        for r in range(num_reducers)
    ]
    per_reducer = ray.get(reduce_refs)

    # Partitions are disjoint and together hold every word.
    seen = set()
    merged = {}
    for counts in per_reducer:
        assert seen.isdisjoint(counts)
        seen.update(counts)
        merged.update(counts)

    expected = collections.Counter(
        _normalize(w) for line in CORPUS for w in line.split() if _normalize(w)
    )
    assert merged == dict(expected)
    assert merged["the"] == expected["the"] > 10
    assert merged["fox"] == 4


@ray.remote
def column_stats(matrix, start, stop):
    block = matrix[:, start:stop]
    return {
        "cols": (start, stop),
        "sum": block.sum(axis=0),
        "max": block.max(axis=0),
        "nonzero": int(np.count_nonzero(block)),
    }


def test_shared_numpy_matrix_column_stats():
    ray.init(num_cpus=4)
    rng = np.random.default_rng(1234)
    matrix = rng.integers(0, 50, size=(400, 60)).astype(np.float64)
    matrix_ref = ray.put(matrix)  # one copy in the object store, shared by all tasks
    assert isinstance(matrix_ref, ray.ObjectRef)

    bounds = [(s, min(s + 16, matrix.shape[1])) for s in range(0, matrix.shape[1], 16)]
    results = ray.get([column_stats.remote(matrix_ref, a, b) for a, b in bounds])

    assert [r["cols"] for r in results] == bounds
    sums = np.concatenate([r["sum"] for r in results])
    maxes = np.concatenate([r["max"] for r in results])
    np.testing.assert_allclose(sums, matrix.sum(axis=0))
    np.testing.assert_array_equal(maxes, matrix.max(axis=0))
    assert sum(r["nonzero"] for r in results) == np.count_nonzero(matrix)


@ray.remote
def sample_histogram(seed, bins):
    rng = np.random.default_rng(seed)
    samples = rng.normal(size=2_000)
    hist, _ = np.histogram(samples, bins=bins, range=(-4, 4))
    return hist


@ray.remote
def merge_histograms(left, right):
    return left + right


def test_tree_reduce_of_partial_results():
    ray.init(num_cpus=4)
    bins = 16
    seeds = list(range(11))  # odd count exercises the carry-over branch
    level = [sample_histogram.remote(seed, bins) for seed in seeds]

    rounds = 0
    while len(level) > 1:
        nxt = [merge_histograms.remote(level[i], level[i + 1])
               for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
        rounds += 1

    total = ray.get(level[0])
    expected = sum(
        np.histogram(np.random.default_rng(s).normal(size=2_000), bins=bins, range=(-4, 4))[0]
        for s in seeds
    )
    assert rounds == 4
    np.testing.assert_array_equal(total, expected)
    assert total.sum() <= 2_000 * len(seeds)

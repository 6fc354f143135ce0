"""A multiprocessing.Pool program moved onto the runtime (``ray.util.multiprocessing``):
word counts over text shards with map, an initializer that loads a vocabulary once per
process, imap for results in order, apply_async with callbacks, close and join."""
import threading

import pytest

import meshrt as ray
from meshrt.util.multiprocessing import Pool

pytestmark = pytest.mark.timeout(180)

SHARDS = ["the cat sat", "the dog ran far", "a cat and a dog", "far far away"]


def load_vocabulary(words):
    global VOCABULARY
    VOCABULARY = set(words)


def count_known(text):
    return sum(1 for word in text.split() if word in VOCABULARY)


def word_lengths(text):
    return [len(word) for word in text.split()]


def scaled(x, factor=1):
    return x * factor


def test_a_pool_program_runs_on_the_runtime():
    ray.init(num_cpus=2)
    with Pool(2, initializer=load_vocabulary, initargs=(["cat", "dog", "far"],)) as pool:
        assert pool.map(count_known, SHARDS) == [1, 2, 2, 2]
        assert list(pool.imap(word_lengths, SHARDS[:2])) == [[3, 3, 3], [3, 3, 3, 3]]
        assert sum(pool.imap_unordered(count_known, SHARDS)) == 7
        assert pool.starmap(scaled, [(1, 2), (3, 4)]) == [2, 12]
        done = threading.Event()
        totals = []
        result = pool.apply_async(scaled, (21,), {"factor": 2}, callback=lambda v: (totals.append(v), done.set()))
        assert result.get(timeout=60) == 42 and done.wait(60) and totals == [42]
        with pytest.raises(ZeroDivisionError) as raised:
            pool.apply(divmod, (1, 0))
        assert type(raised.value) is ZeroDivisionError  # (the worker's own, as multiprocessing raises it)
        assert str(raised.value) == "integer division or modulo by zero"
    pool = Pool(2)
    later = pool.map_async(scaled, range(10))
    pool.close()
    pool.join()
    assert later.get(timeout=60) == list(range(10))

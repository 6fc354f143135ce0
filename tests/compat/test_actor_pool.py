"""A fixed pool of stateful worker actors driven by ``ActorPool``.

* ``map`` over documents with a pool of tokenizer actors that each load a
  vocabulary once: results come back in input order.
* ``map_unordered`` and the manual ``submit`` / ``has_next`` /
  ``get_next_unordered`` loop, as used by thumbnailing or scraping jobs.
* Growing the pool with ``push``, draining idle actors with ``pop_idle``, and
  a worker error surfacing from ``get_next`` without breaking the pool.
"""

import pytest

import meshrt as ray
from meshrt.util import ActorPool

pytestmark = pytest.mark.timeout(120)


@ray.remote
class Tokenizer:
    def __init__(self, vocab):
        self.vocab = {word: i for i, word in enumerate(vocab)}
        self.handled = 0

    def encode(self, text):
        self.handled += 1
        return [self.vocab.get(w, -1) for w in text.lower().split()]

    def stats(self):
        return self.handled


def test_pool_map_keeps_input_order():
    ray.init(num_cpus=4)
    vocab = ["hello", "world", "ray", "actors", "are", "fun", "pools"]
    actors = [Tokenizer.remote(vocab) for _ in range(3)]
    pool = ActorPool(actors)

    docs = [f"hello world {i}" if i % 2 else "ray actors are fun" for i in range(12)]
    encoded = list(pool.map(lambda actor, doc: actor.encode.remote(doc), docs))

    assert len(encoded) == len(docs)
    for i, ids in enumerate(encoded):
        if i % 2:
            assert ids == [0, 1, -1]
        else:
            assert ids == [2, 3, 4, 5]
    handled = ray.get([a.stats.remote() for a in actors])
    assert sum(handled) == len(docs)


@ray.remote
class Thumbnailer:
    def __init__(self, name):
        self.name = name

    def resize(self, image):
        width, height = image["size"]
        sum(range(20_000 * (image["id"] % 3)))  # uneven work
        scale = 64 / max(width, height)
        return image["id"], (round(width * scale), round(height * scale)), self.name


def test_pool_unordered_and_manual_submit():
    ray.init(num_cpus=4)
    images = [{"id": i, "size": (128 + 32 * i, 256)} for i in range(10)]
    pool = ActorPool([Thumbnailer.remote(f"w{i}") for i in range(3)])

    results = list(pool.map_unordered(lambda a, img: a.resize.remote(img), images))
    assert sorted(r[0] for r in results) == list(range(10))
    by_id = {r[0]: r[1] for r in results}
    assert by_id[0] == (32, 64)
    assert by_id[4] == (64, 64)
    assert by_id[8] == (64, 43)
    assert {r[2] for r in results} <= {"w0", "w1", "w2"}

    # The manual loop: submit everything, then drain as results finish.
    for img in images[:5]:
        pool.submit(lambda a, img: a.resize.remote(img), img)
    drained = []
    while pool.has_next():
        drained.append(pool.get_next_unordered()[0])
    assert sorted(drained) == [0, 1, 2, 3, 4]
    assert not pool.has_next()

    # Ordered manual retrieval.
    for img in images[5:]:
        pool.submit(lambda a, img: a.resize.remote(img), img)
    ordered = [pool.get_next()[0] for _ in range(5)]
    assert ordered == [5, 6, 7, 8, 9]


@ray.remote
class Validator:
    def check(self, record):
        if record < 0:
            raise ValueError(f"negative record {record}")
        return record * 10


def test_pool_resize_and_errors():
    ray.init(num_cpus=4)
    pool = ActorPool([Validator.remote()])
    assert pool.has_free()
    pool.push(Validator.remote())
    pool.push(Validator.remote())

    records = [1, 2, -3, 4, 5]
    for r in records:
        pool.submit(lambda a, v: a.check.remote(v), r)
    outcome = []
    while pool.has_next():
        try:
            outcome.append(pool.get_next())
        except ValueError as exc:
            assert "negative record -3" in str(exc)
            outcome.append("invalid")
    assert outcome == [10, 20, "invalid", 40, 50]

    # Everything is idle again: pop all three actors out of the pool.
    popped = [pool.pop_idle() for _ in range(3)]
    assert all(a is not None for a in popped)
    assert pool.pop_idle() is None
    assert not pool.has_free()
    # The popped handles are still ordinary, live actors.
    assert ray.get([a.check.remote(7) for a in popped]) == [70, 70, 70]

"""asyncio inside actors and in the driver.

* An async actor as a rate-limited HTTP-style API client: many concurrent
  calls, at most N in flight at once (``asyncio.Semaphore``), with an
  in-memory response cache.
* A dynamic batcher: callers block in an async method until enough requests
  have arrived, then the whole batch is answered at once (only possible
  because async actor calls run concurrently).
* Async driver code: ``await ref``, ``asyncio.gather`` over refs and actor
  calls, ``asyncio.wait_for`` and exceptions surfacing through ``await``.
* An async actor that awaits calls on another actor's handle.
"""
import asyncio

import pytest

import meshrt as ray

pytestmark = pytest.mark.timeout(120)


@ray.remote
class RateLimitedClient:
    def __init__(self, max_in_flight):
        self.max_in_flight = max_in_flight
        self.semaphore = None
        self.in_flight = 0
        self.peak = 0
        self.requests_sent = 0
        self.cache = {}

    async def fetch(self, path):
        if path in self.cache:
            return dict(self.cache[path], cached=True)
        if self.semaphore is None:
            self.semaphore = asyncio.Semaphore(self.max_in_flight)
        async with self.semaphore:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            try:
                await asyncio.sleep(0.02)  # pretend network round trip
                self.requests_sent += 1
                response = {"path": path, "status": 200, "body": path.upper()}
            finally:
                self.in_flight -= 1
        self.cache[path] = response
        return dict(response, cached=False)

    async def stats(self):
        return {"peak": self.peak, "sent": self.requests_sent, "in_flight": self.in_flight}


def test_rate_limited_api_client():
    ray.init(num_cpus=4)
    client = RateLimitedClient.options(max_concurrency=32).remote(max_in_flight=3)
    paths = [f"/items/{i}" for i in range(24)]
    responses = ray.get([client.fetch.remote(p) for p in paths])

    assert [r["body"] for r in responses] == [p.upper() for p in paths]
    assert all(r["status"] == 200 and not r["cached"] for r in responses)
    stats = ray.get(client.stats.remote())
    assert stats["sent"] == 24
    assert stats["in_flight"] == 0
    assert 1 <= stats["peak"] <= 3

    again = ray.get(client.fetch.remote("/items/5"))
    assert again == {"path": "/items/5", "status": 200, "body": "/ITEMS/5", "cached": True}
    assert ray.get(client.stats.remote())["sent"] == 24


@ray.remote
class Batcher:
    """Collects requests and answers them together once a batch is full."""

    def __init__(self, batch_size):
        self.batch_size = batch_size
        self.pending = []
        self.batches = []

    async def predict(self, x):
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.pending.append((x, fut))
        if len(self.pending) >= self.batch_size:
            batch, self.pending = self.pending, []
            inputs = [item for item, _ in batch]
            self.batches.append(inputs)
            outputs = [v * v for v in inputs]  # one "vectorized" model call
            for (_, f), out in zip(batch, outputs, strict=True):
                f.set_result(out)
        return await asyncio.wait_for(fut, timeout=30)

    async def batch_sizes(self):
        return [len(b) for b in self.batches]


def test_dynamic_batching_async_actor():
    ray.init(num_cpus=4)
    batcher = Batcher.remote(batch_size=4)
    refs = [batcher.predict.remote(i) for i in range(12)]
    assert ray.get(refs) == [i * i for i in range(12)]
    assert ray.get(batcher.batch_sizes.remote()) == [4, 4, 4]


@ray.remote
def square(x):
    return x * x


@ray.remote
def parse_int(text):
    return int(text)


@ray.remote
class KeyValueStore:
    def __init__(self):
        self.data = {}

    def set(self, key, value):
        self.data[key] = value
        return True

    def get(self, key):
        return self.data.get(key)


def test_async_driver_awaits_refs():
    ray.init(num_cpus=4)
    store = KeyValueStore.remote()

    async def main():
        squares = await asyncio.gather(*[square.remote(i) for i in range(8)])
        single = await square.remote(12)
        await asyncio.gather(*[store.set.remote(f"k{i}", v) for i, v in enumerate(squares)])
        stored = await store.get.remote("k7")
        within = await asyncio.wait_for(square.remote(3), timeout=30)
        try:
            await parse_int.remote("not a number")
        except ValueError as exc:
            error = str(exc)
        else:
            error = None
        return squares, single, stored, within, error

    squares, single, stored, within, error = asyncio.run(main())
    assert squares == [i * i for i in range(8)]
    assert single == 144
    assert stored == 49
    assert within == 9
    assert error is not None and "not a number" in error


@ray.remote
class Inventory:
    def __init__(self, stock):
        self.stock = dict(stock)

    def reserve(self, item, qty):
        if self.stock.get(item, 0) < qty:
            return False
        self.stock[item] -= qty
        return True

    def remaining(self):
        return dict(self.stock)


@ray.remote
class OrderService:
    def __init__(self, inventory):
        self.inventory = inventory
        self.accepted = []
        self.rejected = []

    async def place(self, order_id, item, qty):
        ok = await self.inventory.reserve.remote(item, qty)
        (self.accepted if ok else self.rejected).append(order_id)
        return ok

    async def place_many(self, orders):
        results = await asyncio.gather(*[self.place(*o) for o in orders])
        return list(results)

    async def summary(self):
        return sorted(self.accepted), sorted(self.rejected)


def test_async_actor_awaits_other_actor():
    ray.init(num_cpus=4)
    inventory = Inventory.remote({"apple": 5, "pear": 1})
    service = OrderService.remote(inventory)

    first = ray.get([service.place.remote(i, "apple", 2) for i in range(3)])
    assert sorted(first) == [False, True, True]  # only two orders of 2 fit into 5
    more = ray.get(service.place_many.remote([(10, "pear", 1), (11, "pear", 1), (12, "kiwi", 1)]))
    assert sorted(more) == [False, False, True]
    accepted, rejected = ray.get(service.summary.remote())
    assert len(accepted) == 3 and len(rejected) == 3
    assert 12 in rejected
    assert ray.get(inventory.remaining.remote()) == {"apple": 1, "pear": 0}

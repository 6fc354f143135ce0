"""``ray.experimental.tqdm_ray``: a progress bar inside tasks and an actor, the way
Ray's docs use it; the work and the bar's counts come out the same."""
import time

import pytest

import meshrt as ray
from meshrt.experimental import tqdm_ray

pytestmark = pytest.mark.timeout(120)


@ray.remote
def process(shard: int, n: int) -> int:
    total = 0
    for i in tqdm_ray.tqdm(range(n), desc=f"shard {shard}"):
        total += i
        time.sleep(0.001)
    return total


@ray.remote
class Loader:
    def __init__(self, files: int) -> None:
        self.bar = tqdm_ray.tqdm(total=files, desc="files")

    def load(self) -> int:
        self.bar.update(1)
        return self.bar.n

    def done(self) -> int:
        self.bar.close()
        return self.bar.total


def test_bars_in_tasks_and_an_actor():
    ray.init(num_cpus=2)
    assert ray.get([process.remote(s, 50) for s in range(3)]) == [sum(range(50))] * 3
    loader = Loader.remote(4)
    assert [ray.get(loader.load.remote()) for _ in range(4)] == [1, 2, 3, 4]
    assert ray.get(loader.done.remote()) == 4
    bar = tqdm_ray.tqdm(total=2, desc="driver")
    bar.update(2)
    bar.set_description("driver, done")
    assert bar.n == 2 and bar.total == 2
    bar.close()
    tqdm_ray.safe_print("all done")

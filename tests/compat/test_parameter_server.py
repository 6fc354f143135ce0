"""Parameter server training of a linear model.

* Synchronous: one ``ParameterServer`` actor holds the weights; every step
  the driver fans gradient tasks out over data shards and hands their refs
  straight to ``apply_gradients(*grads)``, so the actor receives the resolved
  arrays.  The driver never blocks inside the loop and relies on the actor
  running calls in submission order.
* Asynchronous: stateful ``DataWorker`` actors each own a shard; the driver
  runs a ``ray.wait`` loop, applies whichever gradient arrives first and
  immediately re-dispatches that worker with the latest weights.
"""
import numpy as np
import pytest

import meshrt as ray

pytestmark = pytest.mark.timeout(120)

TRUE_W = np.array([2.0, -3.0, 0.5, 1.0])


def make_dataset(n=240, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, TRUE_W.size))
    y = X @ TRUE_W
    return X, y


@ray.remote
class ParameterServer:
    def __init__(self, dim, lr):
        self.weights = np.zeros(dim)
        self.lr = lr
        self.updates = 0

    def get_weights(self):
        return self.weights

    def apply_gradients(self, *gradients):
        self.weights = self.weights - self.lr * np.mean(gradients, axis=0)
        self.updates += 1
        return self.weights

    def num_updates(self):
        return self.updates


@ray.remote
def compute_gradient(weights, X, y):
    residual = X @ weights - y
    return 2.0 * X.T @ residual / len(y)


def test_synchronous_parameter_server():
    ray.init(num_cpus=4)
    X, y = make_dataset()
    shards = [(ray.put(X[idx]), ray.put(y[idx]))
              for idx in np.array_split(np.arange(len(y)), 4)]

    ps = ParameterServer.remote(TRUE_W.size, lr=0.1)
    steps = 40
    for _ in range(steps):
        weights_ref = ps.get_weights.remote()
        grads = [compute_gradient.remote(weights_ref, Xs, ys) for Xs, ys in shards]
        ps.apply_gradients.remote(*grads)

    final = ray.get(ps.get_weights.remote())
    assert ray.get(ps.num_updates.remote()) == steps
    np.testing.assert_allclose(final, TRUE_W, atol=1e-2)


@ray.remote
class DataWorker:
    def __init__(self, X, y, worker_id):
        self.X, self.y = X, y
        self.worker_id = worker_id
        self.computed = 0

    def gradient(self, weights):
        self.computed += 1
        residual = self.X @ weights - self.y
        return self.worker_id, 2.0 * self.X.T @ residual / len(self.y)

    def num_computed(self):
        return self.computed


def test_async_parameter_server_with_wait_loop():
    ray.init(num_cpus=4)
    X, y = make_dataset(seed=1)
    workers = [DataWorker.remote(X[idx], y[idx], i)
               for i, idx in enumerate(np.array_split(np.arange(len(y)), 3))]
    ps = ParameterServer.remote(TRUE_W.size, lr=0.1)
    # Start the loop once every worker is up: a late starter's first gradient
    # (computed at w=0) arriving after many updates would undo them.
    ray.get([w.num_computed.remote() for w in workers])

    total_updates = 90
    weights = ray.get(ps.get_weights.remote())
    in_flight = {w.gradient.remote(weights): w for w in workers}
    applied = 0
    contributors = set()
    while applied < total_updates:
        ready, _ = ray.wait(list(in_flight), num_returns=1)
        worker = in_flight.pop(ready[0])
        worker_id, grad = ray.get(ready[0])
        contributors.add(worker_id)
        weights = ray.get(ps.apply_gradients.remote(grad))
        applied += 1
        if applied + len(in_flight) < total_updates:
            in_flight[worker.gradient.remote(weights)] = worker

    assert not in_flight
    assert contributors == {0, 1, 2}
    assert ray.get(ps.num_updates.remote()) == total_updates
    assert sum(ray.get([w.num_computed.remote() for w in workers])) == total_updates
    np.testing.assert_allclose(ray.get(ps.get_weights.remote()), TRUE_W, atol=1e-2)

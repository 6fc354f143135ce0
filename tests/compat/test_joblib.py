"""joblib's Parallel on the runtime (``ray.util.joblib``): a parameter sweep, as
scikit-learn's ``n_jobs`` runs one, with results in order and errors raised."""
import math

import joblib
import pytest

import meshrt as ray
from meshrt.util.joblib import register_ray

pytestmark = pytest.mark.timeout(180)


def score(alpha, fold):
    return round(math.exp(-alpha) * (fold + 1), 6)


def test_a_parameter_sweep_runs_on_the_runtime():
    ray.init(num_cpus=2)
    register_ray()
    grid = [(alpha, fold) for alpha in (0.1, 0.5, 1.0) for fold in range(4)]
    with joblib.parallel_backend("ray"):
        scores = joblib.Parallel(n_jobs=2)(joblib.delayed(score)(a, f) for a, f in grid)
        assert scores == [score(a, f) for a, f in grid]
        assert joblib.Parallel(n_jobs=-1)(joblib.delayed(pow)(i, 2) for i in range(6)) == [0, 1, 4, 9, 16, 25]
        with pytest.raises(ValueError):
            joblib.Parallel(n_jobs=2)(joblib.delayed(math.sqrt)(x) for x in (4, -1, 9))

"""meshrt.util.joblib beyond tests/compat/test_joblib.py: a worker that dies fails the
Parallel call instead of hanging it; actor options; n_jobs=0 named."""

from __future__ import annotations

import os

import joblib
import pytest

from meshrt.exceptions import ActorDiedError
from meshrt.util.joblib import register_ray

pytestmark = pytest.mark.timeout(120)


def die_on(x, bad):
    if x == bad:
        os._exit(9)
    return x


def test_a_dead_worker_fails_the_call_and_options_reach_the_actors(rt):
    register_ray()
    with joblib.parallel_backend("meshrt", ray_remote_args={"num_cpus": 0.5}):
        assert joblib.Parallel(n_jobs=4)(joblib.delayed(die_on)(i, -1) for i in range(8)) == list(range(8))
        with pytest.raises(ActorDiedError):
            joblib.Parallel(n_jobs=2)(joblib.delayed(die_on)(i, 3) for i in range(6))
        with pytest.raises(ValueError, match="n_jobs=0"):
            joblib.Parallel(n_jobs=0)(joblib.delayed(die_on)(i, -1) for i in range(2))

"""Shared fixtures for the Ray-compatibility programs.

Every program starts its own runtime with ``ray.init(...)``; this fixture makes
sure it is torn down afterwards so the next program starts from a clean slate.
"""
import pytest

import meshrt as ray


@pytest.fixture(autouse=True)
def _shutdown_ray_after_test():
    yield
    ray.shutdown()

"""A joblib backend on meshrt (Ray's ``ray.util.joblib``): after ``register_ray()``,
``with joblib.parallel_backend("ray"):`` (or ``"meshrt"``) runs ``joblib.Parallel``
work, scikit-learn's ``n_jobs`` included, in a meshrt Pool, on any host of the
cluster."""

from __future__ import annotations

__all__ = ["register_ray"]


def register_ray() -> None:
    """Register the backend as "ray" (so code written for Ray's runs unchanged) and
    as "meshrt"."""
    try:
        from joblib.parallel import register_parallel_backend
    except ImportError:
        raise ImportError("meshrt.util.joblib needs joblib: pip install joblib") from None
    from .backend import MeshrtBackend

    register_parallel_backend("ray", MeshrtBackend)
    register_parallel_backend("meshrt", MeshrtBackend)

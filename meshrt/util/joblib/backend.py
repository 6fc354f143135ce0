"""The joblib backend: joblib's own pool management over a meshrt Pool.

joblib's multiprocessing backend drives a ``multiprocessing.Pool`` through
``apply_async`` with callbacks; meshrt's Pool has the same calls, so the backend
reuses joblib's pool-manager and auto-batching mixins (as joblib's own backends do) and
only says how to make the pool and how many workers there are.
"""

from __future__ import annotations

from typing import Any

from joblib._parallel_backends import AutoBatchingMixin, ParallelBackendBase, PoolManagerMixin

from ..._private import driver, toplevel
from ..multiprocessing import Pool


class MeshrtBackend(PoolManagerMixin, AutoBatchingMixin, ParallelBackendBase):
    supports_retrieve_callback = True
    supports_return_generator = False

    def __init__(self, nesting_level: int | None = None, inner_max_num_threads: int | None = None,
                 ray_remote_args: dict | None = None, **kwargs) -> None:
        """``ray_remote_args``: options of the pool's actors (``{"num_cpus": 2}``)."""
        super().__init__(nesting_level=nesting_level, inner_max_num_threads=inner_max_num_threads, **kwargs)
        self.ray_remote_args = ray_remote_args

    def effective_n_jobs(self, n_jobs: int | None) -> int:
        """``n_jobs`` workers; -1 is every CPU of the cluster (-2 all but one, as joblib's)."""
        if n_jobs == 0:
            raise ValueError("n_jobs=0 has no meaning: give a number of workers, or -1 for every CPU")
        if n_jobs is None:
            return 1
        if n_jobs < 0:
            if not driver.is_initialized():
                driver.init()
            cpus = int(toplevel.cluster_resources().get("CPU", 1))
            return max(cpus + 1 + n_jobs, 1)
        return n_jobs

    def configure(self, n_jobs: int = 1, parallel: Any = None, prefer: str | None = None,
                  require: str | None = None, ray_remote_args: dict | None = None, **kwargs) -> int:
        n_jobs = self.effective_n_jobs(n_jobs)
        options = ray_remote_args if ray_remote_args is not None else self.ray_remote_args
        self._pool = Pool(n_jobs, ray_remote_args=options)
        self.parallel = parallel
        return n_jobs

    def terminate(self) -> None:
        super().terminate()
        self.reset_batch_stats()

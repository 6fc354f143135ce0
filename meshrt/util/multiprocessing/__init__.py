"""``multiprocessing.Pool`` on meshrt (Ray's ``ray.util.multiprocessing``): the same
calls, with each pool process a meshrt actor, so a pool can span the hosts of a
cluster, reads large arguments from the shared-memory store, and fails a job whose
worker died instead of hanging."""

from multiprocessing import JoinableQueue, TimeoutError

from .pool import Pool
from .results import AsyncResult, IMapIterator

__all__ = ["AsyncResult", "IMapIterator", "JoinableQueue", "Pool", "TimeoutError"]

"""``Pool``: multiprocessing.Pool's calls, run by meshrt actors (Ray's
``ray.util.multiprocessing.Pool``, with its extra arguments).

Each pool process is an actor holding one CPU (``ray_remote_args`` changes that), so
the pool's processes are placed like any other work, on any host of the cluster. The
caller's function and items travel as call arguments: module-level functions by
reference, lambdas and closures by value (cloudpickle), large arrays through the
shared-memory store.
"""

from __future__ import annotations

import itertools
import logging
import os
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from ... import exceptions
from ..._private import api, toplevel
from ...objstore.serialization import error_payload
from .dispatch import Dispatcher, Job
from .results import AsyncResult, IMapIterator

log = logging.getLogger("meshrt")

_STOP_WAIT_S = 30.0  # (terminate: how long to wait for the dispatcher to have killed the processes)


class _PoolWorker:
    """One pool process: runs the initializer once, then chunks of calls."""

    def __init__(self, initializer: Callable | None, initargs: tuple) -> None:
        if initializer is not None:
            initializer(*initargs)

    def ready(self) -> bool:
        return True

    def run(self, chunks: list) -> list:
        """``chunks``: [(func, mode, items)], each run on its own: (True, its values), or
        (False, meshrt's record of the error it raised)."""
        out = []
        for func, mode, items in chunks:
            try:
                out.append((True, _values(func, mode, items)))
            except Exception as err:  # noqa: BLE001 - this chunk's result raises it; the others stand
                name = getattr(func, "__qualname__", type(func).__name__)
                out.append((False, error_payload(err, name, os.getpid(), skip_frames=2).data))
        return out


def _values(func: Callable, mode: str, items: list) -> list:
    if mode == "one":
        return [func(item) for item in items]
    if mode == "star":
        return [func(*item) for item in items]
    return [func(*args, **kwargs) for args, kwargs in items]


class Pool:
    """``Pool(processes=None, initializer=None, initargs=(), maxtasksperchild=None,
    context=None, ray_address=None, ray_remote_args=None)``.

    ``processes`` defaults to meshrt's CPU count (the runtime starts with that many
    when it is not running yet). ``context`` is accepted and ignored (meshrt starts its
    processes its own way), as in Ray. Use it as ``with Pool() as pool:`` (which
    terminates it at the end, as multiprocessing does) or ``close()`` then ``join()``.
    """

    def __init__(self, processes: int | None = None, initializer: Callable | None = None,
                 initargs: Iterable | None = None, maxtasksperchild: int | None = None, context: Any = None,
                 ray_address: str | None = None, ray_remote_args: dict | None = None) -> None:
        if processes is not None and (isinstance(processes, bool) or not isinstance(processes, int)
                                      or processes < 1):
            raise ValueError(f"Pool(processes=...): give a number of processes >= 1, or None; got {processes!r}")
        if initializer is not None and not callable(initializer):
            raise TypeError(f"Pool(initializer=...): give a function, or None; got {initializer!r}")
        if maxtasksperchild is not None and (isinstance(maxtasksperchild, bool)
                                             or not isinstance(maxtasksperchild, int) or maxtasksperchild < 1):
            raise ValueError(f"Pool(maxtasksperchild=...): give a number >= 1, or None; got {maxtasksperchild!r}")
        if ray_address not in (None, "local", "auto"):
            raise ValueError(f"Pool(ray_address={ray_address!r}): give None (or 'local') to run a cluster in this "
                             f"program, or 'auto' to attach to this host's long-running head (meshrt start --head)")
        if context is not None:
            log.warning("meshrt: Pool(context=...) is ignored: meshrt starts the pool's processes itself")
        options = {"num_cpus": 1, **(ray_remote_args or {})}
        processes = _sized(processes, options, ray_address)
        initargs = tuple(initargs or ())
        worker_class = api.ActorClass(_PoolWorker, options)
        self._processes = processes
        self._state = "running"
        self._dispatcher = Dispatcher(lambda: worker_class.remote(initializer, initargs), processes, maxtasksperchild)
        self._finalizer = weakref.finalize(self, self._dispatcher.terminate)
        # The pool's processes are up, and an initializer that raises says so here.
        try:
            toplevel.get([w.actor.ready.remote() for w in self._dispatcher.workers])
        except BaseException as err:
            self.terminate()
            if isinstance(err, exceptions.RayActorError) and err.creation_error is not None:
                raise err.creation_error from None  # (the initializer's own error, with its remote traceback)
            raise

    # -- one call ---------------------------------------------------------------------------------

    def apply(self, func: Callable, args: tuple = (), kwds: dict | None = None) -> Any:
        """``func(*args, **kwds)`` in a pool process; its result."""
        return self.apply_async(func, args, kwds).get()

    def apply_async(self, func: Callable, args: tuple = (), kwds: dict | None = None, callback: Callable | None = None,
                    error_callback: Callable | None = None) -> AsyncResult:
        self._check(func, "apply_async")
        if not isinstance(args, (tuple, list)):
            raise TypeError(f"apply_async(func, args=...): give the arguments as a tuple; got {type(args).__name__}")
        if kwds is not None and not isinstance(kwds, dict):
            raise TypeError(f"apply_async(func, kwds=...): give the keyword arguments as a dict; got "
                            f"{type(kwds).__name__}")
        result = AsyncResult(True, callback, error_callback)
        self._dispatcher.submit(Job(func, "apply", [[(tuple(args), dict(kwds or {}))]], result))
        return result

    # -- many calls -------------------------------------------------------------------------------

    def map(self, func: Callable, iterable: Iterable, chunksize: int | None = None) -> list:
        """``[func(x) for x in iterable]``, in chunks across the pool's processes."""
        return self.map_async(func, iterable, chunksize).get()

    def map_async(self, func: Callable, iterable: Iterable, chunksize: int | None = None,
                  callback: Callable | None = None, error_callback: Callable | None = None) -> AsyncResult:
        return self._map("map_async", func, iterable, chunksize, callback, error_callback, "one")

    def starmap(self, func: Callable, iterable: Iterable, chunksize: int | None = None) -> list:
        """``[func(*args) for args in iterable]``."""
        return self.starmap_async(func, iterable, chunksize).get()

    def starmap_async(self, func: Callable, iterable: Iterable, chunksize: int | None = None,
                      callback: Callable | None = None, error_callback: Callable | None = None) -> AsyncResult:
        return self._map("starmap_async", func, iterable, chunksize, callback, error_callback, "star")

    def imap(self, func: Callable, iterable: Iterable, chunksize: int = 1) -> IMapIterator:
        """Results in input order, as they are ready; ``iterable`` is read as the
        pool's processes free up."""
        return self._imap("imap", func, iterable, chunksize, ordered=True)

    def imap_unordered(self, func: Callable, iterable: Iterable, chunksize: int = 1) -> IMapIterator:
        """Results in the order they finish."""
        return self._imap("imap_unordered", func, iterable, chunksize, ordered=False)

    def _map(self, call: str, func, iterable, chunksize, callback, error_callback, mode: str) -> AsyncResult:
        self._check(func, call)
        items = _listed(iterable, call)
        if chunksize is None:  # (multiprocessing's rule: about four chunks per process)
            chunksize, extra = divmod(len(items), self._processes * 4)
            chunksize = max(1, chunksize + (1 if extra else 0))
        _check_chunksize(chunksize, call)
        result = AsyncResult(False, callback, error_callback)
        chunks = [items[i:i + chunksize] for i in range(0, len(items), chunksize)]
        self._dispatcher.submit(Job(func, mode, chunks, result))
        return result

    def _imap(self, call: str, func, iterable, chunksize, ordered: bool) -> IMapIterator:
        self._check(func, call)
        _check_chunksize(chunksize, call)
        try:
            source = iter(iterable)
        except TypeError:
            raise TypeError(f"{call}(func, iterable): {type(iterable).__name__} is not iterable") from None
        result = IMapIterator(ordered)
        self._dispatcher.submit(Job(func, "one", _chunked(source, chunksize), result))
        return result

    # -- the pool's life --------------------------------------------------------------------------

    def close(self) -> None:
        """Take no more work; the processes exit once the work given so far is done."""
        if self._state == "running":
            self._state = "closed"
            self._dispatcher.close()

    def terminate(self) -> None:
        """Stop the processes now (returns once they are stopped); work not finished
        fails with PoolTerminated."""
        if self._state != "terminated":
            self._state = "terminated"
            self._finalizer.detach()
            self._dispatcher.terminate()
        self._dispatcher.join(_STOP_WAIT_S)

    def join(self, timeout: float | None = None) -> None:
        """After close() or terminate(): wait until the processes have exited."""
        if self._state == "running":
            raise ValueError("Pool.join(): the pool is still running; call close() or terminate() first")
        if not self._dispatcher.join(timeout):
            raise TimeoutError(f"Pool.join(): the pool's work did not finish within {timeout} s")

    def __enter__(self) -> Pool:
        if self._state != "running":
            raise ValueError("Pool: this pool is no longer running; make a new one")
        return self

    def __exit__(self, *exc_info) -> None:
        self.terminate()

    def __repr__(self) -> str:
        return f"<meshrt Pool {self._state}, {self._processes} processes>"

    def _check(self, func, call: str) -> None:
        if self._state != "running":
            raise ValueError(f"Pool.{call}(): the pool is {self._state}; make a new Pool")
        if not callable(func):
            raise TypeError(f"Pool.{call}(func, ...): func must be callable, got {type(func).__name__}")


def _sized(processes: int | None, options: dict, address: str | None = None) -> int:
    """The pool's size; the runtime is started first if it is not running (with
    ``processes`` CPUs when given, as Ray's Pool does; ``address="auto"``: attached to
    this host's long-running head instead)."""
    from ..._private import driver

    if not driver.is_initialized():
        if address == "auto":
            driver.init(address="auto")
        else:
            driver.init(num_cpus=processes) if processes is not None else driver.init()
    cpus = toplevel.cluster_resources().get("CPU", 0)
    per_process = options.get("num_cpus", 1) or 0
    if processes is None:
        processes = max(1, int(cpus // per_process)) if per_process else max(1, int(cpus))
    if processes * per_process > cpus + 1e-9:
        raise ValueError(f"Pool(processes={processes}) needs {processes * per_process:g} CPUs ({per_process:g} per "
                         f"process) but meshrt has {cpus:g}; ask for fewer processes, or fewer CPUs each with "
                         f"ray_remote_args={{'num_cpus': {cpus / processes:.2g}}}")
    return processes


def _listed(iterable: Iterable, call: str) -> list:
    try:
        return list(iterable)
    except TypeError:
        raise TypeError(f"{call}(func, iterable): {type(iterable).__name__} is not iterable") from None


def _check_chunksize(chunksize: Any, call: str) -> None:
    if isinstance(chunksize, bool) or not isinstance(chunksize, int) or chunksize < 1:
        raise ValueError(f"{call}(..., chunksize=...): give a number of items >= 1; got {chunksize!r}")


def _chunked(source, chunksize: int):
    while True:
        chunk = list(itertools.islice(source, chunksize))
        if not chunk:
            return
        yield chunk

"""Placement decisions as a pure function of state: no sockets, no processes.

The controller feeds events in (a task was submitted, a worker became idle, ...)
and calls :meth:`Scheduler.schedule`, which returns what to do: place an actor,
give a task to an idle worker, or start more workers. Tests drive it directly.

Tasks wait in queues, one per resource shape, so a task that does not fit never
blocks a smaller one behind it of another shape; within a shape the most deeply
nested tasks go first (depth_queue.py), then FIFO. Pool workers are keyed by
the GPUs they were started with (``CUDA_VISIBLE_DEVICES`` is fixed before a worker
imports anything), so a task only lands on a worker that sees the right devices.
"""

from __future__ import annotations

from dataclasses import dataclass

from .depth_queue import DepthQueue
from .resources import Allocation, NodeResources

Units = tuple  # ((name, units), ...)
PoolKey = tuple  # GPU ids a pool worker was started with (() for CPU-only), then its environment's name, if any

# A task whose runtime_env installs packages runs in their environment (pip_envs.py): its
# units carry a zero-amount resource naming it, so it queues apart and its workers form
# a pool of their own.
ENV_RESOURCE = "runtime_env:"


def env_units(key: str) -> tuple:
    return ((ENV_RESOURCE + key, 0),)


def env_of(units: tuple) -> str:
    """The name of the environment these units ask for ('' for none)."""
    return next((name[len(ENV_RESOURCE):] for name, _ in units if name.startswith(ENV_RESOURCE)), "")


def pool_key(units: tuple, gpu_ids: tuple) -> PoolKey:
    env = next((name for name, _ in units if name.startswith(ENV_RESOURCE)), None)
    return gpu_ids if env is None else (*gpu_ids, env)


def split_pool_key(key: PoolKey) -> tuple[tuple, str]:
    """(GPU ids, environment name or '')."""
    env = next((k for k in key if isinstance(k, str)), "")
    return tuple(k for k in key if not isinstance(k, str)), env[len(ENV_RESOURCE):]


@dataclass(frozen=True)
class PlaceActor:
    actor_id: int
    alloc: Allocation


@dataclass(frozen=True)
class Dispatch:
    task_id: int
    worker_id: int
    alloc: Allocation


@dataclass(frozen=True)
class StartWorkers:
    pool_key: PoolKey
    count: int


class Scheduler:
    def __init__(self, node: NodeResources, max_starting: int | None = None) -> None:
        self.node = node
        # Workers of one pool starting at once: tasks that ask for no CPU always fit,
        # and must not fork a process each; the pool grows a few workers at a time.
        cpus = node.total.get("CPU", 0) // 10_000
        self.max_starting = max_starting if max_starting is not None else max(2, cpus)
        self.tasks: dict[Units, DepthQueue] = {}
        self.task_units: dict[int, tuple] = {}  # queued task -> (units, depth)
        self.actors: dict[int, Units] = {}  # insertion order = FIFO
        self.idle: dict[PoolKey, list[int]] = {}
        self.starting: dict[PoolKey, int] = {}

    # -- events ------------------------------------------------------------------------

    def submit_task(self, task_id: int, units: Units, depth: int = 0) -> None:
        """``depth``: how deeply nested the task is (0: submitted by the driver)."""
        self.tasks.setdefault(units, DepthQueue()).append(task_id, depth)
        self.task_units[task_id] = (units, depth)

    def remove_task(self, task_id: int) -> bool:
        """Drop a queued task (cancel); False if it is not queued any more."""
        queued = self.task_units.pop(task_id, None)
        if queued is None:
            return False
        units, depth = queued
        queue = self.tasks.get(units)
        if queue is not None:
            try:
                queue.remove(task_id, depth)
            except ValueError:
                return False
            if not queue:
                del self.tasks[units]
        return True

    def submit_actor(self, actor_id: int, units: Units) -> None:
        self.actors[actor_id] = units

    def remove_actor(self, actor_id: int) -> bool:
        return self.actors.pop(actor_id, None) is not None

    def worker_starting(self, key: PoolKey, count: int = 1) -> None:
        self.starting[key] = self.starting.get(key, 0) + count

    def worker_started(self, key: PoolKey) -> None:
        left = self.starting.get(key, 0) - 1
        if left > 0:
            self.starting[key] = left
        else:
            self.starting.pop(key, None)

    def worker_idle(self, worker_id: int, key: PoolKey) -> None:
        self.idle.setdefault(key, []).append(worker_id)

    def worker_busy_or_gone(self, worker_id: int, key: PoolKey) -> None:
        workers = self.idle.get(key)
        if workers and worker_id in workers:
            workers.remove(worker_id)

    def queued_tasks(self) -> int:
        return sum(len(q) for q in self.tasks.values())

    # -- pipelining ----------------------------------------------------------------------

    def pipeline_share(self, units: Units, depth: int, busy_slots: int, workers: int) -> int:
        """How many more tasks of this shape a busy worker may queue behind its current one.

        Only when the queue is longer than the workers can take one at a time: a short
        queue never waits behind someone else's task, a long one saves a round trip to
        the controller per task. ``busy_slots`` is what the worker already holds.
        """
        queue = self.tasks.get(units)
        if not queue or workers <= 0:
            return 0
        share = len(queue) // workers
        return max(0, min(depth - busy_slots, share))

    def take(self, units: Units, count: int) -> list[int]:
        """Pop up to ``count`` queued tasks of this shape (for a worker that already holds it)."""
        queue = self.tasks.get(units)
        taken = []
        while queue and len(taken) < count:
            task_id = queue.popleft()
            del self.task_units[task_id]
            taken.append(task_id)
        if queue is not None and not queue:
            del self.tasks[units]
        return taken

    def requeue_front(self, task_ids: list[int], units: Units, depths: list[int] | None = None) -> None:
        """Tasks handed back unstarted go to the head of their level, in their order."""
        queue = self.tasks.setdefault(units, DepthQueue())
        depths = depths if depths is not None else [0] * len(task_ids)
        for task_id, depth in zip(reversed(task_ids), reversed(depths), strict=True):
            queue.appendleft(task_id, depth)
            self.task_units[task_id] = (units, depth)

    # -- decisions -----------------------------------------------------------------------

    def schedule(self) -> list:
        node = self.node
        actions: list = []
        for actor_id, units in list(self.actors.items()):
            alloc = node.try_acquire(units)
            if alloc is not None:
                del self.actors[actor_id]
                actions.append(PlaceActor(actor_id, alloc))

        tentative: list[Allocation] = []
        need: dict[PoolKey, int] = {}
        for units, queue in list(self.tasks.items()):
            while queue:
                alloc = node.try_acquire(units)
                if alloc is None:
                    break
                key = pool_key(units, alloc.gpu_ids)
                workers = self.idle.get(key)
                if workers:
                    task_id = queue.popleft()
                    del self.task_units[task_id]
                    actions.append(Dispatch(task_id, workers.pop(), alloc))
                    continue
                # No idle worker: count how many more of these could run right now.
                tentative.append(alloc)
                need[key] = need.get(key, 0) + 1
                for _ in range(len(queue) - 1):
                    more = node.try_acquire(units)
                    if more is None:
                        break
                    tentative.append(more)
                    more_key = pool_key(units, more.gpu_ids)
                    need[more_key] = need.get(more_key, 0) + 1
                break
            if not queue:
                del self.tasks[units]
        for alloc in tentative:
            node.release(alloc)
        for key, count in need.items():
            starting = self.starting.get(key, 0)
            extra = min(count, self.max_starting) - starting
            if extra > 0:
                actions.append(StartWorkers(key, extra))
        return actions

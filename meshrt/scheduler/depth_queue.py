"""The queued tasks of one resource shape: the most deeply nested first.

A task blocked in ``get()`` hands its CPU back so that the work it waits on can
run. If that freed CPU went to the next task in plain FIFO order, a driver that
submitted many tasks which each ``get()`` a subtask would start all of them first
(each blocking, each holding a process), and their subtasks only after: hundreds
of processes. Serving the deepest nesting level first (a task submitted from a
task at depth d is at depth d + 1; the driver's are at 0) runs subtasks before
new top-level work, so the number of blocked tasks stays near the recursion depth
times the CPUs. Within a level, FIFO.
"""

from __future__ import annotations

import collections


class DepthQueue:
    __slots__ = ("_levels", "_count")

    def __init__(self) -> None:
        self._levels: dict[int, collections.deque] = {}
        self._count = 0

    def append(self, task_id: int, depth: int) -> None:
        self._levels.setdefault(depth, collections.deque()).append(task_id)
        self._count += 1

    def appendleft(self, task_id: int, depth: int) -> None:
        self._levels.setdefault(depth, collections.deque()).appendleft(task_id)
        self._count += 1

    def popleft(self) -> int:
        """The oldest task of the deepest level (IndexError when empty)."""
        if not self._levels:
            raise IndexError("pop from an empty DepthQueue")
        depth = max(self._levels)
        level = self._levels[depth]
        task_id = level.popleft()
        if not level:
            del self._levels[depth]
        self._count -= 1
        return task_id

    def remove(self, task_id: int, depth: int) -> None:
        """Drop a queued task (ValueError if it is not queued at that depth)."""
        level = self._levels.get(depth)
        if level is None:
            raise ValueError(task_id)
        level.remove(task_id)
        if not level:
            del self._levels[depth]
        self._count -= 1

    def __iter__(self):
        """The queued tasks in the order ``popleft`` takes them."""
        for depth in sorted(self._levels, reverse=True):
            yield from self._levels[depth]

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

"""One call thread per set of processes, shared by every Trainer on them.

A trainer's calls (bring-up, steps, state dicts) are collective: every process must
run them in the same order. One trainer sends them one at a time from one thread.
Two trainers on the same mesh, each with its own thread, would race: one process
could start the second trainer's process-group set-up while its peer is still in the
first trainer's, and both would wait forever. So the thread belongs to the processes,
not the trainer; it ends after a few idle seconds and is made again when needed.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading

_IDLE_S = 5.0
_lanes: dict[tuple, Lane] = {}
_lock = threading.Lock()


class Lane:
    def __init__(self, key: tuple) -> None:
        self.key = key
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="meshrt-trainer", daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                job = self.jobs.get(timeout=_IDLE_S)
            except queue.Empty:
                with _lock:  # submit() puts under this lock: empty here means no one is adding
                    if self.jobs.empty():
                        del _lanes[self.key]
                        return
                continue
            fn, args, cf = job
            if not cf.set_running_or_notify_cancel():
                continue
            try:
                cf.set_result(fn(*args))
            except BaseException as err:  # noqa: BLE001 - delivered to the caller
                cf.set_exception(err)


def key_of(mesh) -> tuple:
    """Which processes a mesh holds: meshes (and slices) over the same ones share a lane."""
    return tuple(sorted(id(mesh._procs[r]) for r in mesh._shape.ranks()))


def submit(key: tuple, fn, *args) -> concurrent.futures.Future:
    """Run ``fn(*args)`` on the call thread of the processes ``key`` names, after every
    call already submitted for them."""
    cf: concurrent.futures.Future = concurrent.futures.Future()
    with _lock:
        lane = _lanes.get(key)
        if lane is None:
            lane = _lanes[key] = Lane(key)
        lane.jobs.put((fn, args, cf))
    return cf

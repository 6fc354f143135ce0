"""Memory probes for benchmarks/objstore.py: the machine's memcpy bandwidth
(the reference the store's copies are judged against), this process's RSS
split and memory mappings, and how many bytes an object store holds.

Nothing in here imports the backend under test; StoreUsage is handed the
already imported module.
"""

from __future__ import annotations

import logging
import mmap
import re
import threading
import time

from _harness import log

perf = time.perf_counter
GB = 1e9


# ---------------------------------------------------------------------------
# Machine reference: memcpy bandwidth
# ---------------------------------------------------------------------------

def measure_memcpy(src, samples):
    """(1-thread GB/s samples, 2-thread GB/s samples) copying src into a
    pre-touched, page-aligned anonymous mapping."""
    import numpy as np

    n = src.nbytes
    mm = mmap.mmap(-1, n)
    try:
        dst = np.frombuffer(mm, dtype=src.dtype)
        dst.fill(0.0)                                   # touch every page first
        one, two = [], []
        np.copyto(dst, src)                             # warm-up
        for _ in range(samples):
            t0 = perf()
            np.copyto(dst, src)
            one.append(n / (perf() - t0) / GB)
        half = len(src) // 2
        parts = [(dst[:half], src[:half]), (dst[half:], src[half:])]
        for i in range(samples + 1):
            go = threading.Barrier(3)
            ts = [threading.Thread(target=_copy_after, args=(go, d, s)) for d, s in parts]
            for t in ts:
                t.start()
            go.wait()
            t0 = perf()
            for t in ts:
                t.join()
            dt = perf() - t0
            if i:                                       # first one is a warm-up
                two.append(n / dt / GB)
        if not np.array_equal(dst[:: 1 << 16], src[:: 1 << 16]):
            raise RuntimeError("memcpy check failed")
        del dst, parts
        return one, two
    finally:
        try:
            mm.close()
        except BufferError:     # a view still alive; the mapping goes with it
            pass


def _copy_after(barrier, dst, src):
    import numpy as np

    barrier.wait()
    np.copyto(dst, src)


# ---------------------------------------------------------------------------
# This process: memory and where an address lives
# ---------------------------------------------------------------------------

def driver_memory() -> dict[str, float]:
    """This process's RSS and its split (MiB), from /proc/self/status."""
    out = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                    out[k] = int(v.split()[0]) / 1024.0
    except OSError:
        import psutil

        out["VmRSS"] = psutil.Process().memory_info().rss / 2**20
    return out


def mapping_of(addr: int) -> dict[str, str] | None:
    """The /proc/self/maps line that holds addr: {'perms', 'path'}."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                lo, hi = (int(h, 16) for h in parts[0].split("-"))
                if lo <= addr < hi:
                    return {"perms": parts[1], "path": parts[5].strip() if len(parts) > 5 else "",
                            "size_mib": round((hi - lo) / 2**20, 1)}
    except OSError:
        pass
    return None


def is_store_mapping(mp: dict[str, str] | None) -> bool:
    if not mp:
        return False
    path = mp["path"]
    return path.startswith("/memfd:") or path.startswith("/dev/shm") or "plasma" in path


# ---------------------------------------------------------------------------
# The object store's usage
# ---------------------------------------------------------------------------

class StoreUsage:
    """Bytes the object store holds right now, or None where the backend
    exposes nothing reliable.  capacity: the store size asked for, used for
    meshrt if cluster_resources() does not tell."""

    def __init__(self, ray, backend, capacity):
        self.ray = ray
        self.backend = backend
        self.how = None
        self._captured: list[str] = []
        if backend == "meshrt":
            self.how = "capacity - available_resources()['object_store_memory']"
            try:
                self.capacity = int(ray.cluster_resources()["object_store_memory"])
            except Exception:
                self.capacity = capacity
        else:
            try:
                self.cw = ray._private.worker.global_worker.core_worker
                self.logger = logging.getLogger("ray._raylet")
                if self.read() is not None:
                    self.how = "core_worker.log_plasma_usage(): bytes in use + bytes evictable"
            except Exception as e:
                log(f"  no plasma usage for Ray: {type(e).__name__}: {e}")
                self.how = None

    def read(self) -> int | None:
        if self.backend == "meshrt":
            return self.capacity - int(self.ray.available_resources()["object_store_memory"])
        if not hasattr(self, "cw"):
            return None
        cap = self._captured

        class _Grab(logging.Filter):
            def filter(self, record):
                msg = record.getMessage()
                if "Plasma Store Usage" in msg:
                    cap.append(msg)
                    return False        # swallow it: not for the console
                return True

        flt = _Grab()
        self.logger.addFilter(flt)
        try:
            cap.clear()
            self.cw.log_plasma_usage()
        finally:
            self.logger.removeFilter(flt)
        if not cap:
            return None
        text = cap[-1]
        got = {k: int(v) for k, v in re.findall(r"bytes (in use|evictable|unsealed): (\d+)", text)}
        if "in use" not in got:
            return None
        return got["in use"] + got.get("evictable", 0)

"""Process helpers: children that cannot outlive their parent; which machine this is."""

from __future__ import annotations

import functools
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL us when our parent dies; exit now if it already has.

    Linux only (prctl); elsewhere workers notice the closed controller connection.
    """
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # parent died before prctl took effect
        os._exit(1)


def freeze_imports_out_of_gc() -> None:
    """Move every object alive now (mostly imported modules) out of the cyclic GC.

    With torch imported a process holds ~150k long-lived objects, and each full
    collection rescans them all: ~100 ms, which a burst of calls triggers every few
    thousand messages (measured: pipelined calls fell from ~20k/s to ~6k/s).
    Frozen objects are still freed by reference counting; only cycles among them are
    never collected, the cost CPython's docs accept for this ("gc.freeze").
    Before a fork it also keeps the child's collections off the parent's pages.
    ``MESHRT_GC_FREEZE=0`` turns it off.
    """
    if os.environ.get("MESHRT_GC_FREEZE") != "0":
        import gc

        gc.freeze()


def raise_open_file_limit(target: int = 65536) -> None:
    """Raise the soft limit on open files towards the hard one: every connection holds
    two descriptors (the event loop's and the duplicate other threads write through),
    so a driver talking to a few hundred processes would pass the usual 1024."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = target if hard == resource.RLIM_INFINITY else min(hard, target)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ImportError, ValueError, OSError):  # not POSIX, or not allowed: keep the limit
        pass


@functools.cache
def machine_id() -> str:
    """Same value in every process of one booted machine: CUDA IPC and cross-memory
    attach need that. (Read once: it is asked on every transfer.)"""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    try:  # containers sharing a kernel and a name still cannot attach to each other
        pid_ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        pid_ns = 0
    return f"{os.uname().nodename}/{boot}/{pid_ns}"

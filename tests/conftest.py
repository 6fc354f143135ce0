"""Shared fixtures: a runtime per test, and a check that nothing outlives it.

After every test the runtime is shut down and we verify that no child process,
socket or pipe file descriptor, or shared-memory segment was left behind.
"""

from __future__ import annotations

import functools
import glob
import os
import threading

import psutil
import pytest

import meshrt
from tests.helpers import wait_until

LEAK_DEADLINE_S = 5.0


@functools.cache
def _gpus() -> int:
    """Counted without loading CUDA here (torch.cuda.device_count() would, and workers
    forked after that ignore their CUDA_VISIBLE_DEVICES: see spawn._gpu_driver_started)."""
    from meshrt._private.gpus import detect_gpu_count

    return detect_gpu_count()


def pytest_collection_modifyitems(config, items):
    """``gpu`` tests run where a CUDA GPU is (``pytest -m gpu`` selects only them), last.

    Tests with hosts in network namespaces run first: UCX reads the routing table once
    per process (ucs/sys/netlink.c keeps it), so in a test process that has used UCX
    before the namespaces' interfaces existed, UCX would not route through them."""
    items.sort(key=lambda item: item.path.name != "test_multihost_netns.py")  # (stable)
    items.sort(key=lambda item: "gpu" in item.keywords)  # last: they start CUDA in this process
    if _gpus():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _fds() -> dict[str, int]:
    counts = {"socket": 0, "pipe": 0}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        for kind in counts:
            if target.startswith(kind + ":"):
                counts[kind] += 1
    return counts


def _live_children() -> list[psutil.Process]:
    alive = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.fixture(scope="session", autouse=True)
def serial_torch_in_this_process():
    """The test process runs torch ops between hundreds of inits. Kept serial, they
    start no OpenMP pool here, so every init may fork its zygote from this process
    (a pool would make each init start a fresh interpreter instead, see
    spawn._inherited_thread_pool_broken, which has a test of its own)."""
    try:
        import torch
    except ImportError:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def gpus_only_for_gpu_tests(request, monkeypatch):
    """On a GPU machine the other tests run as on a CPU one: their "gpus" dims are names
    for processes (more of them than the machine has GPUs), their collectives gloo's.
    (Nothing they run may start CUDA in this process: it would start seeing no GPU, and
    the gpu tests, which run last, would find none.)"""
    if _gpus() and "gpu" not in request.node.keywords:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


@pytest.fixture(scope="session", autouse=True)
def warm_process():
    """Start and stop one runtime first: uvloop creates a pipe pair once per process,
    which must not count as a leak of whichever test happens to run first."""
    meshrt.init(num_cpus=1)
    meshrt.shutdown()
    yield


@pytest.fixture(autouse=True)
def no_leaks():
    before = _fds() if os.path.isdir("/proc/self/fd") else None
    yield
    if meshrt.is_initialized():
        meshrt.shutdown()
    leaked = wait_until(lambda: not _live_children()) or _live_children()
    assert leaked is True or not leaked, f"processes outlived the test: {leaked}"
    assert not glob.glob("/dev/shm/meshrt*"), "shared-memory segments outlived the test"
    if before is not None:
        after = wait_until(lambda: all(_fds()[k] <= before[k] for k in before)) and _fds()
        after = after or _fds()
        for kind in before:
            assert after[kind] <= before[kind], f"{kind} fds leaked: {before[kind]} -> {after[kind]}"


@pytest.fixture
def rt():
    """A runtime with 2 CPUs (the size of this machine)."""
    meshrt.init(num_cpus=2)
    yield meshrt
    meshrt.shutdown()


@pytest.fixture
def rt4():
    meshrt.init(num_cpus=4)
    yield meshrt
    meshrt.shutdown()


@pytest.fixture
def failures(monkeypatch):
    """Replace the unhandled-fault hook; the test waits on the event it sets."""
    seen: list = []
    event = threading.Event()

    def hook(failure):
        seen.append(failure)
        event.set()

    monkeypatch.setattr(meshrt, "unhandled_fault_hook", hook)
    yield seen, event
    # A death reported late (a process the test killed) must still find this hook, not
    # the default one, which ends the test process: the runtime goes first.
    if meshrt.is_initialized():
        meshrt.shutdown()

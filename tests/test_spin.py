"""A lane's thread polls briefly for its next call before it sleeps (meshrt/_private/spin.py,
csrc/spin_poll.c): it must see a call or a wake-up at once, sleep once the window is over,
stop spinning on a lane called rarely, and be turned off by MESHRT_SPIN_US=0."""

from __future__ import annotations

import os
import threading

import pytest

import meshrt
from meshrt import _C, Actor, endpoint, this_host
from meshrt._private import spin

from .helpers import wait_until

needs_lanes = pytest.mark.skipif(os.environ.get("MESHRT_DIRECT_LANES") == "0" or not hasattr(os, "pidfd_open"),
                                 reason="direct lanes are off here")


class Where(Actor):
    @endpoint
    def where(self):
        return os.getpid(), threading.get_native_id()


def _thread_state(pid: int, tid: int) -> str:
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0]


def test_spin_poll_sees_a_readable_descriptor_and_gives_up_on_a_quiet_one():
    r, w = os.pipe()
    try:
        assert _C.spin_poll((r,), 50_000) is False
        os.write(w, b"x")
        assert _C.spin_poll([r, w], 10_000_000_000) is True  # (returns at once, not after 10 s)
        assert _C.spin_poll((), 1000) is False
    finally:
        os.close(r)
        os.close(w)


def test_spin_poll_refuses_bad_descriptors_lists():
    with pytest.raises(ValueError, match="at most 8"):
        _C.spin_poll(tuple(range(9)), 1000)
    with pytest.raises(TypeError):
        _C.spin_poll(("not a descriptor",), 1000)


def test_the_window_stays_whole_while_calls_keep_coming_and_shrinks_to_nothing_otherwise():
    window = spin.SpinWindow(200_000)
    window.slept(190_000)  # (woken within the window: a busy lane)
    assert window.ns == 200_000
    window.slept(5_000_000)
    assert window.ns == 100_000
    window.slept(5_000_000)
    assert window.ns == 50_000
    window.slept(5_000_000)
    assert window.ns == 0
    assert window.wait((0,)) is False  # (no window: straight to sleep)
    window.slept(150_000)  # busy again
    assert window.ns == 200_000


def test_the_window_comes_from_meshrt_spin_us(monkeypatch):
    monkeypatch.delenv("MESHRT_SPIN_US", raising=False)
    assert spin.limit_ns() == spin.DEFAULT_US * 1000
    monkeypatch.setenv("MESHRT_SPIN_US", "0")
    assert spin.limit_ns() == 0
    monkeypatch.setenv("MESHRT_SPIN_US", "12.5")
    assert spin.limit_ns() == 12_500
    for bad in ("fast", "-1", "nan", "inf"):
        monkeypatch.setenv("MESHRT_SPIN_US", bad)
        with pytest.raises(ValueError, match="MESHRT_SPIN_US"):
            spin.limit_ns()


def test_init_names_a_bad_meshrt_spin_us(monkeypatch):
    monkeypatch.setenv("MESHRT_SPIN_US", "soon")
    with pytest.raises(ValueError, match="MESHRT_SPIN_US='soon'"):
        meshrt.init(num_cpus=1)
    assert not meshrt.is_initialized()


@needs_lanes
async def test_a_busy_lane_s_thread_goes_to_sleep_once_calls_stop(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    mesh = procs.spawn("where", Where)
    for _ in range(50):  # (its lane: busy)
        pid, tid = await mesh.where.call_one()
    # The window is a fraction of a millisecond: then the thread sleeps (a wake-up it
    # spun into and did not read would keep it running).
    assert wait_until(lambda: _thread_state(pid, tid) == "S", 10)
    assert await mesh.where.call_one() == (pid, tid)
    await procs.stop()


@needs_lanes
def test_lanes_serve_with_spinning_off(monkeypatch):
    monkeypatch.setenv("MESHRT_SPIN_US", "0")  # (before init: the processes inherit it)
    meshrt.init(num_cpus=2)
    try:
        procs = this_host().spawn_procs(per_host={"gpus": 2})
        mesh = procs.spawn("where", Where)
        for _ in range(20):
            assert len(mesh.where.call().get(timeout=30)) == 2
        pid, tid = mesh.slice(gpus=0).where.call_one().get(timeout=30)
        assert wait_until(lambda: _thread_state(pid, tid) == "S", 10)
        procs.stop().get(timeout=60)
    finally:
        meshrt.shutdown()

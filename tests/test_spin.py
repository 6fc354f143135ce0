"""A lane's thread polls briefly for its next call before it sleeps (meshrt/_private/spin.py,
csrc/spin_poll.c): it must see a call or a wake-up at once, sleep once the window is over,
stop spinning on a lane called rarely, and be turned off by MESHRT_SPIN_US=0."""

from __future__ import annotations

import os
import queue
import socket
import threading

import pytest

import meshrt
from meshrt import _C, Actor, endpoint, this_host
from meshrt._private import spin
from meshrt._private.helper_thread import HelperThread

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


def test_spin_poll_says_which_descriptors_are_ready_and_gives_up_on_quiet_ones():
    r, w = os.pipe()
    r2, w2 = os.pipe()
    try:
        assert _C.spin_poll((r, r2), 50_000) == 0
        os.write(w2, b"x")
        assert _C.spin_poll([r, r2], 10_000_000_000) == 0b10  # (at once, not after 10 s)
        os.write(w, b"x")
        assert _C.spin_poll((r, r2), 1000) == 0b11
        assert _C.spin_poll((), 1000) == 0
        assert _C.spin_poll((r,), -5) == 1  # (a negative window: one look)
    finally:
        for fd in (r, w, r2, w2):
            os.close(fd)
    assert _C.spin_poll((r,), 1000) == 1  # a closed descriptor is "ready": the caller's read says why


def test_spin_poll_refuses_bad_descriptors_lists():
    with pytest.raises(ValueError, match="at most 8"):
        _C.spin_poll(tuple(range(9)), 1000)
    with pytest.raises(TypeError):
        _C.spin_poll(("not a descriptor",), 1000)
    for bad in (-1, 2**32 + 5):
        with pytest.raises(ValueError, match="not a descriptor"):
            _C.spin_poll((bad,), 1000)


def _run_helper_with_direct_socket(monkeypatch, window_us: str):
    """An actor's helper thread reading a socketpair, as a lane does (direct_lanes.py)."""
    monkeypatch.setenv("MESHRT_SPIN_US", window_us)
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    frames = queue.SimpleQueue()
    helper = HelperThread("spin-test")
    helper.attach_direct(mine, frames.put)
    return helper, theirs, frames


def test_a_lane_thread_spins_after_a_call_then_sleeps_and_sees_posts_meanwhile(monkeypatch):
    helper, theirs, frames = _run_helper_with_direct_socket(monkeypatch, "10000")  # (10 ms)
    try:
        tid = helper._thread.native_id
        theirs.send(b"one")
        assert frames.get(timeout=10) == b"one"
        assert helper._spin is not None and helper._spin.limit == 10_000_000
        posted = queue.SimpleQueue()
        for i in range(20):  # (each inside the window: the spin sees the wake-up, runs it, spins again)
            helper.post(posted.put, i)
            assert posted.get(timeout=10) == i
        theirs.send(b"two")
        assert frames.get(timeout=10) == b"two"
        # Spinning right after a call; asleep once the window is over (a wake-up it saw
        # and did not read would keep it running for good).
        assert wait_until(lambda: _thread_state(os.getpid(), tid) == "S", 10)
    finally:
        theirs.close()
        helper.shutdown(wait=True)


def test_a_lane_thread_with_spinning_off_goes_straight_to_sleep(monkeypatch):
    helper, theirs, frames = _run_helper_with_direct_socket(monkeypatch, "0")
    try:
        theirs.send(b"one")
        assert frames.get(timeout=10) == b"one"
        assert helper._spin is None
        assert wait_until(lambda: _thread_state(os.getpid(), helper._thread.native_id) == "S", 10)
    finally:
        theirs.close()
        helper.shutdown(wait=True)


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
    assert window.wait((0,)) == 0  # (no window: straight to sleep)
    window.slept(150_000)  # busy again
    assert window.ns == 200_000


def test_the_window_comes_from_meshrt_spin_us(monkeypatch):
    monkeypatch.delenv("MESHRT_SPIN_US", raising=False)
    assert spin.limit_ns() == spin.DEFAULT_US * 1000
    monkeypatch.setenv("MESHRT_SPIN_US", "0")
    assert spin.limit_ns() == 0
    monkeypatch.setenv("MESHRT_SPIN_US", "12.5")
    assert spin.limit_ns() == 12_500
    for bad in ("fast", "-1", "nan", "inf", "10001"):
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
    # The window is a millisecond: then the thread sleeps (a wake-up it spun into and
    # did not read would keep it running).
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

"""breakpoint() in a task or actor waits for `meshrt debug`, which attaches a terminal
(meshrt/util/rpdb.py, meshrt/_private/debug_client.py): real workers, the real
command, its input piped."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

import meshrt
from meshrt import Actor, current_rank, endpoint, this_host
from meshrt._private import debug_client, debug_sessions

from .helpers import wait_until

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def debug_dir(tmp_path, monkeypatch):
    """A private directory of breakpoints for this test (the workers inherit it)."""
    folder = tmp_path / "dbg"
    monkeypatch.setenv("MESHRT_DEBUG_DIR", str(folder))
    yield folder
    assert not glob.glob(str(folder / "*")), "a breakpoint's socket or record outlived its session"


def _waiting(folder) -> list:
    return glob.glob(str(folder / "*.json"))


def _debug(typed: str) -> str:
    """`meshrt debug` with ``typed`` as its terminal's input; its output."""
    done = subprocess.run([sys.executable, "-m", "meshrt", "debug"], input=typed, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@meshrt.remote
def add_one(x):
    y = x + 1
    breakpoint()
    return y


def test_a_task_at_a_breakpoint_waits_for_meshrt_debug_then_goes_on(debug_dir):
    meshrt.init(num_cpus=1)
    ref = add_one.remote(41)
    assert wait_until(lambda: _waiting(debug_dir), timeout=30)
    listed = _debug("")
    assert "add_one" in listed and "test_debugger.py:" in listed  # (the task, where it stopped)
    assert not meshrt.wait([ref], timeout=0)[0]  # (still waiting: listing does not attach)
    out = _debug("0\np y * 2\np x\nc\n")
    assert "84" in out and "41" in out
    assert meshrt.get(ref, timeout=30) == 42
    assert "No breakpoint waits" in _debug("")


class Trainer(Actor):
    @endpoint
    def step(self, n):
        loss = n * 10
        meshrt.util.pdb.set_trace()  # (Ray's explicit form)
        return loss


def test_a_mesh_endpoint_goes_on_when_the_terminal_closes(debug_dir):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    trainers = procs.spawn("trainers", Trainer)
    future = trainers.step.call_one(4)
    assert wait_until(lambda: _waiting(debug_dir), timeout=30)
    out = _debug("0\np loss\n")  # (then end of input: the terminal went away)
    assert "40" in out and "trainers.step" in out
    assert future.get(timeout=30) == 40
    procs.stop().get(timeout=30)


@meshrt.remote(max_retries=0)
def divide(a, b):
    ratio = a / b
    return ratio


def test_post_mortem_stops_a_failed_call_at_its_exception_before_the_caller_hears(debug_dir, monkeypatch):
    monkeypatch.setenv("MESHRT_DEBUG_POST_MORTEM", "1")
    meshrt.init(num_cpus=1)
    ref = divide.remote(7, 0)
    assert wait_until(lambda: _waiting(debug_dir), timeout=30)
    assert not meshrt.wait([ref], timeout=0)[0]
    listed = _debug("")
    assert "ZeroDivisionError" in listed
    assert "7" in _debug("0\np a\nc\n")
    with pytest.raises(ZeroDivisionError):
        meshrt.get(ref, timeout=30)


def test_pythonbreakpoint_0_turns_breakpoints_off_in_workers(debug_dir, monkeypatch):
    monkeypatch.setenv("PYTHONBREAKPOINT", "0")
    meshrt.init(num_cpus=1)
    assert meshrt.get(add_one.remote(1), timeout=30) == 2
    assert not _waiting(debug_dir)


def test_a_directory_others_may_open_or_a_link_is_refused_naming_it(tmp_path, monkeypatch):
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    monkeypatch.setenv("MESHRT_DEBUG_DIR", str(folder))
    meshrt.init(num_cpus=1)
    with pytest.raises(RuntimeError, match="chmod 700"):
        meshrt.get(add_one.remote(1), timeout=30)
    done = subprocess.run([sys.executable, "-m", "meshrt", "debug"], input="", capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and str(folder) in done.stderr
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(private)
    monkeypatch.setenv("MESHRT_DEBUG_DIR", str(tmp_path / "link"))
    with pytest.raises(RuntimeError, match="not a link"):
        debug_sessions.directory()


@meshrt.remote
def count_to(n):
    total = 0
    breakpoint()
    for i in range(n):
        total += i  # (the line a session's `b` stops at)
    return total


def test_a_session_ends_with_its_call_even_when_a_breakpoint_it_set_is_not_reached_again(debug_dir):
    meshrt.init(num_cpus=1)
    ref = count_to.remote(1)
    assert wait_until(lambda: _waiting(debug_dir), timeout=30)
    line = count_to._function.__code__.co_firstlineno + 4
    out = _debug(f"0\nb {line}\nc\nc\nlist\n")
    assert "the call returned: this session is over" in out
    assert meshrt.get(ref, timeout=30) == 0
    assert "No breakpoint waits" in out.rsplit("meshrt debug>", 2)[-2]  # (the list after it)


def test_pdbs_questions_and_prints_reach_the_terminal_and_a_cancel_ends_the_call(debug_dir):
    meshrt.init(num_cpus=1)
    ref = count_to.remote(2)
    assert wait_until(lambda: _waiting(debug_dir), timeout=30)
    line = count_to._function.__code__.co_firstlineno + 4
    client = subprocess.Popen([sys.executable, "-m", "meshrt", "debug"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    client.stdin.write(f"0\nb {line}\ncl\ny\np print('seen', n)\n")
    client.stdin.flush()
    seen = []
    for text in client.stdout:  # (until the last command's answer: the terminal is attached)
        seen.append(text)
        if "seen 2" in text:
            break
    meshrt.cancel(ref)
    with pytest.raises(meshrt.exceptions.TaskCancelledError):
        meshrt.get(ref, timeout=30)
    out = "".join(seen) + client.communicate(timeout=60)[0]
    assert "Clear all breaks? " in out and "Deleted breakpoint 1" in out
    assert "(the call was cancelled)" in out


def test_pythonbreakpoint_in_a_tasks_env_vars_is_read_when_it_is_hit(debug_dir):
    meshrt.init(num_cpus=1)
    quiet = add_one.options(runtime_env={"env_vars": {"PYTHONBREAKPOINT": "0"}})
    assert meshrt.get(quiet.remote(1), timeout=30) == 2


def test_a_record_left_by_a_killed_worker_is_not_listed(debug_dir):
    meshrt.init(num_cpus=1)
    ref = add_one.remote(1)
    assert wait_until(lambda: _waiting(debug_dir), timeout=30)
    meshrt.cancel(ref, force=True)  # (kills the worker as it waits)
    with pytest.raises(meshrt.exceptions.TaskCancelledError):
        meshrt.get(ref, timeout=30)
    assert wait_until(lambda: not debug_sessions.waiting(), timeout=30)  # (once the process is gone)
    assert "No breakpoint waits" in _debug("")
    assert not glob.glob(str(debug_dir / "*"))


class Ranked(Actor):
    @endpoint
    def step(self, n):
        loss = current_rank().rank * 10 + n
        breakpoint()
        return loss


def test_cast_asks_many_ranks_at_once_and_continue_lets_them_all_go(debug_dir):
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    trainers = procs.spawn("trainers", Ranked)
    future = trainers.step.call(1)
    assert wait_until(lambda: len(_waiting(debug_dir)) == 3, timeout=30)
    out = _debug("cast trainers ranks(0:3) p loss\n"
                 "cast trainers ranks(gpus=(0,2)) p loss * 2\n"
                 "cast trainers ranks(7) p loss\n"
                 "attach trainers 1\np loss + 100\nc\n"
                 "list\ncontinue\n")
    assert "[trainers 0] 1\n[trainers 1] 11\n[trainers 2] 21\n" in out
    assert "[trainers 0] 2\n[trainers 2] 42\n" in out
    assert "No breakpoint of trainers ranks(7)" in out
    assert "111" in out  # (rank 1, attached: its own session, then it went on)
    assert "2 breakpoint(s) went on." in out
    assert list(future.get(timeout=30).values()) == [1, 11, 21]
    procs.stop().get(timeout=30)


def test_ranks_are_read_as_monarch_writes_them():
    pick = debug_client.parse_ranks
    assert [r for r in range(8) if pick("0:8:2")(r, {})] == [0, 2, 4, 6]
    assert [r for r in range(8) if pick("1,3")(r, {})] == [1, 3]
    assert pick("gpus=1, hosts=0:2")(5, {"hosts": 1, "gpus": 1})
    assert not pick("gpus=(0,2)")(1, {"gpus": 1})
    with pytest.raises(ValueError, match="give a rank"):
        pick("x")

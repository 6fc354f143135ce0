"""init/shutdown, and no worker outliving its driver however the driver ends."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import warnings

import psutil
import pytest

import meshrt
from tests.helpers import run_python, wait_until


@meshrt.remote
def one():
    return 1


def test_init_twice_raises_unless_told(rt):
    with pytest.raises(RuntimeError, match="ignore_reinit_error"):
        meshrt.init()
    info = meshrt.init(ignore_reinit_error=True)
    assert info["node_id"]


def test_shutdown_then_init_again():
    for _ in range(3):
        meshrt.init(num_cpus=1)
        assert meshrt.get(one.remote()) == 1
        meshrt.shutdown()
        assert not meshrt.is_initialized()


@meshrt.remote
def shuts_down():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        meshrt.shutdown()
    return [str(w.message) for w in caught]


def test_shutdown_inside_a_task_does_nothing_and_says_so(rt):
    assert meshrt.get(shuts_down.remote(), timeout=60) == [
        "meshrt.shutdown() inside a task or actor does nothing: the runtime is its driver's to shut down"]
    assert meshrt.get([shuts_down.remote(), one.remote()], timeout=60)[1] == 1  # (its worker serves on)


def test_a_driver_that_listens_says_so_and_returns_ray_s_context_fields(caplog):
    with caplog.at_level(logging.WARNING, logger="meshrt"):
        info = meshrt.init(address="127.0.0.1:0", num_cpus=1)
    try:
        assert (f"this driver is the cluster's head, listening there for other hosts (`meshrt agent --address "
                f"{info.tcp_address}`)") in caplog.text  # (Ray's address= attaches: this one did not)
        assert info.dashboard_url is None and info.address_info["tcp_address"] == info.tcp_address
    finally:
        info.disconnect()
    assert not meshrt.is_initialized()


@meshrt.remote
class Holder:
    def value(self):
        return 1


def test_a_handle_from_before_shutdown_fails_at_once():
    meshrt.init(num_cpus=1)
    stale = Holder.remote()
    kept = Holder.options(name="kept").remote()  # noqa: F841 - (what keeps the actor)
    named = meshrt.get_actor("kept")  # (a handle without a ref of its own)
    assert meshrt.get([stale.value.remote(), named.value.remote()]) == [1, 1]
    meshrt.shutdown()
    meshrt.init(num_cpus=1)
    try:
        for handle in (stale, named):
            with pytest.raises(meshrt.exceptions.ActorDiedError, match="made before meshrt.shutdown"):
                handle.value.remote()  # (it waited for an actor that never comes)
        assert meshrt.get(Holder.remote().value.remote()) == 1
    finally:
        meshrt.shutdown()


def test_auto_init_on_first_use():
    assert not meshrt.is_initialized()
    assert meshrt.get(one.remote()) == 1
    assert meshrt.is_initialized()
    meshrt.shutdown()


def test_unknown_init_argument_is_named():
    with pytest.raises(TypeError, match="num_cpu"):
        meshrt.init(num_cpu=2)


DRIVER = textwrap.dedent(
    """
    import os, signal, sys, time, meshrt
    # Ctrl-C as in a terminal: a test run started in the background (`cmd &` in a script)
    # hands its children SIGINT ignored, and Python then installs no KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    meshrt.init(num_cpus=2)

    @meshrt.remote
    class Sleeper:
        def pid(self):
            return os.getpid()

    @meshrt.remote
    def pid():
        return os.getpid()

    actors = [Sleeper.remote() for _ in range(2)]
    pids = meshrt.get([a.pid.remote() for a in actors] + [pid.remote()])
    print("PIDS", *pids, flush=True)
    sys.stdin.readline()  # the test says when to leave
    sys.exit(0)
    """
)


def _run_driver(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("PIDS"), line
    descendants = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    return proc, [int(x) for x in line.split()[1:]], descendants


def _all_gone(pids):
    return wait_until(lambda: not any(_alive(p) for p in pids), timeout=10)


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("mode", ["exit", "sigint", "sigkill", "sigterm"])
def test_no_worker_outlives_the_driver(tmp_path, mode):
    proc, pids, descendants = _run_driver(tmp_path)
    try:
        assert set(pids) <= set(descendants) and len(descendants) >= 4  # + the zygote
        if mode == "exit":
            proc.stdin.write("go\n")
            proc.stdin.flush()
        elif mode == "sigint":
            proc.send_signal(signal.SIGINT)
        elif mode == "sigkill":
            proc.kill()
        elif mode == "sigterm":
            proc.terminate()
        proc.wait(30)
    finally:
        proc.stdin.close()
        proc.stdout.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _all_gone(descendants), [p for p in descendants if _alive(p)]


def test_local_mode_runs_in_the_driver_process():
    meshrt.init(local_mode=True)

    @meshrt.remote
    def where():
        return os.getpid()

    @meshrt.remote
    class Acc:
        def __init__(self):
            self.total = 0

        def add(self, x):
            self.total += x
            return self.total

        async def later(self):
            return self.total

    assert meshrt.get(where.remote()) == os.getpid()
    a = Acc.remote()
    assert meshrt.get([a.add.remote(1), a.add.remote(2)]) == [1, 3]
    assert meshrt.get(a.later.remote()) == 3
    assert meshrt.get(one.remote()) == 1
    with pytest.raises(ZeroDivisionError):
        meshrt.get(_zero.remote())
    values = list(meshrt.get(_halves.options(num_returns="dynamic").remote(3)))
    assert meshrt.get(values[:3]) == [0.0, 0.5, 1.0]
    with pytest.raises(ZeroDivisionError):
        meshrt.get(values[3])
    assert psutil.Process().children() == []
    meshrt.shutdown()


@meshrt.remote
def _zero():
    return 1 / 0


@meshrt.remote
def _halves(n):
    yield from (i / 2 for i in range(n))
    yield 1 / 0


def test_a_killed_zygote_is_replaced_and_work_continues(rt):
    from meshrt._private import state

    @meshrt.remote(max_retries=3)
    def square(x):
        return x * x

    assert meshrt.get(square.remote(3)) == 9
    controller = state.core().controller
    old = controller.zygote.proc
    old.kill()
    assert wait_until(lambda: controller.zygote.proc is not old, timeout=10)
    assert meshrt.get([square.remote(i) for i in range(8)], timeout=60) == [i * i for i in range(8)]


_LET_GO = """
import os, socket
from meshrt._private import spawn

r, w = os.pipe()
stale = socket.socket()  # one of the driver's objects, which may be collected in the copy
ours, theirs = socket.socketpair()
pid = os.fork()
if pid == 0:
    spawn._let_go_of_driver_files(theirs.fileno())
    taken = {w, r, stale.fileno()}
    ok = all(os.readlink(f"/proc/self/fd/{fd}") == "/dev/null" for fd in taken)
    new_r, new_w = os.pipe()  # a new file never gets a number an old object holds
    ok = ok and not {new_r, new_w} & taken
    stale.close()  # the old object closes its number: the new pipe is untouched
    os.write(new_w, b"x")
    ok = ok and os.read(new_r, 1) == b"x"
    theirs.send(b"ok" if ok else b"no")
    os._exit(0)
os.close(w)
theirs.close()
print(ours.recv(2).decode(), os.read(r, 1) == b"")  # the copy let go of the write end
os.waitpid(pid, 0)
"""


def test_the_zygote_lets_go_of_the_drivers_files_without_freeing_their_numbers():
    """A driver's object collected in its forked copy (the zygote) closes its old
    descriptor number: that number must not have been reused for a worker's file."""
    done = run_python(_LET_GO, 30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok", "True"]


_DRIVER_HOOKS = """
import atexit, os, sys
import meshrt
from tests.helpers import ended, wait_until

marks = sys.argv[1]
atexit.register(lambda: open(marks, "a").write(f"driver {os.getpid()}\\n"))
meshrt.init(num_cpus=1)
meshrt.shutdown()
meshrt.init(num_cpus=1)  # (its workers' zygote is forked from this process, handlers and all)

@meshrt.remote
class Ends:
    def __ray_shutdown__(self):
        open(marks, "a").write(f"actor {os.getpid()}\\n")

    def pid(self):
        return os.getpid()

actor = Ends.remote()
pid = meshrt.get(actor.pid.remote())
actor.__ray_terminate__.remote()
assert wait_until(lambda: ended(pid), 30)
print("PIDS", os.getpid(), pid)
"""


def test_an_actor_that_ends_runs_its_own_exit_hooks_not_the_drivers(tmp_path):
    marks = tmp_path / "marks.txt"
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = run_python(_DRIVER_HOOKS.replace("sys.argv[1]", repr(str(marks))), 60,
                      env=dict(os.environ, PYTHONPATH=repo))
    assert done.returncode == 0, done.stderr
    driver, actor = done.stdout.split("PIDS ")[1].split()
    assert sorted(marks.read_text().split("\n")) == ["", f"actor {actor}", f"driver {driver}"]
    assert "Exception ignored in atexit" not in done.stdout + done.stderr


_HOOKS_THAT_MISBEHAVE = """
import os, sys, tempfile, threading
import meshrt
from tests.helpers import ended, wait_until

kept = tempfile.TemporaryDirectory()  # (the driver's own finalizer: not its workers' to run)
meshrt.init(num_cpus=1)

@meshrt.remote
class Exits:
    def __init__(self):
        self.scratch = tempfile.TemporaryDirectory()  # (removed by its finalizer at a graceful end)

    def __ray_shutdown__(self):
        sys.exit(3)

    def where(self):
        return os.getpid(), self.scratch.name

    def quit(self):
        meshrt.actor.exit_actor()

@meshrt.remote
class Hangs:
    def __ray_shutdown__(self):
        threading.Event().wait()

    def pid(self):
        return os.getpid()

gone = ended

exits = Exits.remote()
pid, scratch = meshrt.get(exits.where.remote())
try:
    meshrt.get(exits.quit.remote(), timeout=30)
except meshrt.exceptions.ActorDiedError:
    print("QUIT ANSWERED")
assert wait_until(lambda: gone(pid), 30)
print("SCRATCH REMOVED", not os.path.exists(scratch))
hangs = Hangs.remote()
pid = meshrt.get(hangs.pid.remote())
del hangs
print("HANGING HOOK ENDED", wait_until(lambda: gone(pid), 30))
print("DRIVER DIR KEPT", os.path.isdir(kept.name))
meshrt.shutdown()
"""


def test_exit_hooks_that_exit_or_hang_still_end_the_actor():
    """sys.exit() in __ray_shutdown__ ends the actor (its caller hears it died); a hook
    that hangs is cut off after MESHRT_ACTOR_SHUTDOWN_TIMEOUT_S; the actor's own
    finalizers run, the driver's do not."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=repo, MESHRT_ACTOR_SHUTDOWN_TIMEOUT_S="1")
    done = run_python(_HOOKS_THAT_MISBEHAVE, 90, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    for line in ("QUIT ANSWERED", "SCRATCH REMOVED True", "HANGING HOOK ENDED True", "DRIVER DIR KEPT True"):
        assert line in done.stdout, done.stdout + done.stderr

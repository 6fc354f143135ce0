"""Mesh failures: callers get ActorDiedError naming mesh and point; failures nobody
waits for reach ``__supervise__`` or ``meshrt.unhandled_fault_hook``; stop()."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

import meshrt
from meshrt import Actor, Channel, Point, endpoint, this_host

from .helpers import ended, wait_until


class Fragile(Actor):
    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def crash(self):
        os._exit(3)

    @endpoint
    def fail(self):
        raise ValueError("broadcast went wrong")

    @endpoint
    async def fail_async(self):
        raise KeyError("async broadcast went wrong")

    @endpoint
    def leave(self):
        meshrt.actor.exit_actor()

    @endpoint
    def ok(self):
        return "ok"

    @endpoint
    def block(self, g):
        return meshrt.get(g.wait.remote(3600))  # (longer than any test runs)


async def within(future, seconds=30):
    """Await a mesh Future, failing the test instead of hanging."""

    async def wait():
        return await future

    return await asyncio.wait_for(wait(), seconds)


async def test_a_crash_during_a_call_names_mesh_point_and_exit(rt, failures):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("frag", Fragile)
    with pytest.raises(meshrt.exceptions.ActorDiedError) as info:
        await mesh.slice(gpus=1).crash.call_one()
    text = str(info.value)
    assert "mesh 'frag' at Point(gpus=1)" in text and "exited with code 3" in text
    # (Monarch's callers catch a SupervisionError, a RuntimeError: it is one too)
    assert isinstance(info.value, meshrt.SupervisionError) and isinstance(info.value, RuntimeError)
    with pytest.raises(meshrt.SupervisionError, match="mesh 'frag'"):  # (and a later call's too)
        await mesh.slice(gpus=1).ok.call_one()
    assert await mesh.slice(gpus=0).ok.call_one() == "ok"  # the rest keeps serving
    seen, event = failures
    assert event.wait(30)  # a caller saw it, and it is a supervision event all the same, as in Monarch
    assert [(f.mesh_name, f.point, "exited with code 3" in f.report()) for f in seen] == [
        ("frag", Point(1, procs.extent), True)]
    await procs.stop()


async def test_broadcast_failure_reaches_the_hook(rt, failures):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("frag", Fragile)
    seen, event = failures
    mesh.slice(gpus=1).fail.broadcast()
    assert await asyncio.to_thread(event.wait, 30)
    failure = seen[0]
    assert failure.mesh_name == "frag" and failure.rank == 1 and failure.endpoint == "frag.fail"
    assert "broadcast went wrong" in failure.report()
    await procs.stop()


@pytest.mark.parametrize("endpoint_name, error", [("fail", "ValueError"), ("fail_async", "KeyError")])
async def test_an_endpoint_raising_under_broadcast_fails_its_actor(rt, failures, endpoint_name, error):
    # As in Monarch: nobody could hear the error, so the actor fails (its later calls
    # raise); its neighbours serve on, and the failure is reported once.
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("frag", Fragile)
    seen, event = failures
    mesh.slice(gpus=1).endpoint(endpoint_name).broadcast()
    assert await asyncio.to_thread(event.wait, 30)
    with pytest.raises(meshrt.exceptions.MeshActorDiedError,
                       match=rf"'frag' at Point\(gpus=1\).*it failed: frag.{endpoint_name} raised {error}"):
        await mesh.slice(gpus=1).ok.call_one()
    assert await mesh.slice(gpus=0).ok.call_one() == "ok"
    assert [(f.rank, f.endpoint) for f in seen] == [(1, f"frag.{endpoint_name}")]
    await procs.stop()


async def test_a_death_is_reported_for_each_actor_mesh_that_had_an_actor_there(rt, failures):
    # As Monarch reports each actor that failed: by the actor mesh's name, at its own point.
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    whole = procs.spawn("whole", Fragile)
    part = procs.slice(gpus=slice(1, 3)).spawn("part", Fragile)
    elsewhere = procs.slice(gpus=0).spawn("elsewhere", Fragile)
    first = await elsewhere.pid.call_one()
    seen, _ = failures
    os.kill(await part.slice(gpus=1).pid.call_one(), signal.SIGKILL)  # (process gpus=2)
    assert await asyncio.to_thread(wait_until, lambda: len(seen) == 2, 30)
    assert sorted((f.mesh_name, dict(f.point)) for f in seen) == [("part", {"gpus": 1}), ("whole", {"gpus": 2})]
    for mesh in (whole, part, elsewhere):
        await mesh.stop()  # (one whose actor's process died stops the others: that one is gone already)
    os.kill(first, signal.SIGKILL)  # (no actor mesh there any more: the process mesh's name)
    assert await asyncio.to_thread(wait_until, lambda: len(seen) == 3, 30)
    assert seen[2].mesh_name == procs._name and dict(seen[2].point) == {"gpus": 0}
    await procs.stop()


async def test_an_actor_that_exits_on_purpose_is_no_failure(rt, failures):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("frag", Fragile)
    with pytest.raises(meshrt.exceptions.MeshActorDiedError, match="exit_actor"):
        await mesh.slice(gpus=1).leave.call_one()
    assert await mesh.slice(gpus=0).ok.call_one() == "ok"  # (and the news of the death has been handled)
    for thread in threading.enumerate():  # (a report on its way would be on this thread)
        if thread.name == "meshrt-supervision":
            thread.join(30)
    seen, _ = failures
    assert seen == []
    await procs.stop()


async def test_a_process_dying_between_calls_reaches_the_hook(rt, failures):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("frag", Fragile)
    pid = await mesh.slice(gpus=1).pid.call_one()
    os.kill(pid, signal.SIGKILL)
    seen, event = failures
    assert await asyncio.to_thread(event.wait, 30)
    assert seen[0].point["gpus"] == 1 and "SIGKILL" in seen[0].report()
    await procs.stop()


class Supervisor(Actor):
    def __init__(self, port, handle):
        self.port = port
        self.handle = handle
        self.children = this_host().spawn_procs(per_host={"gpus": 2}).spawn("kids", Fragile)

    @endpoint
    async def break_child(self, gpus=0):
        self.children.slice(gpus=gpus).fail.broadcast()

    @endpoint
    async def crash_child_awaited(self):
        try:
            await self.children.slice(gpus=1).crash.call_one()
        except RuntimeError as err:  # (a MeshActorDiedError is a SupervisionError, as Monarch's is)
            return type(err).__name__

    def __supervise__(self, failure):
        self.port.send(failure.report())
        return self.handle


async def test_owner_supervise_handles_child_failures(rt, failures):
    port, receiver = Channel.open()
    sup_procs = this_host().spawn_procs(per_host={"procs": 1})
    sup = sup_procs.spawn("sup", Supervisor, port, True)
    await sup.break_child.call_one()
    report = await within(receiver.recv())
    assert "mesh 'kids' at Point(gpus=0)" in report and "broadcast went wrong" in report
    assert await sup.break_child.call_one(1) is None  # handled: the owner lives on
    report = await within(receiver.recv())
    assert "mesh 'kids' at Point(gpus=1)" in report and "broadcast went wrong" in report
    seen, _ = failures
    assert seen == []
    await sup_procs.stop()


async def test_a_child_crashing_in_an_awaited_call_reaches_the_owners_supervise_too(rt, failures):
    port, receiver = Channel.open()
    sup_procs = this_host().spawn_procs()
    sup = sup_procs.spawn("sup", Supervisor, port, True)
    assert await sup.crash_child_awaited.call_one() == "MeshActorDiedError"  # (the caller hears)
    report = await within(receiver.recv())  # (and so does the owner, as in Monarch)
    assert "Point(gpus=1)" in report and "its process died" in report and "exited with code 3" in report
    seen, _ = failures
    assert seen == []
    await sup_procs.stop()


async def test_unhandled_child_failure_travels_up_to_the_driver(rt, failures):
    port, receiver = Channel.open()
    sup_procs = this_host().spawn_procs(per_host={"procs": 1})
    sup = sup_procs.spawn("sup", Supervisor, port, False)
    await sup.break_child.call_one()
    assert "broadcast went wrong" in await within(receiver.recv())
    seen, event = failures
    assert await asyncio.to_thread(event.wait, 30)  # the owner exited; its owner (us) hears
    report = seen[0].report()
    assert seen[0].point == {"procs": 0} and "its process died" in report
    assert "exited with code 1" in report and "mesh 'kids' at Point(gpus=0)" in report  # its stderr
    await sup_procs.stop()


def _run_driver(tmp_path, endpoint_body: str, then: str, sigint=signal.SIG_DFL) -> subprocess.CompletedProcess:
    """A driver script with a one-process mesh 'm' of an actor whose endpoint ``go``
    runs ``endpoint_body``; ``m.go.broadcast()``, then ``then``. It starts with SIGINT
    as ``sigint`` says (a shell's background job starts with it ignored)."""
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent("""
        import threading, meshrt
        from meshrt import Actor, endpoint, this_host

        class A(Actor):
            @endpoint
            def go(self):
                %s

        meshrt.init(num_cpus=1)
        m = this_host().spawn_procs(per_host={"gpus": 1}).spawn("m", A)
        m.go.broadcast()
    """) % endpoint_body + textwrap.dedent(then))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=90,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, sigint))


def test_default_hook_ends_the_driver_loudly_and_its_finally_blocks_run(tmp_path):
    proc = _run_driver(tmp_path, 'raise ValueError("nobody handles me")', """
        import atexit
        atexit.register(lambda: print("atexit ran", flush=True))
        try:
            threading.Event().wait(60)  # the hook ends the program long before this
        finally:
            print("finally ran", flush=True)  # (a checkpoint saved here is saved, as with Monarch)
    """)
    assert proc.returncode in (-2, 130), proc.stderr  # (a KeyboardInterrupt ended it, as Monarch's hook does)
    assert "unhandled" in proc.stderr and "nobody handles me" in proc.stderr and "KeyboardInterrupt" in proc.stderr
    assert "mesh 'm' at Point(gpus=0)" in proc.stderr
    assert "finally ran" in proc.stdout and "atexit ran" in proc.stdout


def test_the_default_hook_interrupts_the_driver_once_however_many_reports_follow(tmp_path):
    # Each broadcast queued behind the one that failed its actor fails too: one report, and
    # one KeyboardInterrupt however many reports there are, so the finally block runs whole.
    proc = _run_driver(tmp_path, 'raise ValueError("nobody handles me")', """
        import time
        for _ in range(5):
            m.go.broadcast()
        try:
            threading.Event().wait(60)
        finally:
            time.sleep(1)  # (a checkpoint being saved: another interrupt would cut it short)
            print("finally ran whole", flush=True)
    """)
    assert proc.returncode in (-2, 130), proc.stderr
    assert "finally ran whole" in proc.stdout
    assert proc.stderr.count("unhandled mesh failure") == 1, proc.stderr  # (the queued ones: reported with it)


def test_a_driver_that_ignores_sigint_is_ended_at_once(tmp_path):
    proc = _run_driver(tmp_path, 'raise ValueError("nobody handles me")',
                       "threading.Event().wait(60)  # the hook ends the process long before this",
                       sigint=signal.SIG_IGN)
    assert proc.returncode == 1 and "exiting with code 1" in proc.stderr and "nobody handles me" in proc.stderr


def test_a_broadcast_still_running_at_shutdown_is_no_failure(tmp_path):
    proc = _run_driver(tmp_path, "threading.Event().wait(60)  # still running at shutdown", """
        meshrt.shutdown()
        for thread in threading.enumerate():  # (where an unhandled failure would be raised)
            if thread.name == "meshrt-supervision":
                thread.join()
        print("clean exit")
    """)
    assert proc.returncode == 0, proc.stderr
    assert "clean exit" in proc.stdout and "unhandled" not in proc.stderr


async def test_stop_ends_processes_and_hosts_can_spawn_again(rt, failures):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("frag", Fragile)
    pids = list((await mesh.pid.call()).values())
    await procs.stop()
    for pid in pids:
        assert ended(pid)
    with pytest.raises(meshrt.exceptions.MeshActorDiedError, match="stopped"):  # (Ray's and Monarch's classes)
        mesh.ok.call()
    again = this_host().spawn_procs(per_host={"gpus": 2}).spawn("frag", Fragile)
    assert list((await again.ok.call()).values()) == ["ok", "ok"]
    seen, _ = failures
    assert seen == []


async def test_stop_kills_a_process_still_busy_after_its_timeout(rt, failures):
    from .helpers import gate

    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("frag", Fragile)
    pids = list((await mesh.pid.call()).values())
    g = gate()
    stuck = mesh.slice(gpus=1).block.call_one(g)  # blocked for good, as in a collective whose peer died
    with pytest.raises(ValueError, match="seconds to wait before killing"):
        procs.stop(timeout=-1)
    await within(procs.stop(timeout=0.5))
    with pytest.raises(meshrt.exceptions.ActorDiedError):
        await within(stuck)
    for pid in pids:
        assert ended(pid)
    seen, _ = failures
    assert seen == []  # a process killed by stop() is no failure to supervise


async def test_choose_passes_over_a_dead_process(rt, failures):
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    mesh = procs.spawn("frag", Fragile)
    pids = list((await mesh.pid.call()).values())
    with pytest.raises(meshrt.exceptions.ActorDiedError):
        await within(mesh.slice(gpus=1).crash.call_one())
    chosen = {await within(mesh.pid.choose()) for _ in range(12)}
    assert chosen <= {pids[0], pids[2]}
    await procs.stop()


def _pipes_of(pid: int) -> dict:
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # (closed meanwhile)
            continue
        if target.startswith("pipe:"):
            out[int(fd)] = target
    return out


async def test_no_process_holds_another_ones_output_pipes(rt):
    # A sibling holding a worker's stdout open would keep its end of output (how its
    # death is noticed at once) from ever coming: the death would wait for a timer.
    procs = this_host().spawn_procs(per_host={"gpus": 4})  # (forked in one batch)
    pids = list((await procs.spawn("f", Fragile).pid.call()).values())
    own = {pid: {_pipes_of(pid).get(1), _pipes_of(pid).get(2)} for pid in pids}
    for pid in pids:
        held = set(_pipes_of(pid).values())
        for other in pids:
            if other != pid:
                assert not (held & own[other]), f"worker {pid} holds the output pipes of worker {other}"
    await procs.stop()

"""A Monarch-style program using the smaller parts of Monarch's API (this file runs
against both: tests/compat_monarch/run_against_monarch.sh): ``async with`` a process
mesh, ``asyncio.run`` of ``logging_option`` (as Monarch's getting_started does),
``self.logger`` in an actor, ``mesh.size`` over several dims, a once-port sent twice,
ActorError's ``message``/``exception_formatted``, the default fault hook ending
the driver with a KeyboardInterrupt (so ``finally`` runs), and the client's actor
instance that context() gives outside actors (the driver, a thread of an endpoint's)."""

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from meshrt import (
    Actor,
    ActorError,
    Channel,
    context,
    current_actor_name,
    current_rank,
    endpoint,
    this_host,
)


class Logs(Actor):
    @endpoint
    def log(self, text):
        self.logger.info(text)
        return self.logger.name

    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def rank_in_a_thread(self):
        seen = []
        thread = threading.Thread(target=lambda: seen.append(context().actor_instance.rank.rank))
        thread.start()
        thread.join()
        return seen[0]

    @endpoint
    def boom(self):
        raise KeyError("missing")


def test_async_with_a_process_mesh_stops_it():
    async def main():
        async with this_host().spawn_procs(per_host={"gpus": 2}) as procs:
            actors = procs.spawn("logs", Logs)
            names = list((await actors.log.call("hello")).values())
            assert actors.size(("gpus",)) == 2 and procs.size() == 2
            return names

    assert asyncio.run(main()) == ["Logs", "Logs"]


def test_logging_option_runs_under_asyncio_run():
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        asyncio.run(procs.logging_option(stream_to_client=True))
    finally:
        procs.stop().get()


def test_a_once_port_takes_one_send_and_actor_errors_say_what_failed():
    port, receiver = Channel.open(once=True)
    port.send(1)
    with pytest.raises(RuntimeError):
        port.send(2)
    assert receiver.recv().get(timeout=30) == 1
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        actors = procs.spawn("logs_err", Logs)
        with pytest.raises(ActorError) as failed:
            actors.boom.call_one().get(timeout=60)
        assert isinstance(failed.value.exception, KeyError)
        assert failed.value.message and "missing" in failed.value.exception_formatted
    finally:
        procs.stop().get()


def test_the_default_fault_hook_interrupts_the_driver_and_finally_runs(tmp_path):
    script = tmp_path / "driver.py"
    api = "monarch.actor" if "monarch" in sys.modules else "meshrt"  # (what this file was run with)
    script.write_text(f"import time\nfrom {api} import Actor, endpoint, this_host\n" + textwrap.dedent("""

        class Bad(Actor):
            @endpoint
            def bad(self):
                raise ValueError("nobody handles me")

        procs = this_host().spawn_procs(per_host={"gpus": 1})
        procs.spawn("bad", Bad).bad.broadcast()
        try:
            time.sleep(60)  # (the hook ends the program long before this)
        finally:
            print("finally ran", flush=True)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # (as from a terminal)
    assert done.returncode in (-2, 130, 1), done.stderr[-2000:]
    assert "finally ran" in done.stdout and "KeyboardInterrupt" in done.stderr


def test_two_actor_meshes_of_one_name_on_the_same_processes():
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        first, second = procs.spawn("twin", Logs), procs.spawn("twin", Logs)
        assert first.pid.call().get(timeout=60) is not None
        assert sorted(second.pid.call().get(timeout=60).values()) == sorted(first.pid.call().get().values())
    finally:
        procs.stop().get()


def test_outside_actors_context_is_the_clients():
    assert context().actor_instance.rank.rank == 0 and current_rank().rank == 0
    assert current_actor_name().startswith("client")
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    logs = procs.spawn("threads", Logs)
    assert logs.slice(gpus=1).rank_in_a_thread.call_one().get(timeout=60) == 0
    procs.stop().get(timeout=60)

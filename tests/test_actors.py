"""Actors: ordering, async and threaded actors, handles, names, kill, restarts, deaths."""

from __future__ import annotations

import asyncio
import os
import sys
import threading

import pytest

import meshrt
from meshrt.exceptions import ActorDiedError, ActorNameTakenError, ActorNotFoundError
from tests.helpers import ended, gate


@meshrt.remote
class Counter:
    def __init__(self, start=0):
        self.n = start

    def incr(self, k=1):
        self.n += k
        return self.n

    def value(self):
        return self.n

    def pid(self):
        return os.getpid()

    def die(self, code=1):
        import sys

        print(f"dying with {code}", file=sys.stderr, flush=True)
        os._exit(code)


def test_sync_actor_keeps_state_and_order(rt):
    c = Counter.remote(10)
    refs = [c.incr.remote() for _ in range(200)]
    assert meshrt.get(refs) == list(range(11, 211))


def test_one_process_per_actor(rt):
    a, b = Counter.remote(), Counter.remote()
    assert meshrt.get(a.pid.remote()) != meshrt.get(b.pid.remote())


def test_async_actor_interleaves_at_await(rt):
    @meshrt.remote
    class Rendezvous:
        def __init__(self):
            self.arrived = 0
            self.event = asyncio.Event()

        async def meet(self, n):
            self.arrived += 1
            if self.arrived == n:
                self.event.set()
            await asyncio.wait_for(self.event.wait(), 30)
            return self.arrived

    r = Rendezvous.remote()
    # All five must be in flight at once for any of them to return.
    assert meshrt.get([r.meet.remote(5) for _ in range(5)], timeout=60) == [5] * 5


def test_async_actor_plain_methods_run_on_its_event_loop_as_in_ray(rt):
    @meshrt.remote
    class Mailbox:
        """Plain methods touch the loop's objects, as Ray's async actors may."""

        def __init__(self):
            self.letters = asyncio.Queue()

        def post(self, letter):  # (put_nowait wakes a waiting get() only from the loop's thread)
            self.letters.put_nowait(letter)
            return asyncio.get_running_loop() is not None

        async def receive(self):
            return await self.letters.get()

        def thread_name(self):
            return threading.current_thread().name

    box = Mailbox.remote()
    waiting = box.receive.remote()
    assert meshrt.wait([waiting], timeout=0.2)[0] == []  # (it waits for a letter)
    assert meshrt.get(box.post.remote("hello"), timeout=30) is True
    assert meshrt.get(waiting, timeout=30) == "hello"
    assert meshrt.get(box.thread_name.remote()) == "MainThread"


def test_max_concurrency_threaded_actor(rt):
    @meshrt.remote(max_concurrency=4)
    class Barrier:
        def __init__(self):
            self.barrier = threading.Barrier(4)

        def cross(self):
            return self.barrier.wait(30)

    b = Barrier.remote()
    assert sorted(meshrt.get([b.cross.remote() for _ in range(4)], timeout=60)) == [0, 1, 2, 3]


@meshrt.remote
class SelfCaller:
    def ask_self(self, me):
        return meshrt.get(me.answer.remote(), timeout=30)

    def answer(self):
        return 42


def test_an_actor_waiting_on_its_own_call_fails_instead_of_hanging(rt):
    a = SelfCaller.remote()
    with pytest.raises(RuntimeError, match=r"SelfCaller.answer\(\) \(this actor itself\) would wait forever"):
        meshrt.get(a.ask_self.remote(a), timeout=60)
    assert meshrt.get(a.answer.remote(), timeout=30) == 42  # the actor is fine
    threaded = SelfCaller.options(max_concurrency=2).remote()  # another thread answers
    assert meshrt.get(threaded.ask_self.remote(threaded), timeout=60) == 42


def test_async_max_concurrency_limits_running_coroutines(rt):
    @meshrt.remote(max_concurrency=2)
    class Limited:
        def __init__(self):
            self.running = 0
            self.peak = 0

        async def work(self):
            self.running += 1
            self.peak = max(self.peak, self.running)
            await asyncio.sleep(0.01)
            self.running -= 1

        async def peak_seen(self):
            return self.peak

    a = Limited.remote()
    meshrt.get([a.work.remote() for _ in range(10)])
    assert meshrt.get(a.peak_seen.remote()) == 2


def test_handles_are_picklable_and_called_directly_from_tasks(rt):
    c = Counter.remote()

    @meshrt.remote
    def bump(counter, times):
        return meshrt.get([counter.incr.remote() for _ in range(times)])[-1]

    assert meshrt.get(bump.remote(c, 5)) == 5
    assert meshrt.get(c.value.remote()) == 5


def test_actor_calls_another_actor(rt):
    @meshrt.remote
    class Forwarder:
        def __init__(self, target):
            self.target = target

        def forward(self, k):
            return meshrt.get(self.target.incr.remote(k))

    c = Counter.remote()
    f = Forwarder.remote(c)
    assert meshrt.get(f.forward.remote(3)) == 3
    assert meshrt.get(f.forward.remote(4)) == 7


def test_named_actors_namespaces_and_get_if_exists(rt):
    a = Counter.options(name="hits", namespace="web").remote(100)
    same = meshrt.get_actor("hits", namespace="web")
    assert meshrt.get(same.incr.remote()) == 101
    with pytest.raises(ActorNameTakenError, match="hits"):
        Counter.options(name="hits", namespace="web").remote()
    reused = Counter.options(name="hits", namespace="web", get_if_exists=True).remote()
    assert meshrt.get(reused.value.remote()) == 101
    other = Counter.options(name="hits", namespace="jobs").remote(0)
    assert meshrt.get(other.value.remote()) == 0
    with pytest.raises(ActorNotFoundError):
        meshrt.get_actor("hits", namespace="nowhere")
    with pytest.raises(ValueError):  # Ray code catches ValueError here
        meshrt.get_actor("missing")
    meshrt.kill(a)  # the name is free at once, as in Ray (not once the process is gone)
    again = Counter.options(name="hits", namespace="web").remote(7)
    assert meshrt.get(again.value.remote()) == 7
    meshrt.kill(again)
    fresh = Counter.options(name="hits", namespace="web", get_if_exists=True).remote(8)
    assert meshrt.get(fresh.value.remote()) == 8


def test_get_actor_from_a_task(rt):
    shared = Counter.options(name="shared").remote(5)  # (kept: a name alone does not keep it, as in Ray)

    @meshrt.remote
    def use():
        return meshrt.get(meshrt.get_actor("shared").incr.remote())

    assert meshrt.get(use.remote()) == 6
    assert meshrt.get(shared.incr.remote()) == 7


def test_a_kill_right_after_creation_is_not_lost(rt):
    # (the kill reached the controller before the actor's process was up, and was dropped:
    # the actor came up alive)
    for _ in range(5):
        c = Counter.remote()
        meshrt.kill(c)
        with pytest.raises(ActorDiedError, match="meshrt.kill"):
            meshrt.get(c.incr.remote(), timeout=30)


def test_kill_fails_later_calls(rt):
    c = Counter.remote()
    assert meshrt.get(c.incr.remote()) == 1
    meshrt.kill(c)
    with pytest.raises(ActorDiedError, match="meshrt.kill"):
        meshrt.get(c.incr.remote(), timeout=30)


def test_max_restarts_runs_constructor_again(rt):
    c = Counter.options(max_restarts=2).remote(7)
    first = meshrt.get(c.pid.remote())
    with pytest.raises(meshrt.exceptions.ActorUnavailableError, match="being restarted"):  # (as Ray's)
        meshrt.get(c.die.remote(), timeout=30)
    # Calls made after the death go to the new incarnation, built by __init__ again.
    assert meshrt.get(c.incr.remote(), timeout=30) == 8
    assert meshrt.get(c.pid.remote()) != first


def test_max_task_retries_resends_in_flight_calls(rt, tmp_path):
    marker = tmp_path / "crashed"

    @meshrt.remote(max_restarts=1, max_task_retries=1)
    class Fragile:
        def work(self, path):
            if not os.path.exists(path):
                open(path, "w").close()
                os._exit(1)
            return "done"

    f = Fragile.remote()
    assert meshrt.get(f.work.remote(str(marker)), timeout=60) == "done"


def test_death_reports_exit_code_and_stderr(rt):
    c = Counter.remote()
    with pytest.raises(ActorDiedError) as info:
        meshrt.get(c.die.remote(7), timeout=30)
    message = str(info.value)
    assert "exited with code 7" in message
    assert "dying with 7" in message
    with pytest.raises(ActorDiedError):
        meshrt.get(c.value.remote(), timeout=30)


def test_death_by_signal_is_named(rt):
    @meshrt.remote
    class Victim:
        def segfault(self):
            import signal

            os.kill(os.getpid(), signal.SIGSEGV)

    v = Victim.remote()
    with pytest.raises(ActorDiedError, match="SIGSEGV"):
        meshrt.get(v.segfault.remote(), timeout=30)


def test_constructor_error_kills_actor(rt):
    @meshrt.remote
    class Broken:
        def __init__(self):
            raise RuntimeError("bad config")

        def ping(self):
            return "pong"

    b = Broken.remote()
    with pytest.raises(ActorDiedError, match="bad config"):
        meshrt.get(b.ping.remote(), timeout=30)


def test_method_num_returns(rt):
    @meshrt.remote
    class Splitter:
        @meshrt.method(num_returns=2)
        def split(self, s):
            head, _, tail = s.partition(" ")
            return head, tail

    s = Splitter.remote()
    head, tail = s.split.remote("hello big world")
    assert meshrt.get([head, tail]) == ["hello", "big world"]
    one, two, three = s.split.options(num_returns=3).remote("x")
    with pytest.raises(ValueError):
        meshrt.get(one)


def test_actor_streaming_methods(rt):
    @meshrt.remote
    class Source:
        def numbers(self, n):
            yield from range(n)

        async def async_numbers(self, n):
            for i in range(n):
                await asyncio.sleep(0)
                yield i * 10

    s = Source.remote()
    assert [meshrt.get(r) for r in s.numbers.remote(3)] == [0, 1, 2]
    assert [meshrt.get(r) for r in s.async_numbers.remote(3)] == [0, 10, 20]


def test_exit_actor_fails_callers_and_does_not_restart(rt):
    @meshrt.remote(max_restarts=3)
    class Quitter:
        def quit(self):
            meshrt.actor.exit_actor()

        def ping(self):
            return "pong"

    q = Quitter.remote()
    assert meshrt.get(q.ping.remote()) == "pong"
    with pytest.raises(ActorDiedError, match="exit_actor"):
        meshrt.get(q.quit.remote(), timeout=30)
    with pytest.raises(ActorDiedError):
        meshrt.get(q.ping.remote(), timeout=30)


def test_sys_exit_in_a_method_ends_the_actor_as_in_ray(rt):
    @meshrt.remote(max_restarts=3)
    class Leaver:
        def leave(self):
            sys.exit(0)

        def ping(self):
            return "pong"

    a = Leaver.remote()
    assert meshrt.get(a.ping.remote()) == "pong"
    with pytest.raises(ActorDiedError, match=r"Leaver.leave called sys.exit\(0\)"):
        meshrt.get(a.leave.remote(), timeout=30)
    with pytest.raises(ActorDiedError):  # (an exit, not a crash: no restart)
        meshrt.get(a.ping.remote(), timeout=30)


def test_async_init_and_generators_with_a_fixed_num_returns(rt):
    @meshrt.remote
    class Loaded:
        async def __init__(self, x):  # (an async actor, as in Ray)
            await asyncio.sleep(0)
            self.x = x

        def get(self):
            return self.x

        @meshrt.method(num_returns=2)
        def pair(self):
            yield self.x
            yield self.x + 1

    a = Loaded.remote(5)
    assert meshrt.get(a.get.remote()) == 5
    assert meshrt.get(a.pair.remote()) == [5, 6]

    @meshrt.remote(num_returns=1)
    def one():
        yield "only"

    @meshrt.remote(num_returns=2)
    def three():
        yield from range(3)

    assert meshrt.get(one.remote()) == "only"
    with pytest.raises(ValueError, match=r"yielded 3 value\(s\), but num_returns=2"):
        meshrt.get(three.remote())


def test_retry_exceptions_on_actor_methods_as_in_ray(rt):
    @meshrt.remote(max_task_retries=2)
    class Flaky:
        def __init__(self):
            self.calls = 0

        @meshrt.method(retry_exceptions=True)
        def third_time_lucky(self):
            self.calls += 1
            if self.calls % 3:
                raise ValueError(f"attempt {self.calls}")
            return self.calls

        def fails(self, kind):
            self.calls += 1
            raise kind(f"attempt {self.calls}")

        def count(self):
            return self.calls

    f = Flaky.remote()
    assert meshrt.get(f.third_time_lucky.remote()) == 3  # (two retries allowed)
    with pytest.raises(ValueError, match="attempt 4"):
        meshrt.get(f.fails.remote(ValueError))  # (no retry_exceptions: once)
    with pytest.raises(KeyError, match="attempt 7"):  # (a listed class: retried twice)
        meshrt.get(f.fails.options(retry_exceptions=[KeyError]).remote(KeyError))
    with pytest.raises(ValueError, match="attempt 8"):  # (not listed: once)
        meshrt.get(f.fails.options(retry_exceptions=[KeyError]).remote(ValueError))
    assert meshrt.get(f.count.remote()) == 8
    with pytest.raises(ValueError, match="retry_exceptions"):
        meshrt.method(retry_exceptions="yes")


def test_max_pending_calls_refuses_more_at_the_call_site(rt):
    @meshrt.remote(max_pending_calls=2)
    class Busy:
        def wait(self, g):
            return meshrt.get(g.wait.remote())

    g = gate()
    b = Busy.remote()
    first = [b.wait.remote(g), b.wait.remote(g)]
    with pytest.raises(meshrt.exceptions.PendingCallsLimitExceeded, match="max_pending_calls=2"):
        b.wait.remote(g)
    meshrt.get(g.open.remote())
    assert meshrt.get(first) == [True, True]
    assert meshrt.get(b.wait.remote(g)) is True  # (answered calls no longer count)


def test_ray_terminate_and_ready(rt):
    c = Counter.remote()
    assert meshrt.get(c.__ray_ready__.remote()) is True
    c.__ray_terminate__.remote()
    with pytest.raises(ActorDiedError):
        meshrt.get(c.value.remote(), timeout=30)


def test_dropping_last_handle_ends_the_actor(rt):
    import psutil

    c = Counter.remote()
    worker_pid = meshrt.get(c.pid.remote())
    del c
    proc = psutil.Process(worker_pid)
    proc.wait(timeout=10)  # returns once the worker exits
    assert ended(worker_pid)


def test_calls_from_many_threads(rt):
    c = Counter.remote()
    results = []

    def hammer():
        results.extend(meshrt.get([c.incr.remote() for _ in range(50)]))

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == list(range(1, 201))


async def test_await_actor_calls_from_asyncio(rt):
    c = Counter.remote()
    values = await asyncio.gather(*(c.incr.remote() for _ in range(100)))
    assert values == list(range(1, 101))


def test_many_actors_fit_with_zero_cpu_default(rt):
    actors = [Counter.remote(i) for i in range(6)]  # more than num_cpus=2
    assert meshrt.get([a.value.remote() for a in actors], timeout=60) == list(range(6))


def test_actor_reserving_cpus_waits_for_them(rt):
    Big = Counter.options(num_cpus=2)
    first = Big.remote()
    assert meshrt.get(first.value.remote()) == 0
    second = Big.remote()
    ready, _ = meshrt.wait([second.value.remote()], timeout=0.3)
    assert ready == []  # no CPU left for it
    meshrt.kill(first)
    assert meshrt.get(second.value.remote(), timeout=30) == 0


def test_a_class_sent_by_value_that_starts_itself_keeps_its_methods(rt):
    # (defined here, so it travels by value; it refers to itself, so it is rebuilt in the
    # worker before its methods are filled in)
    @meshrt.remote
    class Chain:
        def __init__(self, depth, label="x"):
            self.next = Chain.remote(depth - 1, label=label) if depth else None

        def length(self):
            return 1 + (meshrt.get(self.next.length.remote(), timeout=30) if self.next else 0)

    assert meshrt.get(Chain.remote(2).length.remote(), timeout=30) == 3


@meshrt.remote
class Mixed:
    """An async actor: its plain methods run on its loop, where no cancel interrupts them."""

    async def swallows_cancel(self, started):
        await started.open.remote()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            return "swallowed"

    def blocks(self, started, gate):
        meshrt.get(started.open.remote())  # (a plain method: no warning that it blocks the loop, as in Ray)
        return meshrt.get(gate.wait.remote())

    def ok(self):
        return "ok"


@pytest.mark.timeout(60)
def test_a_cancelled_method_that_runs_on_is_reported_cancelled_as_in_ray(rt):
    from meshrt.exceptions import TaskCancelledError

    actor, started, opened = Mixed.remote(), gate(), gate()
    ref = actor.blocks.remote(started, opened)
    assert meshrt.get(started.wait.remote(), timeout=30)
    meshrt.cancel(ref)
    meshrt.get(opened.open.remote())  # (it returns normally; its caller still hears of the cancel)
    with pytest.raises(TaskCancelledError):
        meshrt.get(ref, timeout=30)
    started = gate()
    ref = actor.swallows_cancel.remote(started)
    assert meshrt.get(started.wait.remote(), timeout=30)
    meshrt.cancel(ref)
    with pytest.raises(TaskCancelledError):
        meshrt.get(ref, timeout=30)
    assert meshrt.get(actor.ok.remote(), timeout=30) == "ok"


@meshrt.remote(max_concurrency=1)
class OneAtATime:
    async def hold(self, started, opened):
        await started.open.remote()
        await opened.wait.remote()
        return "held"

    async def quick(self):
        return "quick"


@pytest.mark.timeout(60)
def test_a_call_cancelled_while_it_waits_for_its_turn_is_answered_cancelled(rt):
    from meshrt.exceptions import TaskCancelledError
    from meshrt.util.state import list_tasks

    from .helpers import wait_until

    actor, started, opened = OneAtATime.remote(), gate(), gate()
    held = actor.hold.remote(started, opened)
    assert meshrt.get(started.wait.remote(), timeout=30)
    waiting = actor.quick.remote()
    assert wait_until(lambda: any(row.state == "SUBMITTED_TO_WORKER" for row in list_tasks(
        filters=[("actor_id", "=", actor._actor_id.hex())])), 30, 0.1)  # (its process has it, behind hold)
    meshrt.cancel(waiting)
    with pytest.raises(TaskCancelledError):  # (it hung: the cancel ended its wait for the actor's one slot)
        meshrt.get(waiting, timeout=30)
    meshrt.get(opened.open.remote())
    assert meshrt.get(held, timeout=30) == "held"
    assert meshrt.get(actor.quick.remote(), timeout=30) == "quick"


def test_a_call_on_a_handle_dropped_at_once_still_runs(rt):
    """``Cls.remote().method.remote()``: the handle goes before the call has left; the
    actor ends after answering it (it was killed first when the handle went quickly)."""
    @meshrt.remote(num_cpus=0)
    class Echo:
        def echo(self, x):
            return x

    # (many at once: this thread makes and drops handles faster than the loop sends)
    assert meshrt.get([Echo.remote().echo.remote(i) for i in range(40)], timeout=120) == list(range(40))

"""A Monarch-style program: a failure nobody handles reaches ``unhandled_fault_hook``,
which the program replaces (``monarch.actor.unhandled_fault_hook = ...``)."""

import contextlib
import os
import threading

import meshrt
from meshrt import Actor, current_rank, endpoint, this_host


class Fragile(Actor):
    @endpoint
    def crash(self):
        os._exit(9)

    @endpoint
    def ok(self):
        return "ok"


class Refuses(Actor):
    def __init__(self, refuse_at):
        if current_rank().rank == refuse_at:
            raise RuntimeError("no device to run on")

    @endpoint
    def ok(self):
        return "ok"


@contextlib.contextmanager
def replaced_hook():
    """(reports, event set on each): the program's own hook, which returns normally, so
    the failure counts as handled and the program goes on."""
    seen = []
    event = threading.Event()

    def hook(failure):
        seen.append(failure.report())
        event.set()

    default, meshrt.unhandled_fault_hook = meshrt.unhandled_fault_hook, hook
    try:
        yield seen, event
    finally:
        meshrt.unhandled_fault_hook = default


def test_an_unhandled_crash_reaches_the_replaced_hook():
    with replaced_hook() as (seen, event):
        procs = this_host().spawn_procs(per_host={"gpus": 2})
        fragile = procs.spawn("fragile", Fragile)
        assert list(fragile.ok.call().get().values()) == ["ok", "ok"]
        fragile.slice(gpus=1).crash.broadcast()
        assert event.wait(60)
        assert "9" in seen[0]  # (how it died)
        assert fragile.slice(gpus=0).ok.call_one().get() == "ok"  # (the rest still serves)
        procs.stop().get()


def test_a_constructor_that_raises_reaches_the_replaced_hook():
    with replaced_hook() as (seen, event):
        procs = this_host().spawn_procs(per_host={"gpus": 2})
        refuses = procs.spawn("refuses", Refuses, 1)  # (nobody calls it: the hook hears it all the same)
        assert event.wait(60)
        assert len(seen) == 1 and "no device to run on" in seen[0]
        assert refuses.slice(gpus=0).ok.call_one().get() == "ok"  # (the rest still serves)
        procs.stop().get()

"""A Monarch-style program: a failure nobody handles reaches ``unhandled_fault_hook``,
which the program replaces (``monarch.actor.unhandled_fault_hook = ...``)."""

import os
import threading

import meshrt
from meshrt import Actor, endpoint, this_host


class Fragile(Actor):
    @endpoint
    def crash(self):
        os._exit(9)

    @endpoint
    def ok(self):
        return "ok"


def test_an_unhandled_crash_reaches_the_replaced_hook():
    seen = []
    event = threading.Event()

    def hook(failure):
        seen.append(failure.report())
        event.set()  # returning normally: handled, the program goes on

    default, meshrt.unhandled_fault_hook = meshrt.unhandled_fault_hook, hook
    try:
        procs = this_host().spawn_procs(per_host={"gpus": 2})
        fragile = procs.spawn("fragile", Fragile)
        assert list(fragile.ok.call().get().values()) == ["ok", "ok"]
        fragile.slice(gpus=1).crash.broadcast()
        assert event.wait(60)
        assert "9" in seen[0]  # (how it died)
        assert fragile.slice(gpus=0).ok.call_one().get() == "ok"  # (the rest still serves)
        procs.stop().get()
    finally:
        meshrt.unhandled_fault_hook = default

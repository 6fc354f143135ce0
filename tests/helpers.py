"""Helpers shared by tests: wait on events, never sleep and hope."""

from __future__ import annotations

import threading
import time

import meshrt


def wait_until(predicate, timeout: float = 5.0, interval: float = 0.01):
    """Poll ``predicate`` until it is truthy or the deadline passes; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


@meshrt.remote
class Gate:
    """An event a test opens, so that 'slow' work ends exactly when the test says."""

    def __init__(self):
        self.event = threading.Event()

    def open(self):
        self.event.set()

    def wait(self, timeout=30):
        return self.event.wait(timeout)


def gate():
    """A Gate that lets several waiters block at once."""
    return Gate.options(max_concurrency=8).remote()

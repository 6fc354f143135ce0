"""A Monarch-style program: an actor supervises the meshes it spawned."""

import asyncio
import os
import time

from meshrt import Actor, endpoint, this_host


class Child(Actor):
    @endpoint
    def ok(self):
        return "fine"

    @endpoint
    def crash(self):
        os._exit(7)

    @endpoint
    def fail(self):
        raise ValueError("nobody hears this")


class Owner(Actor):
    def __init__(self):
        self.failures = []
        self.procs = None
        self.children = None

    def __supervise__(self, failure):
        self.failures.append(failure.report())
        return True  # handled: nothing travels further up

    @endpoint
    async def start(self):
        self.procs = this_host().spawn_procs(per_host={"gpus": 2})
        self.children = self.procs.spawn("children", Child)
        return list((await self.children.ok.call()).values())

    @endpoint
    async def crash_one(self):
        self.children.slice(gpus=1).crash.broadcast()

    @endpoint
    async def fail_one(self):
        self.children.slice(gpus=0).fail.broadcast()

    @endpoint
    async def crash_awaited(self):
        try:
            await self.children.slice(gpus=1).crash.call_one()
        except RuntimeError as err:
            return type(err).__name__
        return "answered"

    @endpoint
    async def seen(self):
        return list(self.failures)

    @endpoint
    async def call_the_dead(self, gpus=1):
        try:
            return await self.children.slice(gpus=gpus).ok.call_one()
        except RuntimeError as err:  # (Monarch's SupervisionError is one; so is meshrt's)
            return type(err).__name__


async def _until(probe, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = await probe()
        if got:
            return got
        await asyncio.sleep(0.05)  # (polling a remote actor's state: no event to wait on here)
    raise AssertionError("timed out")


async def test_a_crash_nobody_awaits_reaches_the_owners_supervise():
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    owner = procs.spawn("owner", Owner)
    assert await owner.start.call_one() == ["fine", "fine"]
    await owner.crash_one.call_one()
    reports = await _until(lambda: owner.seen.call_one())
    assert len(reports) >= 1 and "7" in reports[0]  # (how it died: its exit code)
    # (a caller of the dead actor gets an error, never a hang: Monarch's SupervisionError,
    # meshrt's MeshActorDiedError naming the mesh and point, which is also a SupervisionError)
    assert await owner.call_the_dead.call_one() in ("SupervisionError", "MeshActorDiedError")
    await procs.stop()


async def test_a_crash_during_an_awaited_call_reaches_the_owners_supervise_too():
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    owner = procs.spawn("owner", Owner)
    assert await owner.start.call_one() == ["fine", "fine"]
    assert await owner.crash_awaited.call_one() in ("SupervisionError", "MeshActorDiedError")
    reports = await _until(lambda: owner.seen.call_one())
    assert any("7" in report for report in reports)
    await procs.stop()


async def test_an_endpoint_raising_under_broadcast_fails_its_actor():
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    owner = procs.spawn("owner", Owner)
    assert await owner.start.call_one() == ["fine", "fine"]
    await owner.fail_one.call_one()
    reports = await _until(lambda: owner.seen.call_one())
    assert any("children" in report for report in reports)
    assert await owner.call_the_dead.call_one(1) == "fine"  # (its neighbour serves on)
    # (a call to the failed actor raises in meshrt, tests/test_mesh_supervision.py; Monarch
    # 0.7 also fails the actor that made it, or interrupts a driver whose hook is the default)
    await procs.stop()

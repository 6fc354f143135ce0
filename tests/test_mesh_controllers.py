"""get_or_spawn_controller: one actor per name for the whole job, whoever asks first."""

from __future__ import annotations

import asyncio
import os

import pytest

import meshrt
from meshrt import Actor, endpoint, get_or_spawn_controller, this_host

from .test_mesh_supervision import Fragile


class Counter(Actor):
    def __init__(self, start=0):
        self.value = start

    @endpoint
    def incr(self):
        self.value += 1
        return self.value, os.getpid()


class Broken(Actor):
    def __init__(self):
        raise ValueError("no config")

    @endpoint
    def ping(self):
        return "pong"


class Asker(Actor):
    @endpoint
    def ask(self, name, start):
        """Get (or be the first to spawn) the controller, and use it."""
        controller = get_or_spawn_controller(name, Counter, start).get(timeout=60)
        return controller.incr.call_one().get(timeout=60) + (os.getpid(),)


@pytest.mark.timeout(120)
def test_every_process_gets_the_one_controller_of_a_name(rt):
    controller = get_or_spawn_controller("counter", Counter, 10).get(timeout=60)
    assert controller.incr.call_one().get(timeout=60)[0] == 11
    askers = this_host().spawn_procs(per_host={"gpus": 2}).spawn("askers", Asker)
    got = list(askers.ask.call("counter", 99).get(timeout=60).values())  # (a later ask's arguments are ignored)
    assert sorted(value for value, _, _ in got) == [12, 13]
    pids = {pid for _, pid, _ in got} | {controller.incr.call_one().get(timeout=60)[1]}
    assert len(pids) == 1 and not pids & ({os.getpid()} | {asker for _, _, asker in got})  # (its own process)
    other = get_or_spawn_controller("other", Counter).get(timeout=60)
    assert other.incr.call_one().get(timeout=60)[1] not in pids  # another name, another process

    async def ask_in_async_code():
        controller = await get_or_spawn_controller("counter", Counter)
        return await controller.incr.call_one()

    assert asyncio.run(ask_in_async_code()) == (15, pids.pop())


@pytest.mark.timeout(120)
def test_processes_asking_first_at_once_spawn_one_controller(rt):
    askers = this_host().spawn_procs(per_host={"gpus": 4}).spawn("askers", Asker)
    askers.ask.call("first", 0).get(timeout=60)  # (warm: every asker started)
    got = list(askers.ask.call("raced", 100).get(timeout=60).values())
    assert sorted(value for value, _, _ in got) == [101, 102, 103, 104]  # one constructor, one state
    assert len({pid for _, pid, _ in got}) == 1


@pytest.mark.timeout(60)
def test_bad_input_is_refused_where_it_is_given(rt):
    with pytest.raises(ValueError, match="name must be a non-empty str"):
        get_or_spawn_controller("", Counter)
    with pytest.raises(TypeError, match=r"get_or_spawn_controller\(name, Class, \.\.\.\) needs a class"):
        get_or_spawn_controller("c", Counter())
    with pytest.raises(TypeError, match=r"get_or_spawn_controller\('c', Counter, \.\.\.\): Counter\.__init__"):
        get_or_spawn_controller("c", Counter, 1, 2)


@pytest.mark.timeout(120)
def test_a_controller_whose_constructor_raises_fails_its_calls_saying_so(rt):
    from .helpers import wait_until

    broken = get_or_spawn_controller("broken", Broken).get(timeout=60)
    with pytest.raises(ValueError, match=r"no config[\s\S]*Broken\.__init__ of actor mesh 'broken'"):
        broken.ping.call_one().get(timeout=60)
    # (its failure reaches the registry, which owns it, as any: that name is free for the next ask)
    assert wait_until(lambda: meshrt.get(_registry().names.remote(), timeout=30) == [], 30)
    again = get_or_spawn_controller("broken", Broken).get(timeout=60)  # (spawned again: it fails the same way)
    with pytest.raises(ValueError, match="no config"):
        again.ping.call_one().get(timeout=60)


def _registry():
    from meshrt.mesh.controllers import REGISTRY_NAME, REGISTRY_NAMESPACE

    return meshrt.get_actor(REGISTRY_NAME, namespace=REGISTRY_NAMESPACE)


@pytest.mark.timeout(120)
def test_a_controller_that_crashes_leaves_the_others_serving_and_is_spawned_again(rt):
    from .helpers import wait_until

    first = get_or_spawn_controller("fragile", Fragile).get(timeout=60)
    other = get_or_spawn_controller("steady", Counter, 0).get(timeout=60)
    before = first.pid.call_one().get(timeout=60)
    with pytest.raises(meshrt.exceptions.ActorDiedError):
        first.crash.call_one().get(timeout=60)
    assert other.incr.call_one().get(timeout=60)[0] == 1  # (its owner, the registry, lives on)
    assert wait_until(lambda: meshrt.get(_registry().names.remote(), timeout=30) == ["steady"], timeout=30)
    again = get_or_spawn_controller("fragile", Fragile).get(timeout=60)  # (the next ask spawns it again)
    assert again.pid.call_one().get(timeout=60) != before

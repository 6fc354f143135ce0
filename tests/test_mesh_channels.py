"""Channels as in Monarch: ranked receivers and one-value channels."""

from __future__ import annotations

import asyncio
import os

import pytest

from meshrt import Actor, Channel, endpoint, this_host
from meshrt.exceptions import ActorDiedError


class Sender(Actor):
    def __init__(self):
        self.kept = None

    @endpoint
    def send_to(self, port, value):
        port.send(value)

    @endpoint
    def drop(self, port):
        pass

    @endpoint
    def keep(self, port):
        self.kept = port

    @endpoint
    def send_kept(self, value):
        self.kept.send(value)
        self.kept = None

    @endpoint
    def crash(self):
        os._exit(3)

    @endpoint
    async def fail_to(self, port):
        port.exception(KeyError("nothing here"))


async def test_a_ranked_receiver_pairs_each_value_with_its_senders_rank(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("s", Sender)
    port, receiver = Channel.open_ranked()
    await mesh.send_to.call(port, "x")
    assert sorted([await receiver.recv(), await receiver.recv()]) == [(0, "x"), (1, "x")]
    await mesh.slice(gpus=1).send_to.call(port, "y")  # (the rank within the addressed slice)
    assert await receiver.recv() == (0, "y")
    port.send("driver")  # (from outside any mesh actor: rank 0)
    assert await receiver.recv() == (0, "driver")
    plain_port, plain = Channel.open()
    await mesh.slice(gpus=1).fail_to.call_one(plain_port)
    with pytest.raises(KeyError, match="nothing here"):
        await plain.ranked().recv()  # (a view of the same receiver; errors raise as they do there)
    await procs.stop()


async def test_a_once_channel_takes_one_value(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("s", Sender)
    port, receiver = Channel.open(once=True)
    await mesh.send_to.call(port, "z")  # (two sends: the second is dropped)
    assert await receiver.recv() == "z"
    with pytest.raises(RuntimeError, match="once=True"):
        receiver.recv()
    with pytest.raises(TypeError, match=r"Channel.open\(once=...\)"):
        Channel.open(once="yes")
    await procs.stop()


class Answerer(Actor):
    def __init__(self):
        self.saved = None

    @endpoint(explicit_response_port=True)
    async def plus_one(self, port, x):
        port.send(x + 1)
        return "dropped"  # (the reply is what the port got, as in Monarch)

    @endpoint(explicit_response_port=True)
    def later(self, port):
        self.saved = port

    @endpoint
    def release(self, value):
        self.saved.send(value)

    @endpoint(explicit_response_port=True)
    def ask(self, port, helper):
        helper.send_to.call_one(port, "from a helper").get(timeout=30)  # (answered from elsewhere)

    @endpoint(explicit_response_port=True)
    def refuse(self, port):
        port.exception(KeyError("refused"))

    @endpoint(explicit_response_port=True)
    def forgets(self, port):
        return "dropped"

    @endpoint(explicit_response_port=True)
    def hand_on(self, port, helper, keep_here=False):
        helper.drop.call_one(port).get(timeout=30)
        if keep_here:
            self.saved = port  # (sent later by release(): the helper's dropped copy must not fail the call)

    @endpoint(explicit_response_port=True)
    def hand_to_keeper(self, port, helper, kept):
        helper.keep.call_one(port).get(timeout=30)
        kept.send(True)  # (the caller learns the keeper holds the port)

    @endpoint(explicit_response_port=True)
    def sends_then_raises(self, port):
        port.send("sent")
        raise KeyError("after the reply")


async def test_an_endpoint_with_an_explicit_response_port_answers_through_it(rt):
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("a", Answerer)
    helper = this_host().spawn_procs(per_host={"one": 1}).spawn("h", Sender)
    assert await mesh.slice(gpus=0).plus_one.call_one(41) == 42
    assert list((await mesh.plus_one.call(1)).values()) == [2, 2]
    with pytest.raises(TypeError, match=r"a\.plus_one\(\.\.\.\): missing a required argument: 'x'"):
        mesh.plus_one.call()  # (the port is not the caller's to give)
    pending = mesh.slice(gpus=1).later.call_one()  # (its actor goes on serving meanwhile)
    await mesh.slice(gpus=1).release.call_one("released")
    assert await pending == "released"
    assert await mesh.slice(gpus=0).ask.call_one(helper) == "from a helper"
    with pytest.raises(KeyError, match="refused") as info:
        await mesh.slice(gpus=1).refuse.call_one()
    assert "a.refuse at Point(gpus=1)" in str(info.value)
    with pytest.raises(RuntimeError, match="returned without sending a reply on its response port"):
        await mesh.slice(gpus=0).forgets.call_one()  # (it waited for ever)
    assert await mesh.slice(gpus=0).sends_then_raises.call_one() == "sent"  # (the first reply stands)
    await procs.stop()


async def test_a_response_port_handed_on_and_dropped_everywhere_fails_its_call(rt, failures):
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    mesh = procs.spawn("a", Answerer)
    helpers = this_host().spawn_procs(per_host={"two": 2})
    helper = helpers.spawn("h", Sender)
    one = helper.slice(two=0)
    with pytest.raises(RuntimeError, match=r"a\.hand_on at Point\(gpus=0\): its response port was handed on, and "
                                           r"every copy of it was dropped"):
        await asyncio.wait_for(mesh.hand_on.call_one(one), 30)  # (it waited for ever)
    pending = mesh.hand_on.call_one(one, keep_here=True)  # (a copy dropped, the endpoint's kept)
    await mesh.release.call_one("kept here")
    assert await asyncio.wait_for(pending, 30) == "kept here"
    note, noted = Channel.open()
    kept = mesh.hand_to_keeper.call_one(one, note)  # (held elsewhere: waits, then answered from there)
    await asyncio.wait_for(noted.recv(), 30)
    await one.send_kept.call_one("from the keeper")
    assert await asyncio.wait_for(kept, 30) == "from the keeper"
    kept = mesh.hand_to_keeper.call_one(one, note)
    await asyncio.wait_for(noted.recv(), 30)
    await one.keep.call_one(None)  # (the keeper lets go of its copy)
    with pytest.raises(RuntimeError, match="every copy of it was dropped"):
        await asyncio.wait_for(kept, 30)
    crashed = mesh.hand_to_keeper.call_one(helper.slice(two=1), note)
    await asyncio.wait_for(noted.recv(), 30)
    with pytest.raises(ActorDiedError):
        await asyncio.wait_for(helper.slice(two=1).crash.call_one(), 30)
    with pytest.raises(RuntimeError, match="or its process died"):
        await asyncio.wait_for(crashed, 30)  # (its holder died)
    seen, event = failures
    assert await asyncio.to_thread(event.wait, 30)  # (the crash is a supervision event too)
    assert [(f.mesh_name, f.rank) for f in seen] == [("h", 1)]  # (the actor mesh whose actor died)
    await helpers.stop()
    await procs.stop()

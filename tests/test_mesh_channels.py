"""Channels as in Monarch: ranked receivers and one-value channels."""

from __future__ import annotations

import pytest

from meshrt import Actor, Channel, endpoint, this_host


class Sender(Actor):
    @endpoint
    def send_to(self, port, value):
        port.send(value)

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

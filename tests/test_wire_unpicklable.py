"""A message that cannot be pickled never leaves its peer waiting in silence: the error
inside it goes as a description, and the messages around it still arrive."""

from __future__ import annotations

import asyncio
import threading

from meshrt._private import messages as m
from tests import helpers


class HoldsALock(Exception):
    def __init__(self, what):
        super().__init__(what)
        self.lock = threading.Lock()  # (a lock cannot be pickled)


async def test_an_unpicklable_error_in_a_response_arrives_described():
    async with helpers.wire_pair(3) as (client, received, enough):
        client.send(m.Response(1, True, "before"))
        client.send(m.Response(2, False, HoldsALock("the store is full")))
        client.send(m.Response(3, True, "after"))  # (same frame: the others are not lost with it)
        await asyncio.wait_for(enough.wait(), 30)
    assert [r.req_id for r in received] == [1, 2, 3]
    assert received[0].value == "before" and received[2].value == "after"
    err = received[1].value
    assert received[1].ok is False and type(err) is RuntimeError
    assert "HoldsALock: the store is full" in str(err) and "could not be pickled" in str(err)


async def test_an_error_nested_in_a_relayed_message_arrives_described():
    async with helpers.wire_pair(1) as (client, received, enough):
        client.send(m.Relay(5, 0, m.Response(7, False, HoldsALock("nested"))))
        await asyncio.wait_for(enough.wait(), 30)
    relay = received[0]
    assert type(relay) is m.Relay and (relay.dest, relay.src) == (5, 0)
    assert type(relay.msg) is m.Response and relay.msg.req_id == 7
    assert "HoldsALock: nested" in str(relay.msg.value)


async def test_a_message_with_no_error_to_describe_is_left_out_and_the_rest_arrive(caplog):
    async with helpers.wire_pair(2) as (client, received, enough):
        client.send(m.Response(1, True, "first"))
        client.send(m.Response(2, True, threading.Lock()))  # nothing to describe instead
        client.send(m.Response(3, True, "last"))
        await asyncio.wait_for(enough.wait(), 30)
    assert [r.value for r in received] == ["first", "last"]
    assert "dropped a Response" in caplog.text

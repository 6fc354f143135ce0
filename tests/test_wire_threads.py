"""Frames sent from a thread other than the connection's loop (an actor's reply from
the thread that ran the call) arrive whole and in order, also when the socket cannot
take a frame in one write."""

from __future__ import annotations

import asyncio
import pickle
import threading

from tests import helpers


async def _on_a_thread(fn) -> None:
    """Run ``fn`` on a thread of its own (not the loop's) and wait for it."""
    thread = threading.Thread(target=fn)
    thread.start()
    await asyncio.to_thread(thread.join, 30)


async def test_thread_sends_interleave_with_loop_sends_in_order():
    n = 400
    async with helpers.wire_pair(n + 1) as (client, received, enough):
        def from_thread():
            for i in range(n):
                client.send_from_thread(("thread", i))

        await _on_a_thread(from_thread)
        client.send(("loop", "last"))  # sent after every thread send: arrives after them
        await asyncio.wait_for(enough.wait(), 30)
        assert [m for m in received if m[0] == "thread"] == [("thread", i) for i in range(n)]
        assert received[-1] == ("loop", "last")


async def test_thread_send_larger_than_the_socket_buffer_arrives_whole():
    async with helpers.wire_pair(3) as (client, received, enough):
        big = bytes(range(256)) * (64 << 10)  # 16 MiB: more than one write takes

        def from_thread():
            client.send_from_thread(("big", pickle.PickleBuffer(big)))
            client.send_from_thread(("after", 1))  # queued behind the unsent tail

        await _on_a_thread(from_thread)
        client.send(("loop", 2))
        await asyncio.wait_for(enough.wait(), 30)
        assert received[0][0] == "big" and bytes(received[0][1]) == big
        assert received[1:] == [("after", 1), ("loop", 2)]
        assert client._stalled is None and not client._outbox


async def test_thread_send_with_more_buffers_than_one_writev_takes():
    async with helpers.wire_pair(2) as (client, received, enough):
        parts = [bytes([i % 256]) * (64 << 10) for i in range(1100)]  # > IOV_MAX pieces

        def from_thread():
            client.send_from_thread(("parts", [pickle.PickleBuffer(p) for p in parts]))
            client.send_from_thread(("after", 1))

        await _on_a_thread(from_thread)
        await asyncio.wait_for(enough.wait(), 60)
        tag, got = received[0]
        assert tag == "parts" and [bytes(g) for g in got] == parts
        assert received[1] == ("after", 1)

"""A Monarch-style program: working with the ValueMesh a call returns, and failed futures."""

import numpy as np
import pytest

from meshrt import Actor, ActorError, current_rank, endpoint, this_host, this_proc


class Square(Actor):
    @endpoint
    def of_rank(self):
        return current_rank().rank ** 2

    @endpoint
    def odd_fails(self):
        if current_rank().rank % 2:
            raise ZeroDivisionError("odd rank")
        return "even"


async def test_slicing_and_indexing_the_replies():
    procs = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2})
    squares = procs.spawn("squares", Square)
    values = await squares.of_rank.call()
    assert values.item(hosts=1, gpus=0) == 4
    assert list(values.slice(hosts=1).values()) == [4, 9]
    assert [p.rank for p, _ in values.slice(gpus=1).items()] == [0, 1]
    assert len(values) == 4
    await procs.stop()


def test_a_sync_endpoint_error_through_get_and_exception():
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    squares = procs.spawn("squares", Square)
    assert squares.slice(gpus=0).odd_fails.call_one().get() == "even"
    with pytest.raises(ActorError) as info:
        squares.odd_fails.call().get()
    assert isinstance(info.value.exception, ZeroDivisionError)
    assert squares.slice(gpus=1).odd_fails.call_one().exception() is None  # (rank 0 of its slice)
    assert isinstance(squares.odd_fails.call().exception(), ActorError)
    procs.stop().get()


class Scaler(Actor):
    @endpoint
    def scale(self, arrays, factor):
        for a in arrays.values():
            a *= factor  # (in place: the arrays an endpoint is given are its own, as in Monarch)
        return arrays

    @endpoint
    def ones(self, n):
        return np.ones(n)


async def test_large_arrays_are_their_receiver_s_own():
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    sent = {"small": np.ones(16), "large": np.ones(1 << 20)}  # (the large one goes through the store)
    for scaler in (procs.spawn("scaler", Scaler), this_proc().spawn("scaler_here", Scaler)):
        scaled = await scaler.scale.call_one(sent, 3.0)
        assert scaled["large"][0] == 3.0 and scaled["small"][-1] == 3.0
        assert sent["large"][0] == 1.0  # (the caller's array is untouched)
        got = await scaler.ones.call_one(1 << 20)
        got += 1  # (what the client gets back is its own too)
        assert got[0] == 2.0 and got.flags.writeable
        for reply in scaler.ones.stream(1 << 20):  # (streamed too)
            streamed = await reply
            streamed += 1
            assert streamed[0] == 2.0
    await procs.stop()

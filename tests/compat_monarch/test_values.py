"""A Monarch-style program: working with the ValueMesh a call returns, and failed futures."""

import pytest

from meshrt import Actor, ActorError, current_rank, endpoint, this_host


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

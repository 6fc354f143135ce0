"""A mesh call to processes on other hosts leaves from the caller's thread, one frame
per host (meshrt/_private/fanout_calls.py); calls that cannot (others of ours to the
same actor still wait on the core loop) take the loop's path. Either way each actor
sees a caller's calls in the order they were made."""

from __future__ import annotations

import pytest

import meshrt
from meshrt import Actor, endpoint

from .test_multihost import cluster  # noqa: F401 - fixture

pytestmark = pytest.mark.timeout(180)


class Log(Actor):
    def __init__(self):
        self.seen = []

    @endpoint
    def note(self, i):
        self.seen.append(i)
        return i

    @endpoint
    def seen_so_far(self):
        return self.seen


def test_calls_to_other_hosts_keep_their_order_whichever_path_they_take(cluster):  # noqa: F811
    hosts = cluster[0]
    logs = hosts.spawn_procs(per_host={"gpus": 2}).spawn("log", Log)
    logs.note.call(-1).get(timeout=60)
    one = logs.slice(hosts=1, gpus=1)
    futures = []
    for i in range(40):
        futures.append(logs.note.call(i))  # to all 4, from this thread where it may
        futures.append(one.note.call_one(1000 + i))  # behind calls in flight: through the loop
        if i % 10 == 9:
            futures.append(logs.note.broadcast(2000 + i))
    for future in futures:
        if future is not None:
            future.get(timeout=60)
    seen = logs.seen_so_far.call().get(timeout=60)
    for point, got in seen.items():
        mine = point["hosts"] == 1 and point["gpus"] == 1
        expected = [-1]
        for i in range(40):
            expected += [i, 1000 + i] if mine else [i]
            if i % 10 == 9:
                expected.append(2000 + i)
        assert got == expected, point


def test_a_burst_of_calls_to_other_hosts_all_come_back_in_order(cluster):  # noqa: F811
    """Calls made while earlier ones are in flight: each reply is its own call's."""
    hosts = cluster[0]
    logs = hosts.spawn_procs(per_host={"gpus": 2}).spawn("burst", Log)
    futures = [logs.note.call(i) for i in range(200)]
    for i, future in enumerate(futures):
        assert list(future.get(timeout=60).values()) == [i] * 4
    assert meshrt._private.state.core().outstanding_calls(logs._procs[0]._actor_id) == 0


def test_a_call_interrupted_while_it_is_sent_still_reaches_every_actor(cluster, monkeypatch):  # noqa: F811
    """Ctrl-C in the middle of sending a mesh call: the calls made but not written yet
    go through the core loop, once each and in order, and nothing stays counted."""
    from meshrt._private import actor_client

    hosts = cluster[0]
    logs = hosts.spawn_procs(per_host={"gpus": 2}).spawn("cut", Log)
    logs.note.call(-1).get(timeout=60)
    real, claims = actor_client.ActorClient.claim, []

    def claim(self, pt):
        claims.append(pt)
        if len(claims) == 3:  # (after two calls were claimed: one host's frame is not written yet)
            raise KeyboardInterrupt
        return real(self, pt)

    monkeypatch.setattr(actor_client.ActorClient, "claim", claim)
    with pytest.raises(KeyboardInterrupt):
        logs.note.call(0)
    monkeypatch.undo()
    logs.note.call(1).get(timeout=60)
    assert [list(v) for v in logs.seen_so_far.call().get(timeout=60).values()] == [[-1, 0, 1]] * 4
    core = meshrt._private.state.core()
    assert [core.outstanding_calls(proc._actor_id) for proc in logs._procs] == [0] * 4
    assert not any(core.unsubmitted_calls(proc._actor_id) for proc in logs._procs)

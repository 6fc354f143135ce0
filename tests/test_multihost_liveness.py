"""A host that stops answering (hung, SIGSTOPped, cut off) is taken for dead after
MESHRT_HOST_TIMEOUT_S: its actors' callers get ActorDiedError instead of waiting
forever, and the rest of the cluster keeps serving."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

import meshrt

from .test_multihost import TOKEN, Worker, _start_agent, stop_agent


@pytest.mark.timeout(120)
def test_a_stopped_host_is_taken_for_dead_and_the_rest_serves(monkeypatch, failures):
    monkeypatch.setenv("MESHRT_TOKEN", TOKEN)
    monkeypatch.setenv("MESHRT_HOST_TIMEOUT_S", "2")
    info = meshrt.init(address="127.0.0.1:0", num_cpus=1)
    sleepy, awake = _start_agent(info["tcp_address"], "sleepy"), None
    frozen: list = []
    try:
        meshrt.hosts(min_hosts=1, timeout=60)
        awake = _start_agent(info["tcp_address"], "awake")
        hosts = meshrt.hosts(min_hosts=2, timeout=60)
        workers = hosts.spawn_procs(per_host={"gpus": 1}).spawn("w", Worker)
        first = list(workers.where.call().get(timeout=60).values())
        frozen = [sleepy.pid] + [p.pid for p in psutil.Process(sleepy.pid).children(recursive=True)]
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        with pytest.raises(meshrt.exceptions.ActorDiedError, match="'sleepy'.*stopped answering"):
            workers.slice(hosts=0).where.call_one().get(timeout=60)
        assert workers.slice(hosts=1).where.call_one().get(timeout=30) == first[1]
        assert meshrt.hosts(min_hosts=1, timeout=5).sizes == {"hosts": 1}
    finally:
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGCONT)  # it finds itself cut off, and exits with its processes
            except ProcessLookupError:
                pass
        if frozen:
            assert sleepy.wait(timeout=30) is not None
        meshrt.shutdown()
        stop_agent(sleepy)
        if awake is not None:
            stop_agent(awake)


@pytest.mark.timeout(120)
def test_an_idle_agent_beats_at_the_heads_pace_whatever_its_own_setting(monkeypatch, failures):
    """The agent takes the head's timeout from its welcome: beating every quarter of its
    own 600 s, an idle agent was dropped by a head that allows 1.5 s of silence."""
    monkeypatch.setenv("MESHRT_TOKEN", TOKEN)
    monkeypatch.setenv("MESHRT_HOST_TIMEOUT_S", "1.5")
    info = meshrt.init(address="127.0.0.1:0", num_cpus=1)
    agent = _start_agent(info["tcp_address"], "calm", MESHRT_HOST_TIMEOUT_S="600")
    try:
        hosts = meshrt.hosts(min_hosts=1, timeout=60)
        workers = hosts.spawn_procs(per_host={"gpus": 1}).spawn("w", Worker)
        first = workers.where.call_one().get(timeout=60)
        time.sleep(4.5)  # (the behaviour under test: three times the head's timeout, idle)
        assert workers.where.call_one().get(timeout=30) == first
        seen, _ = failures
        assert seen == []
    finally:
        meshrt.shutdown()
        stop_agent(agent)

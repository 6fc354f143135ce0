"""How agents join: before the head listens, with a name already taken, with a token
file next to a stale MESHRT_TOKEN, and at the address the driver prints."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

import meshrt
from meshrt._private import cluster_token

from .test_multihost import TOKEN, Worker, _start_agent, cluster, stop_agent  # noqa: F401 - fixture


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_line(agent: subprocess.Popen, text: str) -> str:
    """Read the agent's log until ``text`` shows (the test's timeout bounds it)."""
    seen = []
    for line in agent.stderr:
        seen.append(line)
        if text in line:
            return line
    raise AssertionError(f"the agent exited without saying {text!r}: {''.join(seen)}")


@pytest.mark.timeout(120)
def test_an_agent_started_before_the_head_joins_once_it_listens(monkeypatch):
    """Under SLURM the agents start first (`srun meshrt agent &`), then the driver."""
    monkeypatch.setenv("MESHRT_TOKEN", TOKEN)
    port = _free_port()
    agent = _start_agent(f"127.0.0.1:{port}", "early")
    try:
        _wait_for_line(agent, "does not answer yet")
        meshrt.init(address=f"127.0.0.1:{port}", num_cpus=1)
        hosts = meshrt.hosts(min_hosts=1, timeout=60)
        mesh = hosts.spawn_procs(per_host={"gpus": 1}).spawn("w", Worker)
        assert mesh.where.call_one().get(timeout=60)[0] != 0
    finally:
        meshrt.shutdown()
        stop_agent(agent)


@pytest.mark.timeout(120)
def test_an_agent_that_cannot_reach_the_head_gives_up_after_its_timeout():
    agent = subprocess.Popen(
        [sys.executable, "-m", "meshrt", "agent", "--address", f"127.0.0.1:{_free_port()}",
         "--connect-timeout", "0.5"], env=dict(os.environ, MESHRT_TOKEN=TOKEN),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert agent.wait(timeout=60) == 1
        assert "kept trying for 0.5 s" in agent.stderr.read()
    finally:
        stop_agent(agent)


def test_a_second_agent_with_a_name_already_taken_is_refused(cluster):  # noqa: F811
    hosts, _, address, _ = cluster
    twin = _start_agent(address, "host1")
    try:
        assert twin.wait(timeout=60) == 1
        assert "a host named 'host1' is already in the cluster" in twin.stderr.read()
    finally:
        stop_agent(twin)
    assert meshrt.hosts(min_hosts=2, timeout=5).sizes == {"hosts": 2}


def test_a_token_file_given_wins_over_a_stale_environment(cluster, tmp_path):  # noqa: F811
    _, _, address, _ = cluster
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    agent = subprocess.Popen(
        [sys.executable, "-m", "meshrt", "agent", "--address", address, "--name", "third",
         "--token-file", str(token_file), "--object-store-memory", str(64 << 20)],
        env=dict(os.environ, MESHRT_TOKEN="00" * 16), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert meshrt.hosts(min_hosts=3, timeout=60).sizes == {"hosts": 3}
    finally:
        meshrt.shutdown()
        stop_agent(agent)


def test_drivers_of_one_user_share_the_generated_token(tmp_path):
    """A second driver used to write a new token over the first's, locking out the
    agents that read the file for the first."""
    path = str(tmp_path / ".meshrt" / "cluster_token")
    first, fresh = cluster_token.generate_or_reuse(path)
    again, fresh_again = cluster_token.generate_or_reuse(path)
    assert fresh and not fresh_again and again == first
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"


@pytest.mark.timeout(120)
def test_a_driver_listening_on_every_interface_prints_an_address_agents_can_dial(monkeypatch):
    monkeypatch.setenv("MESHRT_TOKEN", TOKEN)
    info = meshrt.init(address="0.0.0.0:0", num_cpus=1)
    agent = None
    try:
        assert not info["tcp_address"].startswith("0.0.0.0")
        agent = _start_agent(info["tcp_address"], "dialer")
        assert meshrt.hosts(min_hosts=1, timeout=60).sizes == {"hosts": 1}
    finally:
        meshrt.shutdown()
        if agent is not None:
            stop_agent(agent)


@pytest.mark.timeout(60)
def test_a_port_already_taken_is_named_at_init(monkeypatch):
    """A literal address is bound by meshrt itself (no resolver threads in each worker):
    a port in use still fails at ``init``, naming the address to change."""
    monkeypatch.setenv("MESHRT_TOKEN", TOKEN)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}.*that port is taken"):
            meshrt.init(address=f"127.0.0.1:{port}", num_cpus=1)
    with pytest.raises(OSError, match="no such address.*meshrt agent --address"):  # (a Ray user's head address)
        meshrt.init(address="192.0.2.7:6379", num_cpus=1)
    with pytest.raises(ValueError, match="no Ray Client"):
        meshrt.init(address="ray://192.0.2.7:10001")
    assert not meshrt.is_initialized()

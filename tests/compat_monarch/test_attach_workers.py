"""A Monarch-style program that brings up its hosts itself: worker processes serve
run_worker_loop_forever, and the client attaches them as a HostMesh."""

import os
import socket
import subprocess
import sys

from meshrt import Actor, attach_to_workers, current_rank, endpoint, run_worker_loop_forever


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Where(Actor):
    @endpoint
    def pid(self):
        return os.getpid(), dict(current_rank())


def test_a_client_attaches_worker_processes_as_hosts(monkeypatch):
    addresses = [f"tcp://127.0.0.1:{_free_port()}" for _ in range(2)]
    code = ("from {module} import run_worker_loop_forever; "
            "run_worker_loop_forever(address={address!r}, ca='trust_all_connections')")
    monkeypatch.setenv("MESHRT_TOKEN", "6b" * 16)  # (the cluster token both sides prove; unused by Monarch)
    env = dict(os.environ)
    workers = [subprocess.Popen([sys.executable, "-c", code.format(module=run_worker_loop_forever.__module__,
                                                                   address=address)], env=env)
               for address in addresses]
    try:
        hosts = attach_to_workers(workers=addresses, ca="trust_all_connections")
        procs = hosts.spawn_procs(per_host={"gpus": 2})
        where = procs.spawn("where", Where).pid.call().get(timeout=120)
        assert [point for _, point in where.values()] == [
            {"hosts": 0, "gpus": 0}, {"hosts": 0, "gpus": 1}, {"hosts": 1, "gpus": 0}, {"hosts": 1, "gpus": 1}]
        assert len({pid for pid, _ in where.values()}) == 4 and os.getpid() not in {pid for pid, _ in where.values()}
        procs.stop().get(timeout=60)
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()

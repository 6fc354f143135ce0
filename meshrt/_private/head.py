"""A long-running head: ``meshrt start --head`` runs ``python -m meshrt._private.head``,
a driver with no program of its own. It listens for agents and for drivers that attach
with ``meshrt.init(address="auto")`` (client_driver.py), records itself in the cluster
file (cluster_file.py), and serves until ``meshrt stop`` (SIGTERM) or Ctrl-C, then shuts
the cluster down as any driver's ``shutdown()`` does: every worker, actor and agent's
processes end with it."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading


def main(argv: list[str]) -> int:
    import meshrt

    from . import cluster_file, state, temp_root

    options = json.loads(argv[0])
    ready_fd = int(argv[1]) if len(argv) > 1 else None  # (meshrt start waits on it)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    info = meshrt.init(**options)
    core = state.core()
    controller = core.controller
    cluster_file.write({
        "pid": os.getpid(),
        "address": info["tcp_address"],
        "controller": controller.address,
        "store_fd": controller.store.fd,
        "store_size": controller.store.capacity,
        "session": info["session"],
        "temp_dir": temp_root.root(),  # (where its sessions' logs are: get_temp_dir() in attached drivers)
        "node_id": info["node_id"],
        "job_id": info["job_id"],
        "bind": options["address"],
    }, core.token)
    print(f"meshrt head: listening on {info['tcp_address']} (session {info['session']}, pid {os.getpid()})",
          flush=True)
    if ready_fd is not None:
        os.write(ready_fd, b"up")
        os.close(ready_fd)
    try:
        stop.wait()
    finally:
        cluster_file.remove(os.getpid())
        meshrt.shutdown()
    return 0


def start(options: dict, block: bool) -> int:
    """``meshrt start --head``: run the head in a process of its own (its output in
    ``<temp dir>/meshrt-sessions/head.log``) and return once it listens; ``block``: run
    it here until Ctrl-C instead."""
    import select
    import subprocess

    from . import cluster_file
    from .log_files import sessions_root

    running = cluster_file.read()
    if running is not None:
        print(f"meshrt start: a head already runs on this host (pid {running['pid']}, {running['address']}); "
              "`meshrt stop` it first", file=sys.stderr)
        return 1
    if block:
        return main([json.dumps(options)])
    os.makedirs(sessions_root(), exist_ok=True)
    log_path = os.path.join(sessions_root(), "head.log")
    ready_r, ready_w = os.pipe()  # (the head writes to it once it listens and has written its record)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "meshrt._private.head", json.dumps(options), str(ready_w)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                pass_fds=(ready_w,))
    os.close(ready_w)
    try:
        readable, _, _ = select.select([ready_r], [], [], 60)
        up = bool(readable) and os.read(ready_r, 2) == b"up"  # (b"": it exited first)
    finally:
        os.close(ready_r)
    head = cluster_file.read() if up else None
    if head is not None:
        print(f"meshrt head started at {head['address']} (pid {proc.pid}; output in {log_path})\n"
              f"  drivers on this host: meshrt.init(address=\"auto\")\n"
              f"  other hosts: meshrt agent --address {head['address']} --token-file {head['token_file']}\n"
              f"  stop it: meshrt stop")
        return 0
    if proc.poll() is None:
        proc.kill()
    print(f"meshrt start: the head did not come up; its output, in {log_path}, ends with:\n"
          + _tail(log_path), file=sys.stderr)
    return 1


def stop(timeout_s: float = 30.0) -> int:
    """``meshrt stop``: end this host's head (and with it the cluster's processes)."""
    import select

    from . import cluster_file

    head = cluster_file.read()
    if head is None:
        print("meshrt stop: no meshrt head runs on this host")
        return 0
    pid = head["pid"]
    try:
        exited = os.pidfd_open(pid)  # (not our child: its pidfd says when it has exited)
    except ProcessLookupError:
        exited = None
    gone = exited is None
    try:
        os.kill(pid, signal.SIGTERM)
        if exited is not None:  # (readable once it has ended, reaped or not)
            gone = bool(select.select([exited], [], [], timeout_s)[0])
    except ProcessLookupError:
        gone = True
    finally:
        if exited is not None:
            os.close(exited)
    if not gone:
        os.kill(pid, signal.SIGKILL)
        cluster_file.remove(pid)
        print(f"meshrt stop: the head (pid {pid}) did not stop within {timeout_s:.0f} s; killed it")
        return 1
    print(f"meshrt stop: stopped the head (pid {pid})")
    return 0


def _tail(path: str, lines: int = 20) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

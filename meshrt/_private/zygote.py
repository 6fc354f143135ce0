"""The zygote: a clean, single-threaded process that forks workers on request.

The driver holds threads (its event loop), so it must never fork. Instead it starts
this process once (``python -m meshrt._private.zygote FD PARENT_PID``), which
imports the worker's modules and then forks a worker in ~4 ms instead of paying a
~60 ms interpreter start each time.

Channel: a SOCK_SEQPACKET socketpair (message boundaries kept, file descriptors
passed alongside). Requests: ``("spawn", worker_id, env, kind)`` with the worker's
stdout and stderr pipe ends attached. Replies: ``("spawned", worker_id, pid)`` and
``("exited", pid, returncode)`` whenever a child ends. A third descriptor, when
sent, is the host's object store. The zygote dies with its
parent (PR_SET_PDEATHSIG on Linux, EOF on the channel everywhere), and its children
die with it the same way.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import socket
import sys

from . import procutil

# Preload what every worker needs, so a fork starts with it imported.
from . import worker as _worker  # noqa: F401

_MAX_PACKET = 1 << 20


def main() -> None:
    serve(int(sys.argv[1]), int(sys.argv[2]))


def serve(channel_fd: int, parent: int) -> None:
    channel = socket.socket(fileno=channel_fd)
    procutil.die_with_parent(parent)

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    children: set[int] = set()

    def send(msg) -> None:
        try:
            channel.sendmsg([pickle.dumps(msg)])
        except OSError:
            pass

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            children.discard(pid)
            send(("exited", pid, os.waitstatus_to_exitcode(status)))

    while True:
        try:
            readable, _, _ = select.select([channel, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in readable:
            try:
                while os.read(wake_r, 4096):
                    pass
            except BlockingIOError:
                pass
            reap()
        if channel in readable:
            requests = _waiting_requests(channel)
            if requests is None:  # the driver is gone: take every child with us
                for pid in children:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                os._exit(0)
            for index, (request, fds) in enumerate(requests):
                if request[0] != "spawn":
                    continue
                _, worker_id, env, kind = request
                procutil.freeze_imports_out_of_gc()
                pid = os.fork()
                if pid == 0:
                    channel.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    # The pipes of the workers still to fork from this batch are not
                    # this one's: held open here, they would keep a dead sibling's
                    # output from ending, and its death from being reported.
                    for _, later in requests[index + 1:]:
                        for fd in later:
                            os.close(fd)
                    _child(worker_id, env, kind, fds)
                    os._exit(0)  # not reached
                for fd in fds:
                    os.close(fd)
                children.add(pid)
                send(("spawned", worker_id, pid))


def _waiting_requests(channel: socket.socket) -> list | None:
    """Every request waiting on the channel (None once the driver is gone), processes for
    actors first: a task pool's prestart, asked for at init, must not hold up the
    processes of a mesh asked for a moment later (each fork takes milliseconds)."""
    requests = []
    while True:  # (readable: the first receive does not block)
        try:
            data, fds, _flags, _addr = socket.recv_fds(channel, _MAX_PACKET, 4)
        except (ConnectionError, OSError):
            data, fds = b"", []
        if not data:
            return None
        requests.append((pickle.loads(data), fds))
        # (recv_fds ignores MSG_DONTWAIT before Python 3.12: ask select instead)
        if not select.select([channel], [], [], 0)[0]:
            break
    requests.sort(key=lambda r: r[0][0] == "spawn" and r[0][3] == "task")  # stable
    return requests


def _child(worker_id: int, env: dict, kind: str, fds: list[int]) -> None:
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    zygote = os.getppid()
    procutil.die_with_parent(zygote)
    if len(fds) >= 2:
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in fds[:2]:
            os.close(fd)
    # Fresh stream objects on fds 1 and 2, written through: a zygote forked from the
    # driver carries the driver's (a test runner's capture files, say).
    import io

    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True, line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True, line_buffering=True,
                                  errors="backslashreplace")
    if len(fds) >= 3:  # the host's object store, handed over with the request
        env = {**env, "MESHRT_STORE_FD": str(fds[2])}
    os.environ.update(env)
    python = env.get("MESHRT_PYTHON")
    if python and python != sys.executable:  # (HostMesh.with_python_executable: mesh/python_executable.py)
        for fd in (1, 2, *fds[2:3]):
            os.set_inheritable(fd, True)
        try:
            os.execv(python, [python, "-m", "meshrt._private.worker", str(worker_id), kind])
        except OSError as err:
            print(f"meshrt: cannot run {python} for worker {worker_id}: {err}", file=sys.stderr)
            os._exit(1)
    import random

    random.seed()
    code = 0
    try:
        _worker.main(worker_id, kind)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
    os._exit(code)


if __name__ == "__main__":
    main()

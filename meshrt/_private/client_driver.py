"""A driver attached to a long-running head: ``meshrt.init(address="auto")`` where
``meshrt start --head`` runs (head.py, cluster_file.py), as Ray's drivers attach to a
cluster that ``ray start`` left running.

The program's process becomes a core as a worker's is (it owns what it puts and
submits; its calls go straight to actors), with the head host's shared-memory store
mapped (its memfd, opened through /proc: the same user, on the head host) and a job of
its own (jobs.py): a namespace (the one given, else a fresh one, as Ray's anonymous
namespaces), and its sys.path, directory and runtime_env carried by everything it
submits (job_context.py). What the cluster prints for its job is printed here.
``shutdown()`` detaches: the cluster goes on, with the detached actors this driver made.
"""

from __future__ import annotations

import logging
import os
import sys
import uuid

from . import cluster_file, context, progress_bars, runtime_env, state
from . import messages as m
from .log_options import write
from .pending import fail_everything
from .portal import LoopThread
from .worker_core import WorkerCore

log = logging.getLogger("meshrt")
ATTACH_TIMEOUT_S = 30.0


class ClientCore(WorkerCore):
    is_client = True

    def __init__(self, worker_id: int, io, token: bytes, controller: str, log_to_driver: bool) -> None:
        super().__init__(worker_id, io, token, controller, "driver")
        self.log_to_driver = log_to_driver
        self.head_lost = False
        self.handlers[m.JobOutput] = self.on_job_output

    def on_job_output(self, conn, msg: m.JobOutput) -> None:
        if not self.log_to_driver:
            return
        lines = list(msg.lines)
        if msg.stream == "stdout":  # (progress bars of tqdm_ray are drawn here)
            lines = progress_bars.take(msg.prefix, lines)
        if lines:
            write(msg.stream, [msg.prefix + line for line in lines])

    def _controller_lost(self, conn, _exc) -> None:
        """The head went away (``meshrt stop``, a crash): this program goes on, and what
        it waits for fails saying so (a worker would exit here)."""
        if self.closed or self.head_lost:
            return
        self.head_lost = True
        from .. import exceptions as exc
        from ..objstore.serialization import system_error_payload

        log.warning("meshrt: the cluster's head went away; this driver is detached from it")
        fail_everything(self, system_error_payload(exc.RaySystemError("the cluster's head went away (meshrt stop?)")))

    def on_exit(self, conn, msg: m.Exit) -> None:
        self._controller_lost(conn, None)

    def shutdown(self) -> None:
        """Detach: flush what is owed, close the connections; the cluster goes on."""
        from ..objstore.serialization import set_store_client

        self.head_lost = True  # (from here on, the connection's end is ours)

        async def close() -> None:
            self.drain()
            for conn in [self.ctl, *(c.conn for c in self.channels.values())]:
                if conn is not None and not conn.closed:
                    conn._flush()
                    conn.close()
            if self.server is not None:
                self.server.close()

        try:
            if not self.io.loop.is_closed():
                self.io.run_sync(close(), 10)
        finally:
            set_store_client(None)
            store, self.store = self.store, None
            if store is not None:
                store.arena.close()
                os.close(self.store_fd)
            self.close()
            self.io.stop()


def attach(info: dict, namespace: str | None, job_env: dict | None, log_config, log_to_driver: bool,
           job_details: dict | None = None):
    """This process, attached to the head ``info`` names (cluster_file.read())."""
    token = _token(info)
    store_fd = _open_store(info)
    io = LoopThread("meshrt-client")
    try:
        details = {
            "pid": os.getpid(), "entrypoint": " ".join([os.path.basename(sys.executable), *sys.argv]),
            "namespace": namespace or str(uuid.uuid4()),  # (Ray's anonymous namespace: this job's alone)
            "sys_path": [p if p else os.getcwd() for p in sys.path], "cwd": os.getcwd(),
            "runtime_env": job_env, "logging_config": log_config, **(job_details or {}),
        }
        worker_id, job_id = io.run_sync(_ask(info["controller"], token, "attach_driver", details),
                                        ATTACH_TIMEOUT_S)
        core = _core(info, io, token, worker_id, store_fd, log_to_driver)
        io.run_sync(core.connect(), ATTACH_TIMEOUT_S)
    except BaseException:
        io.stop()
        os.close(store_fd)
        raise
    job = {"job_id": job_id, "namespace": details["namespace"], "sys_path": details["sys_path"],
           "cwd": details["cwd"]}
    env = job_env
    if job_env:
        env, packages = runtime_env.resolve(job_env, "meshrt.init()")
        for uri, data in packages.items():
            core.request_sync("put_package", uri, data, True)
    runtime_env.set_current({**(env or {}), "_job": job})
    context.process.update(job_id=job_id, namespace=details["namespace"], worker_id=worker_id)
    core.config.update(job_id=job_id, namespace=details["namespace"], session=info["session"],
                       temp_dir=info.get("temp_dir"), **(job_details or {}))
    state.set_core(core)
    return core


def _core(info: dict, io, token: bytes, worker_id: int, store_fd: int, log_to_driver: bool) -> ClientCore:
    from .host_directory import host_ip

    bind = info["address"].rsplit(":", 1)[0]  # (peers on other hosts dial it where they dial the head)
    env = {"MESHRT_STORE_FD": str(store_fd), "MESHRT_STORE_SIZE": str(info["store_size"]),
           "MESHRT_LISTEN_HOST": bind or "0.0.0.0"}
    if bind in ("", "0.0.0.0", "::"):
        env["MESHRT_ADVERTISE_HOST"] = host_ip()
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        core = ClientCore(worker_id, io, token, info["controller"], log_to_driver)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    core.store_fd = store_fd
    return core


def _token(info: dict) -> bytes:
    """The head's token (beside its record; MESHRT_TOKEN where that file cannot be read)."""
    from . import cluster_token

    try:
        return cluster_file.token(info)
    except OSError:
        token = cluster_token.from_env_or_file(None)
        if token is None:
            raise ConnectionError(f"meshrt.init(address=...): cannot read the cluster token at {info['token_file']}; "
                                  "set MESHRT_TOKEN to the head's") from None
        return token


def _open_store(info: dict) -> int:
    """The head host's store, through the head's own descriptor of it."""
    path = f"/proc/{info['pid']}/fd/{info['store_fd']}"
    try:
        return os.open(path, os.O_RDWR)
    except OSError as err:
        raise ConnectionError(
            f"meshrt.init(address=...): cannot map the head's object store ({path}: {err.strerror}); a driver "
            f"attaches from the head's host, as the user who started it (meshrt start --head)") from None


async def _ask(address: str, token: bytes, method: str, *args):
    from .control_client import request_once

    response = await request_once(address, token, method, args)
    if not response.ok:
        raise response.value
    return response.value

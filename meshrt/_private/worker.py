"""A worker process: ``python -m meshrt._private.worker`` or a fork of the zygote.

Its core loop runs on a daemon thread; the main thread runs user code (executor.py).
Importing this module must not start threads: the zygote imports it before forking.
"""

from __future__ import annotations

import os
import sys

from ..exceptions import RuntimeEnvSetupError
from . import debug_sessions, pip_envs, procutil, runtime_env, state
from .portal import LoopThread
from .worker_core import WorkerCore

CONNECT_TIMEOUT_S = 60.0


def main(worker_id: int, kind: str) -> None:
    procutil.freeze_imports_out_of_gc()
    token = bytes.fromhex(os.environ.pop("MESHRT_TOKEN"))
    address = os.environ["MESHRT_CONTROLLER"]
    io = LoopThread("meshrt-core")
    core = WorkerCore(worker_id, io, token, address, kind)
    state.set_core(core)
    try:
        io.run_sync(core.connect(), CONNECT_TIMEOUT_S)
    except (ConnectionRefusedError, FileNotFoundError, ConnectionResetError):
        os._exit(0)  # the driver shut down while we were starting: nothing to serve
    failed = os.environ.pop(pip_envs.ERROR_ENV, None)
    if failed:  # (the packages of its runtime_env could not be installed: every call here fails with that)
        runtime_env.setup_error = RuntimeEnvSetupError(failed)
        print(f"meshrt: worker {worker_id}: {failed}", file=sys.stderr)
    try:
        runtime_env.start_worker(core, core.config.get("runtime_env"))
    except Exception as err:  # noqa: BLE001 - (said in the driver's output; every call here fails with it)
        print(f"meshrt: worker {worker_id}: {err}", file=sys.stderr)
    debug_sessions.install_breakpoint_hook()  # (breakpoint() waits for `meshrt debug`: no terminal here)
    core.executor.run_forever()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "task")

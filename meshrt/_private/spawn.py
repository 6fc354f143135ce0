"""Starting workers: the zygote client, and the pipes that carry workers' output.

Each worker gets its own stdout and stderr pipes, made here and handed to the
zygote with the spawn request, so output from a worker's first instruction on
(including a crash during start-up) reaches the driver, prefixed with the worker's
name and pid, and the last stderr lines are kept to explain a death.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
from collections.abc import Callable

from . import job_context, progress_bars
from .log_options import write

log = logging.getLogger("meshrt")

STDERR_TAIL_LINES = 20


class Zygote:
    """The controller's handle on the zygote process."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        env: dict,
        on_spawned: Callable[[int, int], None],
        on_exited: Callable[[int, int], None],
        on_lost: Callable[[], None],
        store_fd: int | None = None,
        preforked: tuple | None = None,
    ) -> None:
        self.loop = loop
        self.store_fd = store_fd  # the host's object store: handed to each worker
        self.env = env
        # What a worker needs in its environment on top of the zygote's own (which,
        # for a zygote forked from the driver, is the driver's).
        self.spawn_env = {k: v for k, v in env.items() if k.startswith("MESHRT_") or k == "PYTHONUNBUFFERED"}
        self.on_spawned = on_spawned
        self.on_exited = on_exited
        self.on_lost = on_lost
        self.sock: socket.socket | None = None
        self.proc = None
        self.preforked = preforked  # (pid, socket) of a zygote forked before any thread

    def start(self) -> None:
        if self.preforked is not None:
            pid, ours = self.preforked
            self.preforked = None
            self.proc = _Forked(pid)
            ours.setblocking(False)
            self.sock = ours
            self.loop.add_reader(ours.fileno(), self._readable)
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "meshrt._private.zygote", str(theirs.fileno()), str(os.getpid())],
            pass_fds=(theirs.fileno(),),
            env=self.env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in the terminal reaches the driver only
        )
        theirs.close()
        ours.setblocking(False)
        self.sock = ours
        self.loop.add_reader(ours.fileno(), self._readable)

    def spawn(self, worker_id: int, env: dict, kind: str) -> tuple[int, int]:
        """Ask for a worker; returns the read ends of its stdout and stderr pipes."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        fds = [out_w, err_w] + ([self.store_fd] if self.store_fd is not None else [])
        try:
            socket.send_fds(self.sock, [pickle.dumps(("spawn", worker_id, {**self.spawn_env, **env}, kind))], fds)
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        return out_r, err_r

    def _readable(self) -> None:
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._lost()
                return
            msg = pickle.loads(data)  # our own child over a private socketpair
            if msg[0] == "spawned":
                self.on_spawned(msg[1], msg[2])
            elif msg[0] == "exited":
                self.on_exited(msg[1], msg[2])

    def _lost(self) -> None:
        if self.sock is not None:
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None
            if self.proc is not None:
                self.proc.wait()  # it closed its end: it is exiting, reap it
            self.on_lost()

    async def close(self, timeout: float = 3.0) -> None:
        if self.sock is not None:
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()  # EOF: the zygote kills what is left and exits
            self.sock = None
        proc = self.proc
        if proc is None:
            return
        if not await _exited(self.loop, proc, timeout):
            proc.kill()
        proc.wait()


class _Forked:
    """The few Popen methods the controller uses, for a zygote forked from the driver."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = 0
                return 0
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                self.returncode = 0
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, 9)
        except ProcessLookupError:
            pass


def fork_zygote_if_safe() -> tuple[int, socket.socket] | None:
    """Fork the zygote straight from the driver, when that is safe.

    A fresh interpreter importing the worker code costs ~0.2 s before the first
    worker can start; a fork of the driver, which has already imported it, costs
    milliseconds. A fork copies only the calling thread, so it is done before the
    controller's thread starts, and only when no other Python thread runs and CUDA
    is not initialized. Native thread pools (OpenBLAS, OpenMP: ``import numpy``
    starts one) re-create themselves in a forked child through their fork handlers,
    as under multiprocessing's "fork" start. Modules the driver imported are then
    loaded in every worker, their pages shared copy-on-write.
    ``MESHRT_FORK_ZYGOTE=0`` always starts a fresh interpreter instead.
    """
    if not sys.platform.startswith("linux") or os.environ.get("MESHRT_FORK_ZYGOTE") == "0":
        return None
    import threading

    if threading.active_count() != 1:
        return None
    if _gpu_driver_started():  # (torch.cuda initialized, or only asked whether there is a GPU)
        return None
    probe = _gnu_openmp_threads_may_run()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    parent = os.getpid()
    import warnings

    with warnings.catch_warnings():  # Python 3.12+ warns about native threads; see above
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the zygote: never returns into the driver's program
        code = 1
        try:
            _become_zygote(theirs.fileno(), parent, keep=ours.fileno(), probe=probe)
            code = 0
        finally:
            os._exit(code)
    theirs.close()
    return pid, ours


def _gpu_driver_started() -> bool:
    """Whether NVIDIA's driver (CUDA or NVML) has started in this process:
    ``torch.cuda.is_available()`` and ``device_count()`` start it, without
    ``torch.cuda.is_initialized()``. It reads CUDA_VISIBLE_DEVICES once, when it starts,
    so workers forked after that would see every GPU whatever their CUDA_VISIBLE_DEVICES
    says (and NVML fails in them): the zygote is then a fresh interpreter. Asked of the
    libraries only if already loaded (``import torch`` loads them, unstarted), with calls
    that answer "not initialized" rather than start anything."""
    import ctypes

    def loaded(name: str):
        try:
            return ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:
            return None

    count = ctypes.c_uint(0)
    cuda = loaded("libcuda.so.1")
    if cuda is not None and cuda.cuDeviceGetCount(ctypes.byref(count)) != 3:  # CUDA_ERROR_NOT_INITIALIZED
        return True
    nvml = loaded("libnvidia-ml.so.1")
    return nvml is not None and nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 1  # NVML_ERROR_UNINITIALIZED


def _forget_driver_exit_handlers() -> None:
    """The driver's atexit handlers and finalizers are not its workers' to run (an actor
    that ends runs its own: actor_hooks.py); the standard library's own go on working."""
    import atexit
    import logging
    import weakref

    atexit._clear()
    try:  # (weakref.finalize registers its atexit runner once per process: again, for the workers')
        for info in weakref.finalize._registry.values():
            info.atexit = False  # (the driver's objects: not finalized at a worker's exit)
        weakref.finalize._registered_with_atexit = False
    except AttributeError:  # pragma: no cover - (another Python's internals: finalizers run as before)
        pass
    atexit.register(logging.shutdown)


def _become_zygote(channel_fd: int, parent: int, keep: int, probe: bool = True) -> None:
    os.setsid()  # Ctrl-C in the terminal reaches the driver only
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.close(keep)
    _let_go_of_driver_files(channel_fd)
    _forget_driver_exit_handlers()
    # The driver's log handlers may write to files just closed: workers start clean.
    import logging

    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        if isinstance(logger, logging.Logger):
            logger.handlers.clear()
    if probe and _inherited_thread_pool_broken():
        # Start over as a fresh interpreter (same pid, same channel): slower workers'
        # first start, but workers that can run torch in parallel.
        os.set_inheritable(channel_fd, True)
        os.execv(sys.executable, [sys.executable, "-m", "meshrt._private.zygote", str(channel_fd), str(parent)])
    from . import zygote

    zygote.serve(channel_fd, parent)


def _let_go_of_driver_files(channel_fd: int) -> None:
    """Nothing of the driver's stays open here but stdout/stderr and our channel.

    The driver's Python objects that own a descriptor (sockets, files, a test runner's
    capture files) live on in this copy of its memory, and close their descriptor
    number when collected. Were that number reused meanwhile (the pipe of a worker
    about to be forked, the store's memory file), the close would hit the wrong file.
    So each descriptor is pointed at /dev/null instead of closed: the driver's file is
    let go, the number stays taken (and is closed on exec, should we start over).
    """
    try:
        numbers = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: close them, as best we can
        os.closerange(3, channel_fd)
        os.closerange(channel_fd + 1, _max_fd())
        return
    devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    for fd in numbers:
        if fd > 2 and fd not in (channel_fd, devnull):
            try:
                os.dup2(devnull, fd, inheritable=False)
            except OSError:  # (the listing's own descriptor, closed by now)
                pass
    os.close(devnull)


def _gnu_openmp_threads_may_run() -> bool:
    """Might this process hold a GNU OpenMP thread pool (see _inherited_thread_pool_broken)?

    Asked in the driver before the fork, where the threads still are: no when every
    other thread sleeps in a system call made outside libgomp (libgomp's idle workers
    wait on a futex from its own code, so an existing pool shows up there). A thread
    running, or anything unreadable, counts as maybe: then the zygote's probe decides.
    Other OpenMP runtimes (LLVM's, Intel's) re-create their pool in a forked child.
    """
    if sys.modules.get("torch") is None:
        return False
    try:
        gomp = []
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "libgomp" in line:
                    start, end = line.split(None, 1)[0].split("-")
                    gomp.append((int(start, 16), int(end, 16)))
        if not gomp:
            return False
        import threading

        me = threading.get_native_id()
        for tid in os.listdir("/proc/self/task"):
            if int(tid) == me:
                continue
            with open(f"/proc/self/task/{tid}/syscall") as f:
                fields = f.read().split()
            if not fields or fields[0] == "running":
                return True
            pc = int(fields[-1], 16)
            if any(start <= pc < end for start, end in gomp):
                return True
        return False
    except (OSError, ValueError):
        return True


def _inherited_thread_pool_broken() -> bool:
    """Can a child of this fork still run torch ops in parallel?

    A driver that already ran a parallel torch op owns a GNU OpenMP thread pool, which
    a forked child inherits as a list of threads that were never copied: the child's
    first parallel op waits for them forever. There is no way to ask libgomp, so a
    throw-away child tries one op (just big enough to be split across threads) and
    says so through a pipe the moment it is done: waiting for it to exit would add
    the tear-down of a torch-sized address space to the first spawn.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    import select

    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(done_r)
            torch.set_num_threads(max(2, torch.get_num_threads()))  # as a worker may
            torch.ones(1 << 17).sum()  # four grains of at::internal::GRAIN_SIZE
            os.write(done_w, b"1")
        finally:
            os._exit(0)
    os.close(done_w)
    try:
        ready, _, _ = select.select([done_r], [], [], 1.0)
        ok = bool(ready) and os.read(done_r, 1) == b"1"
    finally:
        os.close(done_r)
    if not ok:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.waitpid(pid, 0)  # it has finished its op (or been killed): exit is on its way
    return not ok


def _max_fd() -> int:
    try:
        return os.sysconf("SC_OPEN_MAX")
    except (ValueError, OSError):
        return 65536


async def end_preforked(loop, preforked: tuple) -> None:
    """A zygote forked for a driver whose start failed before adopting it: the end of
    its channel ends it."""
    pid, ours = preforked
    ours.close()
    proc = _Forked(pid)
    if not await _exited(loop, proc, 3.0):
        proc.kill()
    proc.wait()


async def _exited(loop, proc, timeout: float) -> bool:
    """Wait for a child to exit without polling (a pidfd on Linux); True if it did."""
    if proc.poll() is not None:
        return True
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # not Linux >= 5.3: fall back to polling
        deadline = loop.time() + timeout
        while proc.poll() is None and loop.time() < deadline:  # noqa: ASYNC110 - no event exists
            await asyncio.sleep(0.005)
        return proc.poll() is not None
    done = loop.create_future()
    loop.add_reader(fd, lambda: done.done() or done.set_result(None))
    try:
        await asyncio.wait_for(done, timeout)
        return True
    except asyncio.TimeoutError:
        return False
    finally:
        loop.remove_reader(fd)
        os.close(fd)


class OutputPipe:
    """Reads one worker stream line by line and hands the lines to ``sink(stream, lines)``.

    Written on ``add_reader`` rather than ``loop.connect_read_pipe``: uvloop's pipe
    transport and the file object it is given both close the same descriptor number
    (uvloop issue #763), and the second close may hit a file another thread has just
    opened under that number. Here the descriptor has one owner: this reader.
    """

    def __init__(self, loop, fd: int, stream_name: str, sink: Callable[[str, list[str]], None],
                 on_eof: Callable[[], None]) -> None:
        self.loop = loop
        self.fd: int | None = fd
        self.stream_name = stream_name
        self.sink = sink
        self.on_eof = on_eof
        self._partial = b""
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        while self.fd is not None:
            try:
                data = os.read(self.fd, 1 << 16)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self.close()
                return
            self._received(data)

    def _received(self, data: bytes) -> None:
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if lines:
            self._emit(lines)

    def _emit(self, lines: list[bytes]) -> None:
        self.sink(self.stream_name, [line.decode("utf-8", "replace").rstrip("\r") for line in lines])

    def close(self) -> None:
        """Stop reading (at the end of the stream, or when the runtime stops)."""
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        if not self.loop.is_closed():
            self.loop.remove_reader(fd)
        os.close(fd)
        if self._partial:
            self._emit([self._partial])
            self._partial = b""
        self.on_eof()


def worker_output(record, forward: bool, keep=None, to_job=None) -> Callable[[str, list[str]], None]:
    """The controller's sink: keep the stderr tail, print with the worker's name, and
    ``keep(stream, lines)`` in the worker's log files (log_files.py). Lines a worker
    wrote for an attached driver's job go to that driver instead of being printed here:
    ``to_job(job id, stream, prefix, lines)`` says whether it took them (jobs.py)."""

    def sink(stream_name: str, text: list[str]) -> None:
        prefix = f"({record.label} pid={record.pid}) "
        shown = forward and record.log_stream  # (a mesh's logging_option may say otherwise)
        here: list[str] = []
        for job, lines in job_context.split(record, stream_name, text):
            if stream_name == "stderr":
                record.stderr_tail.extend(lines)
            if keep is not None:
                keep(stream_name, lines)
            if job is None or to_job is None or not (shown and to_job(job, stream_name, prefix, lines)):
                here.extend(lines)
        if not here:
            return
        text = here
        if stream_name == "stdout":  # (progress bars' states: drawn by the driver, not printed)
            text = progress_bars.take(prefix if shown else None, text)
        if shown:
            if record.log_aggregator is not None:
                record.log_aggregator.add(stream_name, prefix, text)
            else:
                write(stream_name, [prefix + t for t in text])

    return sink


def new_tail() -> collections.deque:
    return collections.deque(maxlen=STDERR_TAIL_LINES)


def attach_pipes(loop, out_fd: int, err_fd: int, sink, on_eof) -> list[OutputPipe]:
    """Read a worker's stdout and stderr on ``loop`` (called on the loop's thread)."""
    return [OutputPipe(loop, fd, name, sink, on_eof) for fd, name in ((out_fd, "stdout"), (err_fd, "stderr"))]

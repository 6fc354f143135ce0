"""This process's UCX worker, driven by an asyncio loop through its event fd.

One worker per process, on a loop thread of its own ("meshrt-tensor"): transfers
are posted there, the loop sleeps on the worker's event fd while nothing moves (no
thread spins), and progress runs only when UCX says something happened. Endpoints
and unpacked remote keys are cached per peer. Transports follow UCX's own selection
(``UCX_TLS``): shared memory and tcp on one machine, InfiniBand/RoCE with GPUDirect
RDMA where the hardware and the UCX build have them.

Which libucp: ``MESHRT_UCX`` unset or ``wheel`` takes the libucx-cu12 wheel's;
``system`` the system loader's ``libucp.so.0`` (a cluster's UCX, with InfiniBand);
any other value is the path of a libucp to load.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import threading

from .. import _C

# Defaults we set unless the user has (any UCX_* variable of theirs wins):
_DEFAULT_ENV = {
    # Leave SIGSEGV and friends to Python, torch and faulthandler.
    "UCX_ERROR_SIGNALS": "",
    "UCX_WARN_UNUSED_ENV_VARS": "n",
    # A peer that died is reported through our exceptions; UCX would also print each
    # refused connection. UCX_LOG_LEVEL=warn shows them when debugging.
    "UCX_LOG_LEVEL": "fatal",
    # UCX's shared-memory transports cannot report a dead peer, which our endpoints
    # require; same-machine CPU copies go through cross-memory attach instead (cma.py).
    # Not opening them also leaves no /dev/shm segments behind.
    "UCX_TLS": "^sm",
    # Large tcp segments (UCX: 8 KiB send, 64 KiB receive) for software-emulated RMA:
    # with 1 MiB a 64 MiB+ get ran at 3.0-3.6 GB/s on loopback here, every run; with
    # 64 KiB it swung between 1.6 and 4.5 from run to run, and with 8 KiB ~2.5x slower.
    # Transfers of ~1 MiB lose a little (1.5 vs 2 GB/s); the receive segment must be at
    # least the send segment.
    "UCX_TCP_TX_SEG_SIZE": "1m",
    "UCX_TCP_RX_SEG_SIZE": "1m",
    # Connect without blocking: UCX connects to a peer at the first transfer with it, on
    # the engine's one thread, and to a host cut off the network a blocking connect
    # waits minutes for an answer while every other transfer of this process waits too
    # (tests/test_multihost_netns.py, a connect to a cut-off host).
    "UCX_TCP_CONN_NB": "y",
    # Memory-event hooks cost ~0.4 s at load (they patch every loaded library) and only
    # serve UCX's registration cache; RDMA clusters may set UCX_MEM_EVENTS=yes.
    "UCX_MEM_EVENTS": "no",
}


class TransferError(RuntimeError):
    """A UCX transfer failed; ``status`` is UCX's code, ``peer_lost`` says whether the
    other side went away (its process died or its endpoint was closed)."""

    def __init__(self, message: str, status: int, peer_lost: bool) -> None:
        super().__init__(message)
        self.status = status
        self.peer_lost = peer_lost


_UNREACHABLE = -6  # UCS_ERR_UNREACHABLE
# (meshrt's own check of routes between hosts says the fall-back itself: ucx_routes.py)
NO_ROUTE_FALL_BACK = "; between meshrt hosts, MESHRT_PULL_ENGINE=0 sends large values inside the messages instead"
_NO_ROUTE = ("none of UCX's interfaces here reaches that machine (UCX_NET_DEVICES chooses them; UCX skips "
             "bridge devices unless UCX_TCP_BRIDGE_ENABLE=y)" + NO_ROUTE_FALL_BACK)


def _peer_lost(status: int) -> bool:
    """UCS codes (ucs/type/status.h) that mean the other side is gone: unreachable (-6),
    canceled (-16), timed out (-20), not connected (-24), connection reset (-25), and the
    link (-40..-59) and endpoint (-60..-89) failure ranges."""
    return status in (-6, -16, -20, -24, -25) or -89 <= status <= -40


def library_path() -> str:
    choice = os.environ.get("MESHRT_UCX", "wheel")
    if choice in ("off", "0"):
        raise OSError("UCX is turned off (MESHRT_UCX=off)")
    if choice == "system":
        return "libucp.so.0"
    if choice != "wheel":
        return choice
    try:
        import libucx
    except ImportError:
        raise OSError("the libucx-cu12 package is not installed: `pip install libucx-cu12`, or "
                      "MESHRT_UCX=system to use the machine's UCX") from None
    libucx.load_library()  # its libucs and libuct, which libucp needs
    return os.path.join(os.path.dirname(libucx.__file__), "lib", "libucp.so")


_unavailable: tuple[int, str] | None = None  # (pid, why) once opening UCX failed here


def engine_or_none() -> Engine | None:
    """The engine, or None (logged once) when UCX cannot be opened in this process."""
    global _unavailable
    if _unavailable is not None and _unavailable[0] == os.getpid():
        return None
    try:
        return Engine.get()
    except OSError as err:
        _unavailable = (os.getpid(), str(err))
        import logging

        logging.getLogger("meshrt").warning("meshrt: UCX is unavailable (%s); TensorBuffers of this process "
                                            "reach other machines only through it", err)
        return None


def close_engine() -> None:
    """Close this process's UCX worker, if open; the next transfer opens a new one.
    Buffers registered before stay readable only by the same-machine paths."""
    with Engine._create_lock:  # held throughout: a new engine must not open under a closing one
        engine, Engine._instance = Engine._instance, None
        if engine is not None and engine.pid == os.getpid():
            from . import buffer

            buffer.forget_slots()
            engine.close()


def why_unavailable() -> str:
    return _unavailable[1] if _unavailable else ""


class Engine:
    """The process's UCX worker. ``Engine.get()`` opens it on first use."""

    _instance: Engine | None = None
    _create_lock = threading.Lock()

    @classmethod
    def get(cls) -> Engine:
        engine = cls._instance
        if engine is None or engine.pid != os.getpid():  # a forked child opens its own
            with cls._create_lock:
                engine = cls._instance
                if engine is None or engine.pid != os.getpid():
                    engine = cls._instance = Engine()
        return engine

    def __init__(self) -> None:
        from .._private.portal import LoopThread

        for key, value in _DEFAULT_ENV.items():
            os.environ.setdefault(key, value)
        _C.ucx_open(library_path())
        self.pid = os.getpid()
        self.address: bytes = _C.ucx_address()
        self.io = LoopThread("meshrt-tensor")
        self.pending: dict[int, tuple] = {}  # token -> (future, endpoint, timer)
        self.tokens = itertools.count(1)
        self.endpoints: dict[bytes, int] = {}  # peer address -> endpoint
        self.rkeys: dict[tuple[int, bytes], int] = {}  # (endpoint, packed key) -> unpacked
        self.failed: dict[int, int] = {}  # endpoint -> status that ended it
        self.closed = False
        self._post_lock = threading.Lock()  # no transfer is posted to a loop that stopped
        self.io.run_sync(self._watch(), timeout=30)

    def close(self) -> None:
        """Fail what is queued or in flight, destroy the worker, stop the loop thread."""
        with self._post_lock:
            self.closed = True

        async def unwatch():
            import asyncio

            asyncio.get_running_loop().remove_reader(_C.ucx_efd())
            for ep in list(self.endpoints.values()):
                self._close_endpoint(ep)  # cancels requests: their callbacks come in progress
            self._progress_once()

        try:
            self.io.run_sync(unwatch(), timeout=10)
        finally:
            self.io.stop()
            _C.ucx_close()  # after the loop: nothing of ours calls into UCX any more
            for done, _ep, timer in self.pending.values():
                if timer is not None:
                    timer.cancel()
                if not done.done():
                    done.set_exception(TransferError("the UCX worker was closed", -16, True))
            self.pending.clear()

    async def _watch(self) -> None:
        import asyncio

        asyncio.get_running_loop().add_reader(_C.ucx_efd(), self._progress)
        self._progress()

    # -- transfers (any thread) -----------------------------------------------------------

    def transfer(self, is_put: bool, address: bytes, rkey: bytes, local: int, nbytes: int, remote: int,
                 cuda: bool, timeout: float | None) -> concurrent.futures.Future:
        """Start a one-sided get (into ``local``) or put (from it); the future settles
        once UCX is done with ``local``: never before, even on errors and timeouts."""
        done: concurrent.futures.Future = concurrent.futures.Future()
        with self._post_lock:
            if not self.closed:
                self.io.post(self._start, is_put, address, rkey, local, nbytes, remote, cuda, timeout, done)
                return done
        done.set_exception(TransferError("the UCX worker was closed", -16, True))
        return done

    def forget_rkey(self, address: bytes, rkey: bytes) -> None:
        """A holder dropped its handle: the unpacked key goes (any thread)."""
        with self._post_lock:
            if not self.closed:
                self.io.post(self._forget_rkey, address, rkey)

    def _forget_rkey(self, address: bytes, rkey: bytes) -> None:
        ep = self.endpoints.get(address)
        unpacked = self.rkeys.pop((ep, rkey), None) if ep is not None else None
        if unpacked is not None:
            _C.ucx_rkey_destroy(unpacked)

    # -- on the loop ----------------------------------------------------------------------

    def _start(self, is_put, address, rkey, local, nbytes, remote, cuda, timeout, done) -> None:
        if self.closed:
            done.set_exception(TransferError("the UCX worker was closed", -16, True))
            return
        try:
            ep = self._endpoint(address)
            unpacked = self._rkey(ep, rkey)
            token = next(self.tokens)
            started = (_C.ucx_put if is_put else _C.ucx_get)(ep, unpacked, local, nbytes, remote, token, cuda)
        except RuntimeError as err:  # _C raises RuntimeError(message, status)
            status = err.args[1] if len(err.args) > 1 else -1
            done.set_exception(TransferError(str(err.args[0]), status, _peer_lost(status)))
            return
        except BaseException as err:  # noqa: BLE001 - never leave the waiter hanging
            done.set_exception(err)
            return
        if started == 0:
            done.set_result(None)
            return
        timer = None
        if timeout is not None:
            timer = self.io.loop.call_later(timeout, self._timed_out, token, timeout)
        self.pending[token] = (done, ep, timer)
        self._progress()

    def _timed_out(self, token: int, timeout: float) -> None:
        entry = self.pending.get(token)
        if entry is None:
            return
        done, ep, _ = entry
        done.meshrt_timeout = timeout  # read when the cancelled request comes back
        self._close_endpoint(ep)  # cancels its requests: they complete (with an error) in progress
        self._progress()

    def _progress_once(self) -> None:
        while _C.ucx_progress():
            pass
        self._dispatch()

    def _progress(self) -> None:
        while True:
            while _C.ucx_progress():
                pass
            self._dispatch()
            if _C.ucx_arm():
                return

    def _dispatch(self) -> None:
        for ep, status in _C.ucx_failed_endpoints():
            self.failed[ep] = status
            self._close_endpoint(ep)
        for token, status in _C.ucx_completions():
            entry = self.pending.pop(token, None)
            if entry is None:
                continue
            done, ep, timer = entry
            if timer is not None:
                timer.cancel()
            if status == 0:
                done.set_result(None)
                continue
            timeout = getattr(done, "meshrt_timeout", None)
            why = _C.ucx_status_string(status)
            if timeout is not None:
                err = TransferError(f"no reply within {timeout} s ({why})", status, True)
            else:
                status = self.failed.get(ep, status)
                err = TransferError(_C.ucx_status_string(status), status, _peer_lost(status))
            done.set_exception(err)

    def _endpoint(self, address: bytes) -> int:
        ep = self.endpoints.get(address)
        if ep is None:
            try:
                ep = _C.ucx_ep_create(address)
            except RuntimeError as err:
                if len(err.args) > 1 and err.args[1] == _UNREACHABLE:  # (a routing answer, given at once)
                    raise RuntimeError(f"{err.args[0]}; {_NO_ROUTE}", _UNREACHABLE) from None
                raise
            self.endpoints[address] = ep
        return ep

    def _rkey(self, ep: int, packed: bytes) -> int:
        key = (ep, packed)
        unpacked = self.rkeys.get(key)
        if unpacked is None:
            unpacked = self.rkeys[key] = _C.ucx_rkey_unpack(ep, packed)
        return unpacked

    def _close_endpoint(self, ep: int) -> None:
        """Forget a peer's endpoint (the next transfer to it connects afresh). The forced
        close cancels its requests first; its remote keys go after."""
        for address in [a for a, e in self.endpoints.items() if e == ep]:
            del self.endpoints[address]
            _C.ucx_ep_close(ep)
        for key in [k for k in self.rkeys if k[0] == ep]:
            _C.ucx_rkey_destroy(self.rkeys.pop(key))

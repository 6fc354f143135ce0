"""Monarch's way to bring up hosts: ``run_worker_loop_forever(address=..., ca=...)`` on each
worker machine, ``attach_to_workers(workers=[...], ca=...)`` in the client, which returns
a HostMesh {"hosts": N} of those machines.

meshrt's hosts are agents that dial the head (``meshrt agent --address HEAD:PORT``). Here
the worker listens instead: a client that passes the token handshake (the cluster token,
``MESHRT_TOKEN`` or the token file, on both sides: nothing is unpickled before it) tells
it where its head listens, and the worker runs an agent joined to that head. It serves one
client at a time; when that client goes (its connection closes), the worker ends the
agent, and with it every process the client started there, and waits for the next one,
as Monarch's does.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from .._private import cluster_token, procutil, state, wire
from .._private import messages as m
from .shape import Shape

log = logging.getLogger("meshrt")

TRUST_ALL = "trust_all_connections"
_ATTACH_TIMEOUT_S = 120.0  # (the workers' agents start their own zygote and store first)
_DIAL_WAIT_S = 60.0  # a worker not listening yet is dialled again for this long (it may still be starting)


def _check_security(ca: Any, private_key: Any, what: str) -> None:
    if private_key is not None or ca != TRUST_ALL:
        raise NotImplementedError(f"{what}: TLS keys are not supported (Monarch 0.7 refuses them too); pass "
                                  f"ca={TRUST_ALL!r}: meshrt's hosts prove the cluster token (MESHRT_TOKEN or the "
                                  f"token file) instead")


def _tcp(address: Any, what: str) -> tuple[str, int]:
    """Monarch's forms: ``tcp://host:port``, ``dial@bind`` (dialled at the first), a
    ProcAddr ``<proc-id>@tcp://host:port`` (at its location); or host:port."""
    if not isinstance(address, str) or not address:
        raise TypeError(f"{what}: give an address such as 'tcp://worker-host:4444', got {address!r}")
    text = address
    if "@" in address:
        first, _, rest = address.partition("@")
        text = first if first.startswith("tcp:") else rest
    text = text.removeprefix("tcp://").removeprefix("tcp:")
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host or "://" in text or "/" in host or int(port) > 65535:
        raise ValueError(f"{what}: {address!r} is not a TCP address; give 'tcp://HOST:PORT' (meshrt's workers "
                         f"listen on TCP only)")
    return host.strip("[]"), int(port)


# -- the worker -------------------------------------------------------------------------------


def run_worker_loop_forever(*, address: str, ca: Any = TRUST_ALL, private_key: Any = None) -> None:
    """Serve clients at ``address`` (``tcp://0.0.0.0:4444``) until this process is ended:
    each client that attaches gets this machine as a host of its meshes."""
    _check_security(ca, private_key, "run_worker_loop_forever")
    host, port = _tcp(address, "run_worker_loop_forever(address=...)")
    token = cluster_token.from_env_or_file()
    if token is None:
        token, _fresh = cluster_token.generate_or_reuse()
        print(f"meshrt worker: no MESHRT_TOKEN: using the cluster token in {cluster_token.DEFAULT_FILE}, which "
              f"clients must share (a common home directory, or MESHRT_TOKEN on both sides)", file=sys.stderr)
    asyncio.run(_WorkerLoop(token).serve(host, port))


class _WorkerLoop:
    def __init__(self, token: bytes) -> None:
        self.token = token
        self.client = None  # the connection of the client served now
        self.agent: subprocess.Popen | None = None

    async def serve(self, host: str, port: int) -> None:
        self.loop = asyncio.get_running_loop()
        server = await wire.listen(f"tcp:{host}:{port}", self.token,
                                   lambda: {"on_messages": self.on_messages, "on_close": self.on_close})
        bound = server.sockets[0].getsockname()
        print(f"meshrt worker listening on tcp://{bound[0]}:{bound[1]}", flush=True)
        await asyncio.Event().wait()

    def on_messages(self, conn, msgs: list) -> None:
        for msg in msgs:
            if type(msg) is m.AttachWorker:
                conn.send(m.AttachReply(self.attach(conn, msg)))

    def busy(self) -> bool:
        return self.agent is not None and self.agent.poll() is None

    def attach(self, conn, msg: m.AttachWorker) -> str | None:
        if self.busy() and self.client is not conn:
            return "this worker serves another client now (one at a time, as Monarch's); try another worker"
        if self.client is not None and self.client is not conn:
            self.client.close()  # (its agent ended: that client is done with this worker)
        self._end_agent()
        head = msg.head_host or conn.transport.get_extra_info("peername")[0]
        env = dict(os.environ, MESHRT_TOKEN=self.token.hex())
        me = os.getpid()
        try:  # (it dies with this worker loop, and its processes with it)
            agent = subprocess.Popen([sys.executable, "-m", "meshrt", "agent", "--address",
                                      f"{head}:{msg.head_port}", "--name", msg.name], env=env,
                                     preexec_fn=lambda: procutil.die_with_parent(me))
        except OSError as err:
            return f"the worker could not start its agent: {err}"
        self.agent, self.client = agent, conn
        self.loop.create_task(self._watch(agent, conn))
        log.info("meshrt worker: serving the client at %s:%s as host %r", head, msg.head_port, msg.name)
        return None

    async def _watch(self, agent: subprocess.Popen, conn) -> None:
        """The agent exited (its client's head went away, or it failed to start): the
        client hears it, and this worker is free."""
        code = await self.loop.run_in_executor(None, agent.wait)
        if conn is self.client and not conn.closed:
            conn.send(m.WorkerAgentEnded(code))
            conn.close()

    def on_close(self, conn, _exc) -> None:
        if conn is self.client:  # (its processes here end with it, as Monarch's do)
            self.client = None
            self._end_agent()

    def _end_agent(self) -> None:
        agent, self.agent = self.agent, None
        if agent is not None and agent.poll() is None:
            self.loop.run_in_executor(None, _reap, agent)


def _reap(agent: subprocess.Popen) -> None:
    """The agent leaves by itself once its head is gone; asked (SIGINT), then made to."""
    for sig, wait in ((None, 10.0), (signal.SIGINT, 5.0), (signal.SIGKILL, None)):
        if sig is not None:
            agent.send_signal(sig)
        try:
            agent.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


# -- the client -------------------------------------------------------------------------------


class ChannelTransport(enum.Enum):
    """Monarch's transports, for ``enable_transport(ChannelTransport.Unix)``: meshrt takes
    Unix and Local as ``"ipc"`` (this machine), the Tcp ones as ``"tcp"``, and refuses
    the TLS and QUIC ones (its hosts prove the cluster token instead)."""

    Unix = "unix"
    Local = "local"
    TcpWithHostname = "tcpwithhostname"
    TcpWithLocalhost = "tcpwithlocalhost"
    Tls = "tls"
    Quic = "quic"
    MetaTlsWithHostname = "metatlswithhostname"
    MetaTlsWithIpV6 = "metatlswithipv6"
    MetaQuicWithHostname = "metaquicwithhostname"
    MetaQuicWithIpV6 = "metaquicwithipv6"


def enable_transport(transport: Any) -> None:
    """Monarch's transport choice, made before anything else: ``"tcp"`` (or
    ``"tcp://HOST:PORT"``) has the runtime this program starts listen for hosts on TCP (at
    HOST:PORT, else on every address at a free port), ``"ipc"`` keeps it to this machine
    (the default). Processes of one host talk over Unix sockets either way, and hosts
    over TCP; TLS transports are refused."""
    import meshrt

    from .._private import driver

    value = getattr(transport, "name", transport)
    if not isinstance(value, str):
        raise TypeError(f"enable_transport({transport!r}): give 'tcp', 'ipc' or 'tcp://HOST:PORT'")
    if value.lower() in ("tcp", "tcpwithhostname", "tcpwithlocalhost"):
        listen = "127.0.0.1:0" if value.lower() == "tcpwithlocalhost" else "0.0.0.0:0"
    elif value.lower() in ("ipc", "unix", "local"):
        listen = None
    elif value.startswith("tcp://"):
        host, port = _tcp(value, f"enable_transport({value!r})")
        listen = f"{host}:{port}"
    elif value.lower().replace("-", "").replace("_", "") in ("tls", "metatls", "metatlshostname", "metatlswithipv6",
                                                             "metatlswithhostname", "quic", "metaquicwithhostname",
                                                             "metaquicwithipv6"):
        raise NotImplementedError(f"enable_transport({value!r}): TLS and QUIC are not supported; meshrt's hosts "
                                  f"prove the cluster token (MESHRT_TOKEN) instead; use 'tcp'")
    else:
        raise ValueError(f"enable_transport({transport!r}): give 'tcp', 'ipc' or 'tcp://HOST:PORT'")
    if meshrt.is_initialized():
        raise RuntimeError(f"enable_transport({value!r}): call it before anything else of the mesh API (the runtime "
                           f"is up already); or give meshrt.init(address=...) the address to listen on")
    driver.auto_init_address = listen


def attach_to_workers(*, workers: Sequence[Any], ca: Any = TRUST_ALL, private_key: Any = None,
                      name: str | None = None):
    """A HostMesh {"hosts": N} of the machines serving ``run_worker_loop_forever`` at
    ``workers`` (``tcp://host:port`` strings, or Futures of them), in that order; starts
    this program's runtime listening on TCP if it is not up yet, so they can join it."""
    from .future import Future
    from .meshes import HostMesh

    _check_security(ca, private_key, "attach_to_workers")
    if isinstance(workers, (str, bytes)) or not isinstance(workers, Sequence) or not workers:
        raise TypeError(f"attach_to_workers(workers=...): give a list of worker addresses, got {workers!r}")
    addresses = [_tcp(w.get() if isinstance(w, Future) else w, "attach_to_workers(workers=...)") for w in workers]
    twice = sorted({f"tcp://{h}:{p}" for h, p in addresses if addresses.count((h, p)) > 1})
    if twice:
        raise ValueError(f"attach_to_workers(workers=...): {twice[0]} is listed twice; a worker is one host")
    core = _listening_driver()
    stem = name or "worker"
    attached = [_Attached(address, f"{stem}{i}-{os.urandom(3).hex()}") for i, address in enumerate(addresses)]
    try:
        core.io.run_sync(_attach_all(core, attached), _DIAL_WAIT_S + 2 * _REPLY_TIMEOUT_S)
        ids = _joined(core, attached)
    except BaseException:
        core.io.post(_close_all, attached)  # (the workers that did answer are free for another client)
        raise
    core.on_shutdown(lambda: core.io.post(_close_all, attached))  # (the workers end what it started there)
    return HostMesh(Shape.dense(("hosts",), (len(ids),)), ids)


_REPLY_TIMEOUT_S = 30.0  # a worker that passed the handshake answers an attach at once


class _Attached:
    """One worker: its address, the name its agent joins under, the connection to it, and
    why it stopped serving us (its agent exited, or it went away)."""

    def __init__(self, address: tuple, name: str) -> None:
        self.address, self.name = address, name
        self.conn = None
        self.ended: str | None = None

    def where(self) -> str:
        return f"tcp://{self.address[0]}:{self.address[1]}"


def _close_all(attached: list) -> None:
    for worker in attached:
        if worker.conn is not None:
            worker.conn.close()


def _listening_driver():
    import meshrt

    from .._private import driver

    if not meshrt.is_initialized():
        meshrt.init(address=driver.auto_init_address or "0.0.0.0:0")
    core = state.core()
    if not getattr(core, "is_driver", False) or core.controller is None:
        raise RuntimeError("attach_to_workers(): call it from the program that runs the runtime (its driver)")
    if core.controller.public_address is None:
        raise RuntimeError("attach_to_workers(): this driver does not listen for hosts; start it with "
                           "meshrt.init(address='0.0.0.0:0') (or call attach_to_workers before meshrt.init)")
    return core


async def _attach_all(core, attached: list) -> None:
    results = await asyncio.gather(*(_attach_one(core.controller, worker) for worker in attached),
                                   return_exceptions=True)
    for result in results:  # (all tried first: each connection that opened is known, to be closed)
        if isinstance(result, BaseException):
            raise result


async def _attach_one(controller, worker: _Attached) -> None:
    from ..exceptions import AuthenticationError

    loop = asyncio.get_running_loop()
    replied: asyncio.Future = loop.create_future()

    def on_messages(_conn, msgs: list) -> None:
        for msg in msgs:
            if type(msg) is m.AttachReply and not replied.done():
                replied.set_result(msg.error)
            elif type(msg) is m.WorkerAgentEnded:
                worker.ended = f"its agent exited with code {msg.exit_code} (its output is in the worker's)"

    def on_close(_conn, _exc) -> None:
        if not replied.done():
            replied.set_result("it closed the connection")
        worker.ended = worker.ended or "it closed the connection"

    deadline = loop.time() + _DIAL_WAIT_S
    while True:  # (as Monarch's attach waits for workers that are still starting)
        try:
            worker.conn = await wire.connect(f"tcp:{worker.address[0]}:{worker.address[1]}", controller.token,
                                             on_messages=on_messages, on_close=on_close)
            break
        except AuthenticationError as err:
            raise ConnectionError(f"attach_to_workers: the worker at {worker.where()} refused this client's cluster "
                                  f"token ({err}): give both sides the same MESHRT_TOKEN") from None
        except OSError as err:
            if loop.time() > deadline:
                raise ConnectionError(f"attach_to_workers: no worker answered at {worker.where()} within "
                                      f"{_DIAL_WAIT_S:g} s ({err.strerror or err}); start run_worker_loop_forever "
                                      f"there first") from None
            await asyncio.sleep(0.2)  # (no event to wait on: the other machine's process may not be up yet)
    worker.conn.send(m.AttachWorker(_head_host(controller, worker.conn), _head_port(controller), worker.name))
    try:
        error = await asyncio.wait_for(replied, _REPLY_TIMEOUT_S)
    except asyncio.TimeoutError:
        error = f"no answer within {_REPLY_TIMEOUT_S:g} s (is a meshrt run_worker_loop_forever serving there?)"
    if error is not None:
        raise ConnectionError(f"attach_to_workers: the worker at {worker.where()}: {error}")


def _head_host(controller, conn) -> str:
    """Where the worker dials this driver: where it listens, or, listening on every address,
    the address this connection to the worker leaves from (on the worker's network)."""
    bind, _port = _tcp(controller.tcp_address, "the driver's address")
    if bind in ("0.0.0.0", "::", ""):
        return conn.transport.get_extra_info("sockname")[0]
    return bind


def _head_port(controller) -> int:
    return _tcp(controller.public_address, "the driver's address")[1]


def _joined(core, attached: list) -> tuple:
    """The host ids of the attached workers' agents, in order, once all have joined; an
    agent that exited (or a worker that went away) meanwhile is said at once."""
    deadline = time.monotonic() + _ATTACH_TIMEOUT_S
    while True:
        by_name = {h[1]: h[0] for h in core.request_sync("hosts", 0, 0)}
        if all(worker.name in by_name for worker in attached):
            return tuple(by_name[worker.name] for worker in attached)
        for worker in attached:
            if worker.ended is not None and worker.name not in by_name:
                raise ConnectionError(f"attach_to_workers: the worker at {worker.where()} did not join: "
                                      f"{worker.ended}")
        if time.monotonic() > deadline:
            late = [w.where() for w in attached if w.name not in by_name]
            raise TimeoutError(f"attach_to_workers: {late} did not join within {_ATTACH_TIMEOUT_S:g} s (their "
                               f"agents could not reach this driver at port {_head_port(core.controller)}?)")
        time.sleep(0.05)  # (hosts join on the controller's loop: polled, with the workers' news between)

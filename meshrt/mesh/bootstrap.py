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
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"{what}: {address!r} is not a TCP address; give 'tcp://HOST:PORT' (meshrt's workers "
                         f"listen on TCP only)")
    return host.strip("[]"), int(port)


# -- the worker -------------------------------------------------------------------------------


def run_worker_loop_forever(*, address: str, ca: Any = TRUST_ALL, private_key: Any = None) -> None:
    """Serve clients at ``address`` (``tcp://0.0.0.0:4444``) until this process is ended:
    each client that attaches gets this machine as a host of its meshes."""
    _check_security(ca, private_key, "run_worker_loop_forever")
    host, port = _tcp(address, "run_worker_loop_forever(address=...)")
    token = cluster_token.from_env_or_file() or cluster_token.generate_or_reuse()[0]
    asyncio.run(_WorkerLoop(token).serve(host, port))


class _WorkerLoop:
    def __init__(self, token: bytes) -> None:
        self.token = token
        self.client = None  # the connection of the client served now
        self.agent: subprocess.Popen | None = None

    async def serve(self, host: str, port: int) -> None:
        server = await wire.listen(f"tcp:{host}:{port}", self.token,
                                   lambda: {"on_messages": self.on_messages, "on_close": self.on_close})
        bound = server.sockets[0].getsockname()
        print(f"meshrt worker listening on tcp://{bound[0]}:{bound[1]}", flush=True)
        await asyncio.Event().wait()

    def on_messages(self, conn, msgs: list) -> None:
        for msg in msgs:
            if type(msg) is m.AttachWorker:
                conn.send(m.AttachReply(self.attach(conn, msg)))

    def attach(self, conn, msg: m.AttachWorker) -> str | None:
        if self.client is not None and self.client is not conn and not self.client.closed:
            return "this worker serves another client now (one at a time, as Monarch's); try another worker"
        self._end_agent()
        head = msg.head_host or conn.transport.get_extra_info("peername")[0]
        env = dict(os.environ, MESHRT_TOKEN=self.token.hex())
        me = os.getpid()
        try:  # (it dies with this worker loop, and its processes with it)
            self.agent = subprocess.Popen([sys.executable, "-m", "meshrt", "agent", "--address",
                                           f"{head}:{msg.head_port}", "--name", msg.name], env=env,
                                          preexec_fn=lambda: procutil.die_with_parent(me))
        except OSError as err:
            return f"the worker could not start its agent: {err}"
        self.client = conn
        log.info("meshrt worker: serving the client at %s:%s as host %r", head, msg.head_port, msg.name)
        return None

    def on_close(self, conn, _exc) -> None:
        if conn is self.client:  # (its processes here end with it, as Monarch's do)
            self.client = None
            self._end_agent()

    def _end_agent(self) -> None:
        agent, self.agent = self.agent, None
        if agent is None or agent.poll() is not None:
            return
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(10)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()


# -- the client -------------------------------------------------------------------------------


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
    elif value.lower() in ("ipc", "unix"):
        listen = None
    elif value.startswith("tcp://"):
        host, port = _tcp(value, f"enable_transport({value!r})")
        listen = f"{host}:{port}"
    elif value.lower().replace("-", "").replace("_", "") in ("tls", "metatls", "metatlshostname",
                                                             "metatlswithipv6", "metatlswithhostname"):
        raise NotImplementedError(f"enable_transport({value!r}): TLS is not supported; meshrt's hosts prove the "
                                  f"cluster token (MESHRT_TOKEN) instead; use 'tcp'")
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
    core = _listening_driver()
    head_host, head_port = _head_address(core)
    stem = name or "worker"
    names = [f"{stem}{i}-{os.urandom(3).hex()}" for i in range(len(addresses))]
    before = {h[1] for h in core.request_sync("hosts", 0, 0)}
    conns = core.io.run_sync(_attach_all(core, addresses, names, head_host, head_port), _ATTACH_TIMEOUT_S)
    core.on_shutdown(*[conn.close for conn in conns])  # (the workers end what this client started there)
    ids = _joined(core, names, len(before))
    return HostMesh(Shape.dense(("hosts",), (len(ids),)), ids)


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


def _head_address(core) -> tuple[str, int]:
    host, port = _tcp(core.controller.public_address, "the driver's address")
    return ("" if host in ("0.0.0.0", "::") else host), port  # ('': each worker dials where the client came from)


async def _attach_all(core, addresses: list, names: list, head_host: str, head_port: int) -> list:
    token = core.controller.token
    return list(await asyncio.gather(*(_attach_one(token, address, name, head_host, head_port)
                                       for address, name in zip(addresses, names, strict=True))))


async def _attach_one(token: bytes, address: tuple, name: str, head_host: str, head_port: int):
    from ..exceptions import AuthenticationError

    where = f"tcp:{address[0]}:{address[1]}"
    replied: asyncio.Future = asyncio.get_running_loop().create_future()

    def on_messages(_conn, msgs: list) -> None:
        for msg in msgs:
            if type(msg) is m.AttachReply and not replied.done():
                replied.set_result(msg.error)

    def on_close(_conn, _exc) -> None:
        if not replied.done():
            replied.set_result(f"the worker at tcp://{address[0]}:{address[1]} closed the connection")

    loop = asyncio.get_running_loop()
    deadline = loop.time() + _DIAL_WAIT_S
    while True:  # (as Monarch's attach waits for workers that are still starting)
        try:
            conn = await wire.connect(where, token, on_messages=on_messages, on_close=on_close)
            break
        except AuthenticationError as err:
            raise ConnectionError(f"attach_to_workers: the worker at tcp://{address[0]}:{address[1]} refused this "
                                  f"client's cluster token ({err}): give both sides the same MESHRT_TOKEN") from None
        except OSError as err:
            if loop.time() > deadline:
                raise ConnectionError(f"attach_to_workers: no worker answered at tcp://{address[0]}:{address[1]} "
                                      f"within {_DIAL_WAIT_S:g} s ({err.strerror or err}); start "
                                      f"run_worker_loop_forever there first") from None
            await asyncio.sleep(0.2)  # (no event to wait on: the other machine's process may not be up yet)
    conn.send(m.AttachWorker(head_host, head_port, name))
    error = await replied
    if error is not None:
        conn.close()
        raise ConnectionError(f"attach_to_workers: the worker at tcp://{address[0]}:{address[1]}: {error}")
    return conn


def _joined(core, names: list, already: int) -> tuple:
    """The host ids of the agents named ``names``, in that order, once all have joined."""
    deadline = time.monotonic() + _ATTACH_TIMEOUT_S
    want = already + len(names)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"attach_to_workers: {len(names)} worker(s) did not all join within "
                               f"{_ATTACH_TIMEOUT_S:g} s (their agents could not reach this driver?)")
        by_name = {h[1]: h[0] for h in core.request_sync("hosts", want, left, timeout=left + 5)}
        missing = [n for n in names if n not in by_name]
        if not missing:
            return tuple(by_name[n] for n in names)
        want += len(missing)  # (others joined meanwhile: wait for ours too)

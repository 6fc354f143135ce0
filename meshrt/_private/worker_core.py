"""A worker's core: the Core plus a socket to the controller, peers, and the executor."""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
import sys
import threading

from .. import exceptions as exc
from ..objstore.serialization import error_from_payload
from . import (
    addresses,
    call_record,
    context,
    direct_lanes,
    ids,
    lanes,
    loans,
    wire,
    workspace_files,
)
from . import messages as m
from .call import Call
from .channels import PeerChannel
from .core import Core
from .executor import Executor
from .lent_payloads import drop_lent, forget_lent, lend_out, lend_value, lendable, on_pulled
from .logging_config import apply as apply_logging_config

LOAN_GRACE_S = 5.0  # an exiting actor waits at most this long for its lent results to be read


class WorkerCore(Core):
    def __init__(self, worker_id: int, io, token: bytes, controller_address: str, kind: str) -> None:
        super().__init__(worker_id, io, token)
        self.kind = kind
        self.controller_address = controller_address
        # On an agent's host: listen on TCP (peers may be on other hosts), and ask the
        # agent, not the controller, for store blocks.
        self.host_id = int(os.environ.get("MESHRT_HOST_ID", "0"))
        listen_host = os.environ.get("MESHRT_LISTEN_HOST")
        self.listen_address = f"tcp:{listen_host}:0" if listen_host else addresses.new_unix_address(f"w{worker_id}")
        self.agent_address = os.environ.get("MESHRT_AGENT")
        self.agent = None
        self.peer_hosts: dict[int, int] = {0: 0}  # worker id -> host id (the driver is on the head)
        self.ctl = None
        self.server = None
        self.channels: dict[int, PeerChannel] = {}
        self.addresses: dict[int, str] = {}
        self.code_blobs: dict[int, bytes] = {}
        self.max_calls_runs: dict[int, int] = {}  # code id -> tasks of it given here (max_calls)
        self._req_ids = itertools.count(1)
        self._requests: dict[int, asyncio.Future | concurrent.futures.Future] = {}
        self._welcome: asyncio.Future | None = None
        self.config: dict = {}
        self.executor = Executor(self)
        self.main_ident = threading.main_thread().ident
        self._attach_store()
        self.lent_out: dict = {}  # token -> (peer, TensorBuffers, their memory) lent to another host
        self.gone_peers: set = set()  # peers known dead: nothing is lent to them
        self.host_copies: dict = {}  # object id -> hosts whose agents keep a copy of it
        self._leaving: tuple | None = None  # (exit code, timer): exiting once lent results are read
        self.direct_offers: dict = {}  # lane key -> the socket end offered to the driver
        self.direct_refused = False  # the driver (or agent) cannot take lanes here: none are offered
        self.handlers.update({
            m.PullDone: lambda conn, msg: on_pulled(self, msg),
            m.Welcome: self.on_welcome,
            m.UcxUnreached: self.on_ucx_unreached,
            m.ClusterSpans: self.on_cluster_spans,
            m.GiveBack: self.on_give_back,
            m.Hello: self.on_hello,
            m.DefineCode: self.on_define_code,
            m.ExecuteTask: self.on_execute_task,
            m.StartActor: self.on_start_actor,
            m.ActorCall: self.on_actor_call,
            m.CancelTask: self.on_cancel,
            m.Exit: self.on_exit,
            m.Response: self.on_response,
            m.DirectLaneTaken: lambda conn, msg: direct_lanes.taken(self, msg),
            m.AskTimeline: lambda conn, msg: conn.send(m.TimelineRows(msg.req_id, *call_record.taken())),
        })

    def offer_direct_lane(self, lane) -> None:
        direct_lanes.offer(self, lane)

    # -- start-up ----------------------------------------------------------------------------

    def _attach_store(self) -> None:
        """Map the host's object store through the descriptor inherited from the zygote."""
        fd = os.environ.get("MESHRT_STORE_FD")
        if fd is None:
            return
        from ..objstore.arena import Arena
        from ..objstore.client import RemoteBackend, StoreClient
        from ..objstore.serialization import set_store_client

        self.store_backend = RemoteBackend(self)
        self.store = StoreClient(Arena(int(fd), int(os.environ["MESHRT_STORE_SIZE"])), self.store_backend)
        set_store_client(self.store)

    def _periodic_drain(self, busy: bool = False) -> None:
        if self.store is not None:
            busy = self.store_backend.flush() or busy
        super()._periodic_drain(busy)

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        self._welcome = loop.create_future()
        self.server = await wire.listen(
            self.listen_address, self.token,
            lambda: {"on_messages": self.on_messages, "on_close": self.on_peer_closed},
        )
        if self.listen_address.startswith("tcp:") and self.listen_address.endswith(":0"):
            port = self.server.sockets[0].getsockname()[1]
            host = os.environ.get("MESHRT_ADVERTISE_HOST") or addresses.parse_tcp(self.listen_address)[0]
            self.listen_address = f"tcp:{host}:{port}"
        if self.agent_address:
            self.agent = await wire.connect(self.agent_address, self.token, on_messages=self.on_messages,
                                            on_close=self._controller_lost)
            self.agent.send(m.Hello(self.worker_id, os.getpid(), None, self.host_id))
        self.ctl = await wire.connect(
            self.controller_address, self.token,
            on_messages=self.on_messages, on_close=self._controller_lost,
        )
        self.ctl.peer_id = 0
        self.ctl.send(m.Hello(self.worker_id, os.getpid(), self.listen_address, self.host_id))
        await self._welcome
        self.start_timers()

    def on_welcome(self, conn, msg: m.Welcome) -> None:
        config = self.config = msg.config
        self.ucx_unreached = frozenset(frozenset(cut) for cut in config.get("ucx_unreached", ()))
        self.several_hosts = bool(config.get("several_hosts"))
        for path in reversed(config.get("sys_path", [])):
            if path not in sys.path and (path == "" or os.path.isdir(path)):
                sys.path.insert(0, path)
        cwd = config.get("cwd")
        if cwd and os.path.isdir(cwd):
            os.chdir(cwd)
        workspace_files.enter(config.get("workspace"))  # (HostMesh.sync_workspace, before this process began)
        apply_logging_config(config.get("logging_config"))  # (init(logging_config=...), before any task)
        context.process.update(
            job_id=config.get("job_id"), node_id=config.get("node_id"),
            namespace=config.get("namespace", "default"), worker_id=self.worker_id,
        )
        if self._welcome is not None and not self._welcome.done():
            self._welcome.set_result(None)

    def _controller_lost(self, conn, _exc) -> None:
        # The driver is gone (exit, Ctrl-C, SIGKILL): nothing here is reachable any more.
        os._exit(0)

    # -- routing -------------------------------------------------------------------------------

    def send_controller(self, msg) -> None:
        self.ctl.send(msg)

    def send_to(self, peer: int, msg) -> None:
        if peer == 0:
            if self.agent is not None:  # the driver's messages come and go through the agent
                self.agent.send(m.Relay(0, self.worker_id, msg))
            else:
                self.ctl.send(msg)
            return
        channel = self.channels.get(peer)
        if channel is None:
            channel = self.channels[peer] = PeerChannel(self, peer)
        channel.send(msg)

    def note_address(self, peer: int, address: str | None) -> None:
        if address:
            self.addresses[peer] = address

    def address(self) -> str:
        return self.listen_address

    def on_hello(self, conn, msg: m.Hello) -> None:
        conn.peer_id = msg.worker_id
        conn.peer_pid = msg.pid
        self.peer_hosts[msg.worker_id] = msg.host
        if conn.server_side and msg.worker_id != 0:  # a worker dialled us: say which host we are on
            conn.send(m.Hello(self.worker_id, os.getpid(), self.listen_address, self.host_id))
        self.note_address(msg.worker_id, msg.address)
        channel = self.channels.get(msg.worker_id)
        if channel is None:
            channel = self.channels[msg.worker_id] = PeerChannel(self, msg.worker_id)
        channel.attach(conn)

    def on_peer_closed(self, conn, _exc) -> None:
        channel = self.channels.get(conn.peer_id) if conn.peer_id is not None else None
        if channel is not None:
            channel.closed(conn)

    def unreachable(self, peer: int) -> None:
        """Nothing sent to ``peer`` will arrive: what was lent to it goes, and nothing more is."""
        self.gone_peers.add(peer)
        forget_lent(self, peer)
        loans.end_all_to(peer)
        if self._leaving is not None and not loans.outstanding():
            self._exit_now(self._leaving[0])

    def forget_peer(self, peer: int) -> None:
        self.unreachable(peer)
        channel = self.channels.pop(peer, None)
        if channel is not None:
            channel.dead = True
            if channel.conn is not None:
                channel.conn.close()
        self.addresses.pop(peer, None)

    async def request(self, method: str, *args, conn=None):
        req_id = next(self._req_ids)
        fut = asyncio.get_running_loop().create_future()
        self._requests[req_id] = fut
        (conn or self.ctl).send(m.Request(req_id, method, args))
        return await fut

    def store_request_sync(self, method: str, *args):
        """A request to whoever owns this host's store: the agent, or the controller.

        Sent from the asking thread when nothing posted to the loop is still ahead of it
        (an allocation must not overtake the free that makes room for it): a turn of the
        core loop would add a thread wake-up to both ends of the round trip."""
        if self.io.in_loop():
            return self.io.run_sync(self.request(method, *args, conn=self.agent), 60.0)  # (raises)
        req_id = next(self._req_ids)
        answer: concurrent.futures.Future = concurrent.futures.Future()
        self._requests[req_id] = answer
        self.to_store(m.Request(req_id, method, args))
        return answer.result(60.0)

    def send_store(self, msg) -> None:
        self.store_conn().send(msg)

    def to_store(self, msg) -> None:
        """``send_store`` from any thread: straight from this one when nothing posted to
        the loop is still ahead of it (a turn of the loop would add a wake-up), else
        through the loop, in order."""
        if self.io.caught_up() and not self.io.in_loop():
            self.store_conn().send_from_thread(msg)
        else:
            self.io.post(self.send_store, msg)

    def owner_seals(self, owner: int) -> bool:
        # The driver keeps the head host's store: it seals a result's block as the reply
        # arrives, so the reply needs no seal message ahead of it.
        return owner == 0 and self.agent is None

    def store_conn(self):
        """The connection to this host's store owner (the agent, or the controller)."""
        return self.agent or self.ctl

    def remote_peer(self, peer: int) -> bool:
        return self.peer_hosts.get(peer, self.host_id) != self.host_id

    def same_host(self, peer: int) -> bool:
        """Known to be on this host (``remote_peer`` takes an unknown peer for local)."""
        return self.peer_hosts.get(peer, -1) == self.host_id if peer else self.host_id == 0

    def note_peer_host(self, peer: int, host: int) -> None:
        self.peer_hosts.setdefault(peer, host)

    def host_of(self, peer: int) -> int | None:
        return 0 if peer == 0 else self.peer_hosts.get(peer)  # (the driver is on the head host)

    def on_ucx_unreached(self, conn, msg: m.UcxUnreached) -> None:
        self.ucx_unreached = msg.cuts

    def on_cluster_spans(self, conn, msg: m.ClusterSpans) -> None:
        self.several_hosts = msg.several_hosts

    def on_response(self, conn, msg: m.Response) -> None:
        fut = self._requests.pop(msg.req_id, None)
        if fut is None or fut.done():
            return
        if msg.ok:
            fut.set_result(msg.value)
        else:
            fut.set_exception(msg.value)

    def define_code(self, code_id: int, blob_fn) -> None:
        if code_id not in self.code_defined:
            self.code_defined.add(code_id)
            self.io.post(self.send_controller, m.DefineCode(code_id, blob_fn()))

    def on_define_code(self, conn, msg: m.DefineCode) -> None:
        self.code_blobs[msg.code_id] = msg.blob

    def refuse_waiting_on_itself(self, entries: list) -> None:
        refuse_if_waiting_on_itself(self, self.executor, entries)
        self.executor.note_blocking(entries)

    def on_block(self, blocked: bool) -> None:
        if self.kind == "task" and threading.get_ident() == self.main_ident:
            # (what waits behind us might be what we wait for: hand it back)
            returned = self._unstarted() if blocked else ()
            self.io.post(self.send_controller, m.WorkerBlocked(blocked, returned))

    def on_give_back(self, conn, msg: m.GiveBack) -> None:
        self.send_controller(m.WorkerBlocked(None, self._unstarted()))

    def _unstarted(self) -> tuple:
        """The ids of the tasks queued behind the running one, taken off our queue."""
        calls = self.executor.take_unstarted()
        for call in calls:
            call.held = None
        return tuple(c.task_id for c in calls)

    # -- work in -----------------------------------------------------------------------------

    def on_execute_task(self, conn, msg: m.ExecuteTask) -> None:
        spec = msg.spec
        held, arg_refs = self._arrived(spec.args, spec.deps)
        dest = spec.owner
        if dest != 0 and spec.owner_address:
            self.note_address(dest, spec.owner_address)
            self.note_peer_host(dest, spec.owner_host)
        call = Call(spec.task_id, spec.name, None, spec.args, spec.deps, spec.num_returns,
                    dest, held, arg_refs, spec)
        if spec.max_calls:  # (tasks run in arrival order: the Nth to arrive is the Nth to run)
            runs = self.max_calls_runs[spec.code_id] = self.max_calls_runs.get(spec.code_id, 0) + 1
            call.last = runs >= spec.max_calls
        self.executor.submit(call)

    def on_start_actor(self, conn, msg: m.StartActor) -> None:
        self.executor.queue.put(lambda: self.executor.start_actor(msg.spec, msg.incarnation))

    def call_of(self, msg: m.ActorCall, caller: int, held: list, arg_refs: list) -> Call:
        """The executor's record of an actor call from ``caller``."""
        spec = self.executor.actor_spec
        name = lanes.split(msg.method)[0]  # (a mesh actor's lane is no part of its name)
        name = f"{spec.class_name}.{name}" if spec is not None else name
        call = Call(msg.task_id, name, msg.method, msg.args, msg.deps, msg.num_returns, caller, held, arg_refs)
        call.group = msg.group
        if msg.name is not None:  # (.options(name=): its name in list_tasks and the timeline)
            call.span, call.func = msg.name, name
        return call

    def on_actor_call(self, conn, msg: m.ActorCall) -> None:
        held, arg_refs = self._arrived(msg.args, msg.deps)
        call = self.call_of(msg, conn.peer_id, held, arg_refs)
        if msg.pins and self.store is not None:
            self.store_backend.grant(msg.pins)
            call.granted = tuple(key for key, _offset, _size in msg.pins)
        call_record.arrive(call)
        self.executor.submit(call)

    def on_cancel(self, conn, msg: m.CancelTask) -> None:
        self.executor.cancel(msg.task_id)
        if msg.recursive:
            self.cancel_children(msg.task_id)

    def on_exit(self, conn, msg: m.Exit) -> None:
        self._leave()

    # -- work out (called on the core loop by the executor) ------------------------------------

    def call_finished(self, call: Call, results: tuple, result_held, error) -> None:
        self.children.pop(call.task_id, None)
        call.held = None
        if call.granted:
            self._release_grants(call)
        if self.store is not None:
            # The call's argument views are gone: say so before the reply, on the same
            # connection, so the caller's free finds the block unpinned and reusable.
            self.store_backend.flush()
        self.drain()
        borrowed = self._still_borrowed(call.arg_refs)
        dest = call.dest
        failed = call.is_task and any(payload.is_error for payload in results)  # (before any is lent out)
        for payload in results:
            self.account_outgoing(payload, dest)
        if self.remote_peer(dest):  # large results are pulled from here, not sent
            results = tuple(lend_out(self, payload, dest) for payload in results)
        self.send_to(dest, m.TaskReturn(call.task_id, results, borrowed))
        if call.is_task:
            kind, text = _described(next(p for p in results if p.is_error)) if failed else ("", "")
            self.send_controller(m.TaskDone(call.task_id, retiring=call.last, failed=failed, error_type=kind,
                                            error_message=text))

    def reply_now(self, call: Call, results: tuple, result_held) -> bool:
        """From the thread that ran an actor call: send a plain reply at once, without
        waking the core loop (each wake-up costs more than the call on a small machine)."""
        return not self.reply_all([(call, results, result_held)])

    def reply_all(self, replies: list) -> list:
        """``reply_now`` for several calls (``(call, results, held, ...)``), one frame per
        caller; returns those that must go through the core loop, in order. Only when
        nothing must be settled first: no refs in or out, no queued ref releases.
        Results in store blocks, and the unpins of the calls' arguments, only for the
        driver on this host: they share the connection to the store's owner with the
        reply, so the block's seal and the unpins still arrive first."""
        if self.executor.exiting:  # (calls after exit_actor() must not answer)
            return list(replies)
        unpins = self.store is not None and self.store_backend.has_unpins()
        frames: dict = {}  # connection -> (its messages, the replies they carry)
        rest = []
        for reply in replies:
            call = reply[0]
            conn = self._plain_reply_conn(call, reply[1], reply[2], unpins)
            if conn is None:
                rest.append(reply)
                continue
            self.children.pop(call.task_id, None)
            msg = m.TaskReturn(call.task_id, reply[1], ())
            msgs, sent = frames.setdefault(conn, ([], []))
            msgs.append(m.Relay(0, self.worker_id, msg) if conn is self.agent else msg)
            sent.append(reply)
        for conn, (msgs, sent) in frames.items():
            # (with unpins queued, only the store's connection qualifies: they go first)
            update = self.store_backend.take_unpins() if unpins else None
            try:  # (raises only before writing anything: the loop then sends them)
                conn.send_from_thread(*([update, *msgs] if update is not None else msgs))
            except Exception:  # noqa: BLE001
                rest.extend(sent)
        return rest

    def _plain_reply_conn(self, call: Call, results: tuple, result_held, unpins: bool):
        """The connection a reply to ``call`` may leave on from this thread, or None."""
        if call.is_task or call.deps or call.arg_refs or result_held:
            return None
        if call.granted:
            self._release_grants(call)
        lending = self.remote_peer(call.dest)
        via_store_conn = call.dest == 0 and not lending
        for payload in results:
            if payload.refs or (payload.shm is not None and not via_store_conn) or (lending and lendable(payload)):
                return None
        call.held = None
        # Whatever the call posted (a Port value, a ref release) must leave first.
        if not self.io.caught_up() or self.table.deltas or self._check or self._release_batch:
            return None
        if unpins and not via_store_conn:
            return None
        return self._reply_conn(call.dest)

    def _release_grants(self, call: Call) -> None:
        """Pins the caller took for this call that its arguments did not use (a cancelled
        call, say) go back, so nothing stays pinned for good."""
        keys, call.granted = call.granted, ()
        self.store_backend.release_grants(keys)

    def _reply_conn(self, dest: int):
        """The open connection send_to(dest) would use, or None."""
        if dest == 0:
            conn = self.store_conn()
        else:
            channel = self.channels.get(dest)
            conn = channel.conn if channel is not None else None
        return conn if conn is not None and conn.open and not conn.closed else None

    def lend(self, entry, borrower: int, payload) -> bool:
        return lend_value(self, entry, borrower, payload)

    def lend_out(self, payload, dest: int):
        return lend_out(self, payload, dest) if self.remote_peer(dest) else payload

    async def host_pull(self, key: int, lent, owner: int):
        try:  # host_cache.py: one pull per host (by its agent, or the driver's controller on
            # the head host), the copy shared by the host's processes
            payload = await asyncio.wait_for(self.request("host_pull", key, lent, owner, conn=self.agent),
                                             max(120.0, sum(h.nbytes for h in lent.handles) / 25e6))
        except Exception:  # noqa: BLE001 - an agent that cannot (or did not in time): read it ourselves
            return None
        drop_lent(lent)  # (our copies of the handles, unread)
        return payload

    def note_copy(self, entry, borrower: int) -> None:
        host = self.peer_hosts.get(borrower)
        if host is not None and host != self.host_id and borrower != 0:  # (the driver reads for itself)
            self.host_copies.setdefault(entry.id, set()).add(host)

    def forget_copies(self, oid: int) -> None:
        hosts = self.host_copies.pop(oid, None) if self.host_copies else None
        if hosts:
            self.send_controller(m.DropHostCopies(oid, tuple(hosts)))

    def task_retry(self, call: Call) -> None:
        self.children.pop(call.task_id, None)
        call.held = None
        self.drain()
        self.send_controller(m.TaskDone(call.task_id, retry=True, retiring=call.last))

    def stream_item(self, call: Call, index: int, payload, held) -> None:
        self.account_outgoing(payload, call.dest)
        self.send_to(call.dest, m.StreamItem(call.task_id, index, self.lend_out(payload, call.dest)))

    def stream_end(self, call: Call, count: int, error) -> None:
        self.send_to(call.dest, m.StreamEnd(call.task_id, count, error))
        self.call_finished(call, (), None, None)

    def exit_actor(self, reason: str) -> None:
        spec = self.executor.actor_spec
        if spec is not None:
            self.send_controller(m.ActorExiting(spec.actor_id, reason))
        self._leave()

    def _leave(self, code: int = 0) -> None:
        """Flush what we owe and exit the process: once the results we lent have been
        read (their readers say so at once; LOAN_GRACE_S at most), as their bytes go
        with this process."""
        rows, threads = call_record.taken()
        rows = [row for row in rows if row[1]]  # (only those that ended: one running or waiting fails with the process)
        if rows and self.ctl is not None and not self.ctl.closed:  # (kept for meshrt.timeline())
            self.ctl.send(m.TimelineRows(0, rows, threads))
            call_record.clear()  # (sent once)
        for conn in [self.ctl, self.agent, *(c.conn for c in self.channels.values())]:
            if conn is not None and not conn.closed:
                conn._flush()
        if loans.outstanding() and self._leaving is None:
            self.executor.exiting = True  # (no more replies)
            self._leaving = (code, self.io.loop.call_later(LOAN_GRACE_S, self._exit_now, code))
            return
        if self._leaving is None:
            self._exit_now(code)

    def on_loan_done(self, conn, msg: m.LoanDone) -> None:
        super().on_loan_done(conn, msg)
        if self._leaving is not None and not loans.outstanding():
            self._exit_now(self._leaving[0])

    def _exit_now(self, code: int) -> None:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        os._exit(code)


def refuse_if_waiting_on_itself(core, executor, entries: list) -> None:
    """A method of this actor blocking on a call to this actor that can only run on
    the thread now blocked (after the method returns) would wait forever, as in Ray
    and Monarch: say so instead of hanging."""
    if executor.actor_spec is None:
        return
    pending = core.pending

    def after_me(pt) -> bool:
        return pt is not None and pt.kind == "call" and executor.runs_after_me(pt.actor_id, pt.method, pt.group)

    for entry in entries:
        pt = pending.get(ids.task_of(entry.id))
        if pt is None or pt.kind != "call":
            continue
        if not after_me(pt):
            # Or a call that first waits for one that does, which the waiting call made
            # itself (so it is queued behind it): a spawn into this process, say.
            current = context.current_call()
            mine = core.children.get(current.task_id, ()) if current is not None else ()
            deps = [ids.task_of(ref._id) for _, ref in pt.deps]
            pt = next((dep for t in deps if t in mine and after_me(dep := pending.get(t))), None)
        if pt is not None:
            mesh = pt.name.startswith("ProcHost.")
            if executor.user_loop is not None and _on_a_loop():  # (the actor's, or a concurrency group's)
                fix = "`await` the call instead of calling get() (this already runs on the event loop)"
            elif mesh:
                fix = "Make the waiting endpoint `async def` and `await` the call"
            else:
                fix = "Make the waiting method `async def` and `await` the call, or give the actor max_concurrency > 1"
            raise RuntimeError(
                f"get() on {_call_name(pt)} would wait forever: that call runs on the thread now "
                f"waiting for it, after the current call returns. {fix}")


def _on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _call_name(pt) -> str:
    """What the user called: a mesh's endpoint or spawn, or an actor method."""
    if pt.name.startswith("ProcHost."):
        return {"ProcHost.call_sync": "a plain `def` endpoint of this same actor",
                "ProcHost.spawn": "a spawn into this same process"}.get(
                    pt.name, f"{pt.name[len('ProcHost.'):]}() of this same process")
    return f"{pt.name}() (this actor itself)"


_ERROR_TEXT_KEPT = 4000  # characters of an error's text the state API keeps (its traceback's end may go)


def _described(payload) -> tuple[str, str]:
    """(Ray's error type, the error's text) of a failed task, for the state API."""
    try:
        err = error_from_payload(payload)
    except Exception as failure:  # noqa: BLE001 - an error that cannot be read back here
        return "TASK_EXECUTION_EXCEPTION", f"(its error could not be read: {failure!r})"
    return exc.ray_error_type(err), str(err)[:_ERROR_TEXT_KEPT]


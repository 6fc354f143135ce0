"""Every message meshrt processes exchange, as small immutable records.

One frame on the wire carries a list of these (see wire.py); user values inside
them are already-serialized :class:`~meshrt._private.serialization.Payload` objects,
so a frame never unpickles user classes. Worker id 0 is the driver (which also
hosts the controller).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..objstore.serialization import Payload

# -- set-up -----------------------------------------------------------------------------


class Hello(NamedTuple):
    """First frame on any connection: who is speaking, and where it listens."""

    worker_id: int
    pid: int
    address: str | None
    host: int = 0  # 0 = the head host; agents' hosts count from 1


class AttachWorker(NamedTuple):
    """Client -> a worker serving Monarch's run_worker_loop_forever (mesh/bootstrap.py):
    join my head as a host named ``name``; my head listens at ``head_host`` ('' = where I
    dialed you from) and ``head_port``."""

    head_host: str
    head_port: int
    name: str


class AttachReply(NamedTuple):
    """Worker -> client: its agent is on its way (error None), or why not."""

    error: str | None


class WorkerAgentEnded(NamedTuple):
    """Worker -> client: the agent it started for the client exited (the worker is free)."""

    exit_code: int


class Heartbeat(NamedTuple):
    """Head <-> agent, every quarter of the host timeout: still here (heartbeat.py)."""


class Welcome(NamedTuple):
    """Controller -> new worker: the cluster facts a worker needs."""

    config: dict


class Exit(NamedTuple):
    """Controller -> worker: leave now (shutdown, kill, idle pool trim)."""

    reason: str


# -- code ------------------------------------------------------------------------------


class DefineCode(NamedTuple):
    """A cloudpickled function or class; sent once per worker before first use."""

    code_id: int
    blob: bytes


# -- tasks -----------------------------------------------------------------------------


class TaskSpec(NamedTuple):
    """A stateless task, as scheduled by the controller and run by a pool worker."""

    task_id: int
    code_id: int
    name: str
    args: Payload
    deps: tuple  # ((position, Payload), ...): resolved top-level ref arguments
    num_returns: int  # -1 means streaming
    owner: int
    owner_address: str | None
    resources: tuple  # ((name, amount), ...)
    max_retries: int
    retry_exceptions: Any  # bool or tuple of exception classes (pickled by reference)
    attempt: int = 0
    owner_host: int = 0  # where results go: another host's owner cannot map this one's store
    depth: int = 0  # nesting: 0 from the driver, the submitting task's depth + 1 from a task
    max_calls: int = 0  # the worker exits after running this many tasks of this function
    affinity: tuple | None = None  # (node id, soft): NodeAffinitySchedulingStrategy
    portable: bool = False  # packed for any host (its large arguments lent): it may run off the head
    spread: bool = False  # scheduling_strategy="SPREAD" (host_choice.py)
    runtime_env: dict | None = None  # resolved (runtime_env.py); None: the job's
    capture_children: bool = False  # in a placement group: what it submits joins the group (placement.capture)
    labels: tuple = ()  # node labels it must run on (labels.py: host_choice.py matches them)
    soft_labels: tuple = ()  # ... and would rather run on
    fallback_labels: tuple = ()  # selectors tried in turn where no node matches ``labels`` (fallback_strategy)
    parent: int = 0  # the task or actor call that submitted it (0: the driver's own code), for list_tasks
    created_ms: int = 0  # when it was submitted (.remote()), for list_tasks
    func_name: str = ""  # the function's own name where .options(name=) renamed the task (list_tasks)


class SubmitTask(NamedTuple):
    """Owner -> controller: schedule this task."""

    spec: TaskSpec


class ExecuteTask(NamedTuple):
    """Controller -> pool worker: run this task now."""

    spec: TaskSpec
    gpu_ids: tuple


class TaskReturn(NamedTuple):
    """Executor -> owner: the results of a task or actor call.

    ``results`` holds one Payload per return (all the same error payload when the
    task failed). ``borrowed`` lists refs from the arguments that the executor
    still holds after finishing, so the caller can register it as a borrower.
    """

    task_id: int
    results: tuple
    borrowed: tuple = ()


class TaskDone(NamedTuple):
    """Executor -> controller: the worker is free again; ``retry`` asks to rerun."""

    task_id: int
    retry: bool = False
    retiring: bool = False  # that was the worker's last task (max_calls): it exits now
    failed: bool = False  # it raised (its error went to the owner): for the state API's FAILED
    error_type: str = ""  # ... Ray's name for what failed (exceptions.ray_error_type)
    error_message: str = ""  # ... and the error's text


class StreamItem(NamedTuple):
    """Executor -> owner: the ``index``-th value a streaming generator yielded."""

    task_id: int
    index: int
    payload: Payload


class PortValue(NamedTuple):
    """Anyone -> the process holding a PortReceiver: one value sent through a Port."""

    port_id: int
    payload: Payload
    rank: int = 0  # the sender's message rank (what a ranked receiver pairs the value with)


class StreamEnd(NamedTuple):
    """Executor -> owner: the generator finished after ``count`` items (error: it raised)."""

    task_id: int
    count: int
    error: Payload | None = None


class WorkerBlocked(NamedTuple):
    """Worker -> controller: my task waits in ``get``; lend its CPU to someone else.
    ``returned``: tasks queued behind it that it hands back unstarted. ``blocked``
    None: only those (asked for with ``GiveBack``)."""

    blocked: bool | None
    returned: tuple = ()


class GiveBack(NamedTuple):
    """Controller -> task worker: hand back the tasks queued behind your current one
    (another host has room for them: task_hosts.py)."""


class CancelTask(NamedTuple):
    """Owner -> controller (tasks) or -> actor worker (calls): stop this task
    (``recursive``: and the tasks it submitted)."""

    task_id: int
    force: bool
    recursive: bool = True


# -- actors ----------------------------------------------------------------------------


class ActorSpec(NamedTuple):
    actor_id: int
    code_id: int
    class_name: str
    args: Payload
    deps: tuple
    owner: int
    handle_oid: int
    resources: tuple
    max_restarts: int
    max_concurrency: int
    is_async: bool
    name: str | None
    namespace: str
    detached: bool
    meta: bytes  # pickled ActorMeta, handed to get_actor() callers
    host: int = 0  # where to start it: 0 = the head host, else an agent's host id
    label: str = ""  # its name before its output in the driver's (default: class_name)
    concurrency_groups: tuple = ()  # ((group, max concurrency), ...)
    waits_for_host: bool = False  # on a busy host it waits for resources (a Ray actor), else fails (a mesh's)
    host_policy: str = ""  # "": start it on ``host``; "default" or "spread": the controller picks (host_choice.py)
    runtime_env: dict | None = None  # resolved (runtime_env.py); None: the job's
    capture_children: bool = False  # in a placement group: what it submits joins the group (placement.capture)
    labels: tuple = ()  # as TaskSpec's
    soft_labels: tuple = ()
    python: str = ""  # the interpreter its process runs ('': the driver's; mesh/python_executable.py)
    fallback_labels: tuple = ()  # as TaskSpec's


class CreateActor(NamedTuple):
    """Owner -> controller: place and start this actor."""

    spec: ActorSpec


class StartActor(NamedTuple):
    """Controller -> fresh worker: construct the actor (``incarnation`` counts restarts)."""

    spec: ActorSpec
    incarnation: int
    gpu_ids: tuple


class ActorStarted(NamedTuple):
    """Actor worker -> controller: the constructor returned (error: it raised)."""

    actor_id: int
    incarnation: int
    error: Payload | None = None
    label: str | None = None  # the instance's own __repr__, where its class has one: its output's prefix


class ActorCall(NamedTuple):
    """Caller -> actor worker, directly: run one method."""

    task_id: int
    actor_id: int
    method: str
    args: Payload
    deps: tuple
    num_returns: int  # -1 streaming
    # ((key, offset, size), ...): the args' store blocks, already pinned for the actor's
    # process by the sender (the store's owner), so it maps them without asking.
    pins: tuple = ()
    group: str | None = None  # a concurrency group chosen for this call (.options(concurrency_group=))
    name: str | None = None  # its name in list_tasks and the timeline, from .options(name=)


class DirectLaneOffer(NamedTuple):
    """Worker -> the driver on its host: descriptor ``fd`` (in the worker) is the end of
    lane ``lane``'s own socket, for calls to it (direct_lanes.py)."""

    lane: str
    fd: int


class DirectLaneTaken(NamedTuple):
    """Driver -> worker: done with the offered descriptor (taken or not): close it.
    ``refused``: the kernel does not let the driver take this process's descriptors: offer no more."""

    lane: str
    refused: bool = False


class ActorState(NamedTuple):
    """Controller -> callers: where an actor lives now, or how it died."""

    actor_id: int
    state: str  # "alive" | "restarting" | "dead"
    worker_id: int
    address: str | None
    incarnation: int
    death: Payload | None = None


class KillActor(NamedTuple):
    """Anyone -> controller: kill the actor (``restart`` lets max_restarts apply)."""

    actor_id: int
    restart: bool
    reason: str


class WatchActor(NamedTuple):
    """Caller -> controller: send me ActorState now and whenever this actor changes."""

    actor_id: int


class ActorExiting(NamedTuple):
    """Actor worker -> controller: I exit on purpose (exit_actor, __ray_terminate__); no restart."""

    actor_id: int
    reason: str


# -- objects and reference counting -----------------------------------------------------


class FetchObject(NamedTuple):
    """Borrower -> owner: send me the value of ``object_id`` when it is ready."""

    object_id: int


class ObjectValue(NamedTuple):
    """Owner -> borrower: the value (or error payload) of ``object_id``."""

    object_id: int
    payload: Payload


class AddBorrower(NamedTuple):
    """Anyone -> owner: count ``borrower`` as holding each of ``object_ids`` once more."""

    object_ids: tuple
    borrower: int


class ReleaseBorrows(NamedTuple):
    """Borrower -> owner: I dropped ``object_id``, which I had received ``count`` times."""

    items: tuple  # ((object_id, count), ...)


class StoreUpdate(NamedTuple):
    """Worker -> controller: objects it sealed, mappings it dropped, objects it freed."""

    sealed: tuple
    unpinned: tuple
    freed: tuple


class PeerGone(NamedTuple):
    """Controller -> workers: worker ``worker_id`` is dead; drop what it borrowed or owned."""

    worker_id: int


# -- control-plane requests ----------------------------------------------------------------


class Request(NamedTuple):
    """A control-plane call (lookups, resources); answered by a Response with ``req_id``."""

    req_id: int
    method: str
    args: tuple


class Response(NamedTuple):
    req_id: int
    ok: bool
    value: Any


# -- host agents -------------------------------------------------------------------------


class AgentHello(NamedTuple):
    """Agent -> controller, first frame: a host joins the cluster."""

    name: str
    pid: int
    resources: dict
    listen_host: str  # where this host's workers listen for their peers
    machine: str = ""  # procutil.machine_id(): another machine's agent is checked for UCX (ucx_routes.py)
    labels: dict | None = None  # its node labels (meshrt agent --labels; labels.py)


class AgentWelcome(NamedTuple):
    """Controller -> agent: the host id it got, and what its workers need to know."""

    host_id: int
    controller_address: str
    host_timeout: float = 30.0  # the head's MESHRT_HOST_TIMEOUT_S: both sides beat and judge by it


class UcxProbe(NamedTuple):
    """Controller -> agent: read these bytes through UCX, and lend some back (ucx_routes.py)."""

    check_id: int
    handle: Any
    data: bytes  # what the read must find


class UcxProbeReply(NamedTuple):
    """Agent -> controller: why the read failed (None: it worked); the agent's bytes to read."""

    check_id: int
    error: str | None
    handle: Any = None
    data: bytes | None = None


class UcxPeerCheck(NamedTuple):
    """Controller -> agent: read, through UCX, the bytes other hosts' agents lent the
    head in their own checks (ucx_routes.py)."""

    check_id: int
    peers: tuple  # ((host id, handle, the bytes it must find), ...)


class UcxPeerReply(NamedTuple):
    """Agent -> controller: the peers whose bytes it could not read, and why."""

    check_id: int
    failed: dict  # host id -> why


class UcxUnreached(NamedTuple):
    """Controller -> workers: where UCX does not reach (ucx_routes.py); large values
    between those hosts' processes travel inside the messages."""

    cuts: frozenset  # of frozensets: {host} reaches no other host, {a, b} do not reach each other


class ClusterSpans(NamedTuple):
    """Controller -> the head host's workers: whether other hosts are in the cluster
    (their tasks and actors are then packed for any host: placement.py)."""

    several_hosts: bool


class SpawnWorker(NamedTuple):
    """Controller -> agent: start this worker on your host."""

    worker_id: int
    kind: str
    env: dict


class WorkerSpawned(NamedTuple):
    """Agent -> controller: a worker it started has this pid."""

    worker_id: int
    pid: int


class WorkerExited(NamedTuple):
    """Agent -> controller: a worker ended (Popen-style return code)."""

    worker_id: int
    code: int


class WorkerOutput(NamedTuple):
    """Agent -> controller: lines a worker wrote (stream is "stdout" or "stderr")."""

    worker_id: int
    stream: str
    lines: tuple


class JobOutput(NamedTuple):
    """Controller -> an attached driver: lines a worker wrote for that driver's job
    (job_context.py), each to be printed after ``prefix``."""

    stream: str
    prefix: str
    lines: tuple


class KillWorker(NamedTuple):
    """Controller -> agent: SIGKILL this worker."""

    worker_id: int


class Relay(NamedTuple):
    """A message between the driver and a process on an agent's host, carried by the
    agent: the driver sends one frame per host, not one per process."""

    dest: int
    src: int
    msg: Any
    # An actor call sent while nothing else of its sender's was in flight to ``dest``:
    # the agent may hand it to the actor's lane directly (direct_lanes.py).
    direct: bool = False


class PullValue(NamedTuple):
    """Owner -> a process on an agent's host: a large value to pull, not its bytes.

    ``payload`` is the value without its buffers (``shm`` = (None, size, layout,
    stream_in_block)); ``buffer`` a meshrt.tensor.TensorBuffer over the owner's
    block, which the agent reads straight into its host's store, then says
    ``PullDone`` so the owner lets the block go."""

    object_id: int
    payload: Payload
    buffer: Any
    token: int


class LentPayload(NamedTuple):
    """In place of a large Payload sent to another host (a result, a fetched value,
    a stream item, a Port value, a call's arguments): the value left where it is, as
    TensorBuffers (one per out-of-band buffer) the receiver reads (lent_payloads.py,
    pulls.py); ``data`` is the pickle stream. ``token`` 0: no ``PullDone`` wanted."""

    data: bytes
    handles: tuple
    token: int


class PullDone(NamedTuple):
    """Receiver -> lender: what was lent as ``token`` has been read (or failed to be)."""

    object_id: int
    token: int


class InlineRead(NamedTuple):
    """Receiver -> lender (an agent -> the head, for the driver's lent blocks): the
    tensor engine could not read these lent buffers (a route that broke after the
    host's check); send their bytes inside a message instead (inline_reads.py). Each
    region: (slot_ptr, generation, ptr, nbytes)."""

    req_id: int
    regions: tuple


class InlineBytes(NamedTuple):
    """Lender -> receiver: the bytes of an ``InlineRead``, or why they cannot come."""

    req_id: int
    payload: Payload | None  # the bytes, one buffer per region
    error: str | None = None


class UcxRouteFailed(NamedTuple):
    """Any process -> controller: a read through UCX between these two hosts failed
    after their check passed; from now on their large values travel inline."""

    hosts: tuple  # (reader's host, lender's host)
    why: str


class LoanDone(NamedTuple):
    """Receiver -> lender: these loans (loans.py, by generation) have been read."""

    generations: tuple


class DropCopy(NamedTuple):
    """Driver -> agent: the object is freed; drop this host's copy of it."""

    object_id: int


class DropHostCopies(NamedTuple):
    """Owner (a worker) -> controller: the object is freed; the agents of ``hosts``,
    which pulled it for their processes, drop their copies (``DropCopy``)."""

    object_id: int
    hosts: tuple


class AskTimeline(NamedTuple):
    """Controller -> worker: send the calls that ran here (call_record.py) for meshrt.timeline()."""

    req_id: int


class TimelineRows(NamedTuple):
    """Worker -> controller: the answer to AskTimeline ``req_id``; 0: unasked, the
    process is leaving (timeline_table.py keeps them)."""

    req_id: int
    rows: list  # (start_ns, end_ns, name, task id, kind, thread ident)
    threads: dict  # thread ident -> name

"""The caller's side of one actor: ordering, delivery across restarts, failure.

Calls from one process to one actor leave in submission order: a call whose ref
arguments are not ready yet holds back the calls behind it (head-of-line), so the
actor sees them in the order they were made. While the actor is being created or
restarted, calls wait here. Calls in flight when it dies are retried on the next
incarnation if ``max_task_retries`` allows, and otherwise fail with ActorDiedError.
"""

from __future__ import annotations

import collections
import threading

from . import loans
from . import messages as m


class ActorClient:
    def __init__(self, core, actor_id: int, class_name: str) -> None:
        self.core = core
        self.actor_id = actor_id
        self.class_name = class_name
        self.state = "unknown"
        self.worker_id: int | None = None
        self.incarnation = -1
        self.queue: collections.deque = collections.deque()
        self.inflight: dict[int, object] = {}
        self.death = None
        self.released = False
        self.creation_pins = None
        self.creation_args = None  # freed once the actor can never restart
        self.on_death = None  # (death payload, observed) -> None; meshes supervise through it
        # The loop and, for send_now, user threads change inflight/queue/state: one at a
        # time (reentrant: submit pumps, and a pump may fail calls that re-enter).
        self.lock = threading.RLock()
        self.killed = False  # kill() was called: later calls queue behind it on the loop

    def subscribe(self) -> None:
        self.core.send_controller(m.WatchActor(self.actor_id))

    def send_now(self, pt) -> bool:
        """Any thread: send a call with no ref arguments straight to the live actor,
        without a turn of the core loop, when nothing of ours is ahead of it."""
        with self.lock:
            # (calls in flight: a burst, which the loop batches into fewer frames)
            if self.inflight or not self._nothing_ahead():
                return False
            route = self.core.direct_conn(self.worker_id)
            if route is None:
                return False
            conn, through_agent = route
            if through_agent:
                self._unlend(pt)
            pt.client = self
            pt.ready = pt.sent = True
            self.inflight[pt.task_id] = pt  # before sending: the reply may come back at once
            pins = () if through_agent else self.core.pin_for(self.worker_id, pt.args)
            msg = m.ActorCall(pt.task_id, self.actor_id, pt.method, pt.args, (), pt.num_returns, pins, pt.group,
                              pt.label)
            lanes = getattr(self.core, "direct_lanes", None)  # (the driver's: direct_lanes.py)
            if lanes is not None and not through_agent and not pins and lanes.offer_call(self.worker_id, msg, conn):
                return True
            try:  # raises only before anything was written: the loop path then takes it
                conn.send_from_thread(m.Relay(self.worker_id, self.core.worker_id, msg, True) if through_agent else msg)
            except Exception:  # noqa: BLE001
                self.inflight.pop(pt.task_id, None)
                pt.ready = pt.sent = False
                self.core.unpin_for(self.worker_id, pins)
                return False
            return True

    def _nothing_ahead(self) -> bool:
        """With the lock held: the actor is live and no call of ours to it waits on the
        loop (queued here, posted and not yet queued, or behind a kill), so one sent now
        from this thread cannot overtake any."""
        return (self.state == "alive" and not self.queue and not self.killed
                and not self.core.unsubmitted_calls(self.actor_id) and self.core.io.caught_up())

    def _unlend(self, pt) -> None:
        """Large bytes lent for an actor of this host (loans.py) travel inside the call
        to an actor that is on another host (created there, or restarted there)."""
        if getattr(pt.args, "loans", None) is not None:
            pt.args = loans.unlent(pt.args)

    def claim(self, pt):
        """Any thread: take a call through this actor's host agent as sent, when the
        actor is live and nothing of ours to it waits on the loop; the (connection,
        message) the caller must write at once, or None (the loop's path takes it).
        A mesh call writes many at once this way (fanout_calls.py)."""
        with self.lock:
            if not self._nothing_ahead():
                return None
            route = self.core.direct_conn(self.worker_id)
            if route is None or not route[1]:
                return None
            self._unlend(pt)
            pt.client = self
            pt.ready = pt.sent = True
            alone = not self.inflight  # (the agent may then hand it to the actor's lane)
            self.inflight[pt.task_id] = pt  # before sending: the reply may come back at once
            msg = m.ActorCall(pt.task_id, self.actor_id, pt.method, pt.args, (), pt.num_returns, (), pt.group,
                              pt.label)
            return route[0], m.Relay(self.worker_id, self.core.worker_id, msg, alone)

    def unclaim(self, pt) -> bool:
        """A claimed call that could not be written after all: True when it is still
        ours to send (the loop's path then takes it), False when the loop has it already
        (the actor restarted or died meanwhile: it was re-queued or failed)."""
        with self.lock:
            if self.inflight.get(pt.task_id) is not pt:
                return False
            del self.inflight[pt.task_id]
            pt.ready = pt.sent = False
            return True

    def submit(self, pt) -> None:
        if self.state == "dead":
            self.core.fail_pending(pt, self.death)
            return
        self.queue.append(pt)
        pt.then = self._pump
        self.core._start_pending(pt)

    def _pump(self) -> None:
        with self.lock:
            self._pump_locked()

    def _pump_locked(self) -> None:
        if self.state != "alive":
            return
        core = self.core
        queue = self.queue
        while queue:
            pt = queue[0]
            if core.pending.get(pt.task_id) is not pt:
                queue.popleft()  # failed or cancelled while waiting
                continue
            if not pt.ready:
                break  # keep submission order: later calls wait for this one's arguments
            if pt.task_id < 0 and any(c.retry and c.retries_left != 0 for c in self.inflight.values()):
                break  # the release ends the actor: not before calls that may yet be retried
            queue.popleft()
            alone = not self.inflight
            self.inflight[pt.task_id] = pt
            pt.sent = True
            if core.remote_peer(self.worker_id):
                self._unlend(pt)
            core.send_call(
                self.worker_id,
                m.ActorCall(pt.task_id, self.actor_id, pt.method, pt.args,
                            core._dep_payloads(pt), pt.num_returns, core.pin_for(self.worker_id, pt.args), pt.group,
                            pt.label),
                alone,
            )

    def replied(self, pt) -> None:
        self.inflight.pop(pt.task_id, None)
        if pt.task_id > 0:  # not the internal release call
            self.core.count_call(self.actor_id, -1)
            if self.queue and self.released:  # (a release held back behind this call)
                self._pump()

    def cancel(self, pt, recursive: bool = True) -> bool:
        """True when the call never left (the caller fails it); else ask the actor."""
        if pt.task_id in self.inflight:
            self.core.send_to(self.worker_id, m.CancelTask(pt.task_id, False, recursive))
            return False
        return True

    def on_state(self, st: m.ActorState) -> None:
        with self.lock:
            died = self._on_state_locked(st)
        if died is not None and self.on_death is not None and not self.released:
            self.on_death(*died)  # outside the lock: supervisors may call back in

    def _on_state_locked(self, st: m.ActorState) -> None:
        if st.incarnation < self.incarnation:
            return
        if st.state == "alive":
            if self.state == "alive" and st.incarnation == self.incarnation:
                return
            self.incarnation = st.incarnation
            self.killed = False  # a new incarnation: the kill is behind us
            self.worker_id = st.worker_id
            self.core.note_address(st.worker_id, st.address)
            self.state = "alive"
            self._pump()
            return
        self.incarnation = max(self.incarnation, st.incarnation)
        self.state = st.state
        self.death = st.death
        lost = list(self.inflight.values())
        self.inflight.clear()
        retry = []
        for pt in lost:
            if st.state == "restarting" and pt.retries_left != 0:
                if pt.retries_left > 0:
                    pt.retries_left -= 1
                pt.sent = False
                retry.append(pt)
            else:
                self.core.fail_pending(pt, st.death)
                for entry in pt.entries:  # (in flight when the actor died)
                    self.core.drop_left_behind(entry.id)
        self.queue.extendleft(reversed(retry))
        if st.state == "dead":
            self.creation_pins = None
            self.core.release_payload(self.creation_args)
            self.creation_args = None
            waiting, self.queue = list(self.queue), collections.deque()
            for pt in waiting:
                self.core.fail_pending(pt, st.death)
            return st.death, bool(lost or waiting)
        return None

    def release(self) -> None:
        """Every handle is gone: queue a terminate behind the calls already made."""
        if self.released or self.state == "dead":
            return
        self.released = True
        from ..objstore.serialization import serialize
        from .pending import PendingTask

        pt = PendingTask(0, f"{self.class_name}.__meshrt_release__", serialize(((), {}))[0], [], [], 0)
        pt.method = "__meshrt_release__"
        pt.kind = "call"
        pt.task_id = -self.actor_id  # never collides with a real task id
        self.core.pending[pt.task_id] = pt
        pt.client = self
        self.submit(pt)

"""The controller's part of ``meshrt.timeline()``: ask every live process for the calls
that ran in it (call_record.py), wait for the answers, and name each process.

Mixed into the Controller (which provides workers, actors, hosts, node_id_of_host,
loop). A process that leaves on its own sends its calls unasked; the last
``ENDED_KEPT`` such processes are kept, so an idle pool worker reaped before the
timeline was asked for still shows.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import os

from . import call_record, ids
from . import messages as m

ANSWER_TIMEOUT_S = 10.0  # a process that does not answer (hung, or dying) is left out after this
ENDED_KEPT = 256


class TimelineTable:
    def __init__(self) -> None:
        self._timeline_ids = itertools.count(1)
        self._timeline_asks: dict[int, tuple[set, list, asyncio.Event]] = {}
        self._timeline_ended: collections.deque = collections.deque(maxlen=ENDED_KEPT)

    def timeline_handlers(self) -> dict:
        return {m.TimelineRows: self.on_timeline_rows}

    async def rpc_timeline(self, caller: int) -> list:
        """One dict per process (its name, pid, node, and its calls' rows), the driver's too."""
        return await self.calls_of_processes(caller)

    async def calls_of_processes(self, caller: int) -> list:
        """What rpc_timeline returns (also read by list_tasks: task_spans.py)."""
        req_id = next(self._timeline_ids)
        waiting, got, answered = set(), [], asyncio.Event()
        for w in list(self.workers.values()):
            if w.id and w.id != caller and w.state != "dead" and w.conn is not None and not w.conn.closed:
                w.conn.send(m.AskTimeline(req_id))
                waiting.add(w.id)
        self._timeline_asks[req_id] = (waiting, got, answered)
        deadline = self.loop.time() + ANSWER_TIMEOUT_S
        try:
            while waiting and self.loop.time() < deadline:
                try:
                    await asyncio.wait_for(answered.wait(), 0.25)
                except asyncio.TimeoutError:  # (one died meanwhile: not waited for)
                    waiting -= {i for i in waiting if (w := self.workers.get(i)) is None or w.state == "dead"
                                or w.conn is None or w.conn.closed}
        finally:
            del self._timeline_asks[req_id]
        return _merged([*self._timeline_ended, *got, *driver_process(self.config["node_id"])])

    def on_timeline_rows(self, conn, msg: m.TimelineRows) -> None:
        w = self.workers.get(conn.peer_id) if conn.peer_id is not None else None
        if w is None:
            return
        process = self._timeline_process(w) | {"rows": msg.rows, "threads": msg.threads}
        if not msg.req_id:
            self._timeline_ended.append(process)
            return
        ask = self._timeline_asks.get(msg.req_id)
        if ask is None:  # (too late: that timeline was returned without it)
            return
        waiting, got, answered = ask
        if w.id in waiting:
            waiting.discard(w.id)
            got.append(process)
            if not waiting:
                answered.set()

    def _timeline_process(self, w) -> dict:
        rec = self.actors.get(w.actor_id) if w.actor_id is not None else None
        host = self.hosts.get(w.host) if w.host else None
        return {
            "worker_id": ids.to_hex(w.id),
            "pid": w.pid,
            "node_id": self.node_id_of_host(w.host),
            "host": host.name if host is not None else "head",
            "actor": rec.spec.class_name if rec is not None else None,
            "actor_id": ids.to_hex(w.actor_id) if rec is not None else None,
        }


def driver_process(node_id: str) -> list[dict]:
    """The driver's own calls (actors on its this_proc(), local mode's), if any."""
    rows, threads = call_record.taken()
    if not rows:
        return []
    return [{"worker_id": "driver", "pid": os.getpid(), "node_id": node_id, "host": "head", "actor": None,
             "rows": rows, "threads": threads, "driver": True}]


def _merged(processes: list[dict]) -> list[dict]:
    """One entry per process: one that answered and then left sent its calls twice."""
    by_worker: dict[str, dict] = {}
    for proc in processes:
        seen = by_worker.get(proc["worker_id"])
        if seen is None:
            by_worker[proc["worker_id"]] = dict(proc)  # (not the kept one: it is merged into)
        else:
            seen["rows"] = sorted(set(seen["rows"]) | set(proc["rows"]), key=lambda row: row[:6])
            seen["threads"] = {**seen["threads"], **proc["threads"]}
    return list(by_worker.values())

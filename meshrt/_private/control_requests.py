"""The controller's answers to control-plane requests (``Request`` -> ``Response``).

Mixed into the Controller: ``rpc_<method>(caller, *args)`` answers a request named
``method``, from a worker, the driver, or a ``meshrt status`` client.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from . import messages as m


class ControlRequests:
    def on_request(self, conn, msg: m.Request) -> None:
        if msg.method == "host_pull":  # (answered when the pull is done: host_directory.py)
            self.head_host_pull(conn, msg)
            return
        self.spawn_background(self._answer(conn, msg))

    async def _answer(self, conn, msg: m.Request) -> None:
        try:
            value = await self.rpc(conn.peer_id, msg.method, msg.args)
            reply = m.Response(msg.req_id, True, value)
        except Exception as err:  # handed back to the caller
            reply = m.Response(msg.req_id, False, err)
        conn.send(reply)

    async def rpc(self, caller: int, method: str, args: tuple) -> Any:
        handler = getattr(self, "rpc_" + method, None)
        if handler is None:
            raise ValueError(f"unknown controller request {method!r}")
        result = handler(caller, *args)
        if asyncio.iscoroutine(result) or asyncio.isfuture(result):
            result = await result
        return result

    def rpc_worker_address(self, caller: int, worker_id: int) -> str | None:
        if worker_id == 0:
            return self.address
        w = self.workers.get(worker_id)
        return w.address if w is not None else None

    # -- runtime_env packages (env_packages.py), kept for the job as Ray's GCS keeps them ------------

    def rpc_put_package(self, caller: int, uri: str, data: bytes, keep: bool = True) -> None:
        """``keep``: a runtime_env's, kept for the job; else a workspace's, dropped once synced."""
        held = self.packages.get(uri)
        self.packages[uri] = (data, keep or (held is not None and held[1]))

    def rpc_keep_package(self, caller: int, uri: str) -> bool:
        """Keep it for the job, if it is here (the same files, packed by another process)."""
        held = self.packages.get(uri)
        if held is not None:
            self.packages[uri] = (held[0], True)
        return held is not None

    def rpc_drop_package(self, caller: int, uri: str) -> None:
        held = self.packages.get(uri)
        if held is not None and not held[1]:
            del self.packages[uri]

    def rpc_get_package(self, caller: int, uri: str) -> bytes | None:
        held = self.packages.get(uri)
        return held[0] if held is not None else None

    def rpc_note_workspace(self, caller: int, hosts: tuple, rels: tuple) -> None:
        """Synced there: processes that start there later import from it too."""
        for host in hosts:
            known = self.workspaces.setdefault(host, [])
            known.extend(rel for rel in rels if rel not in known)

    # -- the host's object store (this host: the head) ----------------------------------------

    # (store work that needs the disk runs off this loop: objstore/store_service.py)
    def rpc_store_allocate(self, caller: int, *args) -> asyncio.Future:
        return self.store_service.ask(caller, "store_allocate", args)

    def rpc_store_pin(self, caller: int, *args) -> asyncio.Future:
        return self.store_service.ask(caller, "store_pin", args)

    def rpc_store_summary(self, caller: int) -> asyncio.Future:
        return self.store_service.ask(caller, "store_summary", ())

    def on_store_update(self, conn, msg: m.StoreUpdate) -> None:
        self.store_service.run(functools.partial(self.store.apply, msg, conn.peer_id), conn.peer_id)

    async def rpc_cluster_status(self, caller) -> dict:
        from .status import collect

        return collect(self, await self.store_service.call(self.store.summary))

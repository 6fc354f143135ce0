"""The controller's answers to control-plane requests (``Request`` -> ``Response``).

Mixed into the Controller: ``rpc_<method>(caller, *args)`` answers a request named
``method``, from a worker, the driver, or a ``meshrt status`` client.
"""

from __future__ import annotations

import asyncio
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
        if asyncio.iscoroutine(result):
            result = await result
        return result

    def rpc_worker_address(self, caller: int, worker_id: int) -> str | None:
        if worker_id == 0:
            return self.address
        w = self.workers.get(worker_id)
        return w.address if w is not None else None

    # -- runtime_env packages (env_packages.py), kept for the job as Ray's GCS keeps them ------------

    def rpc_put_package(self, caller: int, uri: str, data: bytes) -> None:
        self.packages.setdefault(uri, data)

    def rpc_has_package(self, caller: int, uri: str) -> bool:
        return uri in self.packages

    def rpc_get_package(self, caller: int, uri: str) -> bytes | None:
        return self.packages.get(uri)

    def rpc_note_workspace(self, caller: int, hosts: tuple, rels: tuple) -> None:
        """Synced there: processes that start there later import from it too."""
        for host in hosts:
            known = self.workspaces.setdefault(host, [])
            known.extend(rel for rel in rels if rel not in known)

    # -- the host's object store (this host: the head) ----------------------------------------

    def rpc_store_allocate(self, caller: int, *args) -> int:
        return self.store.serve(caller, "store_allocate", args)

    def rpc_store_pin(self, caller: int, *args) -> tuple[int, int]:
        return self.store.serve(caller, "store_pin", args)

    def rpc_store_summary(self, caller: int) -> dict:
        return self.store.serve(caller, "store_summary", ())

    def on_store_update(self, conn, msg: m.StoreUpdate) -> None:
        self.store.apply(msg, conn.peer_id)

    def rpc_cluster_status(self, caller) -> dict:
        from .status import collect

        return collect(self)

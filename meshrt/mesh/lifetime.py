"""``async with`` a mesh, as Monarch's ProcMesh and HostMesh allow: the block's end
stops it (a ProcMesh's processes; on a HostMesh, the process meshes this process
spawned on those hosts, which stay for new ones)."""

from __future__ import annotations


class StoppedOnExit:
    """Mixed into a mesh class that has ``stop()`` (returning an awaitable)."""

    async def __aenter__(self):
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if not getattr(self, "_stopped_on_exit", False):  # (nested blocks: stopped once)
            self._stopped_on_exit = True
            await self.stop()

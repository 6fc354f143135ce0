"""Collective groups: a torch.distributed process group per named group, per process.

Each group has a process group of its own (gloo or NCCL over one TCPStore that its
rank 0 serves), not torch's default one: a process may be in several groups, and in a
mesh's ``init_torch_distributed`` group besides. Ranks meet through a small named
actor per group (``_Meeting``): rank 0 publishes its store's address there, the others
wait for it without polling. ``create_collective_group`` (from the driver) also leaves
there which actor holds which rank, so each actor sets its group up on its first
collective call.
"""

from __future__ import annotations

import asyncio
import datetime
import threading
from typing import Any

from ..._private import api, toplevel
from .types import Backend

_MEETING_PREFIX = "meshrt_collective:"


class _Meeting:
    """Where a group's ranks meet: the plan (from create_collective_group) and rank 0's
    store address."""

    def __init__(self) -> None:
        self.plan: tuple | None = None  # (world_size, {actor id: rank}, backend, timeout_ms)
        self.address: str | None = None
        self.published = asyncio.Event()

    async def set_plan(self, plan: tuple) -> bool:
        if self.plan is not None:
            return False
        self.plan = plan
        return True

    async def get_plan(self) -> tuple | None:
        return self.plan

    async def publish(self, address: str) -> None:
        self.address = address
        self.published.set()

    async def rank0_address(self, timeout_s: float) -> str:
        try:
            await asyncio.wait_for(self.published.wait(), timeout_s)
        except asyncio.TimeoutError:
            raise TimeoutError(f"rank 0 of the collective group did not start it within {timeout_s:g} s: every "
                               f"rank must call init_collective_group (or make a collective call)") from None
        return self.address


def meeting(group_name: str, create: bool = True):
    """The group's meeting actor (made when ``create``); None when there is none."""
    name = _MEETING_PREFIX + group_name
    if create:
        options = {"num_cpus": 0, "name": name, "get_if_exists": True, "lifetime": "detached"}
        return api.ActorClass(_Meeting, options).remote()
    try:
        return toplevel.get_actor(name)
    except ValueError:
        return None


class Group:
    """One named group in this process: its rank, size and torch process group."""

    def __init__(self, name: str, world_size: int, rank: int, backend: str, timeout_ms: int) -> None:
        import torch.distributed as dist

        self.name = name
        self.world_size = world_size
        self.rank = rank
        self.backend = backend
        timeout = datetime.timedelta(milliseconds=timeout_ms)
        place = meeting(name)
        if rank == 0:
            from .. import get_node_ip_address

            host = get_node_ip_address()
            self._store = dist.TCPStore(host, 0, world_size, is_master=True, timeout=timeout,
                                        wait_for_workers=False)
            toplevel.get(place.publish.remote(f"{host}:{self._store.port}"))
        else:
            address = toplevel.get(place.rank0_address.remote(timeout_ms / 1000))
            host, port = address.rsplit(":", 1)
            self._store = dist.TCPStore(host, int(port), world_size, is_master=False, timeout=timeout)
        store = dist.PrefixStore(f"{name}/", self._store)
        if backend == Backend.NCCL:
            if not hasattr(dist, "ProcessGroupNCCL"):
                raise RuntimeError(f"collective group {name!r}: backend 'nccl' needs a CUDA build of torch; this "
                                   f"one has none: use backend='gloo' for CPU tensors")
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            self.pg = dist.ProcessGroupNCCL(store, rank, world_size, options)
        else:
            self.pg = dist.ProcessGroupGloo(store, rank, world_size, timeout)
        self.meeting = place

    def destroy(self) -> None:
        shutdown = getattr(self.pg, "shutdown", None)
        if shutdown is not None:
            try:
                shutdown()
            except Exception:  # noqa: BLE001 - going anyway
                pass
        self.pg = None
        self._store = None


class Registry:
    """This process's groups by name."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.groups: dict[str, Group] = {}

    def get(self, name: str) -> Group | None:
        with self.lock:
            return self.groups.get(name)

    def add(self, group: Group) -> None:
        with self.lock:
            if group.name in self.groups:
                raise RuntimeError(f"collective group {group.name!r} is set up in this process already; "
                                   f"destroy_collective_group({group.name!r}) first")
            self.groups[group.name] = group

    def pop(self, name: str) -> Group | None:
        with self.lock:
            return self.groups.pop(name, None)


registry = Registry()


def planned_group(name: str) -> Group | None:
    """This actor's group ``name`` from a plan left by create_collective_group, set up
    now; None when no plan names it."""
    place = meeting(name, create=False)
    if place is None:
        return None
    plan = toplevel.get(place.get_plan.remote())
    if plan is None:
        return None
    world_size, ranks, backend, timeout_ms = plan
    me = toplevel.get_runtime_context().get_actor_id()
    if me not in ranks:
        raise RuntimeError(f"collective group {name!r} was created for other actors; this one "
                           f"({me}) is not in it")
    group = Group(name, world_size, ranks[me], backend, timeout_ms)
    registry.add(group)
    return group


def tensor_of(value: Any, what: str):
    """A torch tensor sharing ``value``'s memory (a tensor, or a numpy array)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value
    np = _numpy()
    if np is not None and isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    raise TypeError(f"{what}: expected a torch tensor or numpy array, got {type(value).__name__}")


def _numpy():
    import sys

    return sys.modules.get("numpy")

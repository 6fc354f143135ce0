"""Resource arithmetic for one node: CPUs, fractional GPUs, memory, custom resources.

Amounts are kept as integers in units of 1/10000 (as Ray does) so that ten tasks of
``num_gpus=0.1`` add up to exactly one GPU. GPUs are also tracked one by one:
whole-GPU requests take whole free GPUs; a fractional request is packed onto the
GPU with the least room that still fits it (best fit), so fractions share a card
instead of spreading over all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

UNIT = 10_000


def to_units(amount: float) -> int:
    return int(round(float(amount) * UNIT))


def from_units(units: int) -> float:
    value = units / UNIT
    return int(value) if value == int(value) else value


def normalize(request: dict[str, float]) -> tuple[tuple[str, int], ...]:
    """A request as a hashable, sorted tuple of (name, units), zero amounts dropped."""
    return tuple(sorted((k, to_units(v)) for k, v in request.items() if v))


def validate_request(request: dict, what: str) -> None:
    """Reject malformed amounts at the call site, naming the option to change."""
    for name, amount in request.items():
        if not isinstance(name, str):
            raise TypeError(f"{what}: resource names must be strings, got {name!r}")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)):
            raise TypeError(f"{what}: resource {name!r} must be a number, got {amount!r}")
        if amount < 0:
            raise ValueError(f"{what}: resource {name!r} must be >= 0, got {amount}")
        if name == "GPU" and amount > 1 and float(amount) != int(amount):
            raise ValueError(
                f"{what}: num_gpus={amount}: more than one GPU must be a whole number "
                "(fractions are for sharing one GPU)"
            )


@dataclass
class Allocation:
    """What one task or actor holds: units per resource and the GPU slots it got."""

    units: tuple[tuple[str, int], ...]
    gpus: tuple[tuple[int, int], ...] = ()  # ((gpu index, units of that gpu), ...)
    gpu_pool: str = "GPU"  # whose GPU slots: the node's, or a placement group bundle's (GPU_group_...)

    @property
    def gpu_ids(self) -> tuple[int, ...]:
        return tuple(i for i, _ in self.gpus)

    def cpu_parts(self) -> list:
        """(name, units) of the CPUs it holds: the node's, or a placement group bundle's."""
        return [(name, amount) for name, amount in self.units if name == "CPU" or name.startswith("CPU_group_")]


@dataclass
class NodeResources:
    total: dict[str, int]
    available: dict[str, int] = field(default_factory=dict)
    gpu_free: list[int] = field(default_factory=list)
    # A reserved placement group bundle's GPUs, by its resource name (GPU_group_<i>_<pg>):
    # {gpu index: units free}. Its tasks take GPU ids from there (placement_groups.py).
    group_gpus: dict = field(default_factory=dict)

    @classmethod
    def create(cls, amounts: dict[str, float]) -> NodeResources:
        total = {k: to_units(v) for k, v in amounts.items() if v}
        ngpus = int(amounts.get("GPU", 0))
        return cls(total=total, available=dict(total), gpu_free=[UNIT] * ngpus)

    def infeasible(self, units: tuple[tuple[str, int], ...]) -> tuple[str, int, int] | None:
        """(resource, requested, total) for the first thing this node can never give."""
        for name, amount in units:
            have = self.total.get(name, 0)
            if amount > have:
                return name, amount, have
        return None

    def check_feasible(self, units: tuple[tuple[str, int], ...], what: str, actor: bool = False) -> None:
        """Raise at the call site when no amount of waiting would make this fit."""
        missing = self.infeasible(units)
        if missing is not None:
            from ..exceptions import ActorUnschedulableError, TaskUnschedulableError

            name, requested, have = missing
            klass = ActorUnschedulableError if actor else TaskUnschedulableError
            raise klass(what, name, from_units(requested), from_units(have))

    def try_acquire(self, units: tuple[tuple[str, int], ...]) -> Allocation | None:
        avail = self.available
        for name, amount in units:
            if avail.get(name, 0) < amount:
                return None
        gpus: tuple = ()
        pool, gpu_units = next(((name, amount) for name, amount in units
                                if name == "GPU" or name.startswith("GPU_group_")), ("GPU", 0))
        slots = dict(enumerate(self.gpu_free)) if pool == "GPU" else self.group_gpus.get(pool, {})
        if gpu_units:
            gpus = _pick_gpus(slots, gpu_units)
            if gpus is None:
                return None
            for index, amount in gpus:
                if pool == "GPU":
                    self.gpu_free[index] -= amount
                else:
                    slots[index] -= amount
        for name, amount in units:
            if amount:  # (a zero-amount one only names a pool: policy.ENV_RESOURCE)
                avail[name] = avail.get(name, 0) - amount
        return Allocation(units, gpus, pool)

    def release(self, alloc: Allocation) -> None:
        for name, amount in alloc.units:
            if name in self.total:  # (not a removed placement group's: it is gone)
                self.available[name] = self.available.get(name, 0) + amount
        for index, amount in alloc.gpus:
            if alloc.gpu_pool == "GPU":
                self.gpu_free[index] += amount
            elif alloc.gpu_pool in self.group_gpus:
                self.group_gpus[alloc.gpu_pool][index] += amount

    def add_group(self, amounts: dict, gpu_pool: str = "", gpus: tuple = ()) -> None:
        """A placement group bundle reserved here: its resources under their own names
        (what it took from the node is held by the reservation's Allocation)."""
        for name, amount in amounts.items():
            self.total[name] = amount
            self.available[name] = amount
        if gpu_pool:
            self.group_gpus[gpu_pool] = dict(gpus)

    def remove_group(self, names) -> None:
        for name in names:
            self.total.pop(name, None)
            self.available.pop(name, None)
            self.group_gpus.pop(name, None)

    def lend_cpu(self, alloc: Allocation) -> None:
        """A task blocked in ``get`` gives its CPUs back while it waits."""
        for name, amount in alloc.cpu_parts():
            if name in self.total:
                self.available[name] = self.available.get(name, 0) + amount

    def reclaim_cpu(self, alloc: Allocation) -> None:
        """The blocked task resumes; it takes its CPUs back even if that oversubscribes."""
        for name, amount in alloc.cpu_parts():
            if name in self.total:
                self.available[name] = self.available.get(name, 0) - amount

    def as_floats(self, which: str = "available") -> dict[str, float]:
        table = self.available if which == "available" else self.total
        # (floats, as Ray reports them: ``{"CPU": 2.0, ...}``)
        return {k: float(from_units(max(v, 0))) for k, v in table.items() if which == "total" or v > 0}


def _pick_gpus(slots: dict, gpu_units: int):
    """Whole GPUs for a whole-GPU request; else the fullest GPU that still fits (best fit)."""
    if gpu_units >= UNIT:
        whole = [i for i, free in slots.items() if free == UNIT]
        count = gpu_units // UNIT
        return tuple((i, UNIT) for i in whole[:count]) if len(whole) >= count else None
    fits = [(free, i) for i, free in slots.items() if free >= gpu_units]
    if not fits:
        return None
    _, best = min(fits)
    return ((best, gpu_units),)

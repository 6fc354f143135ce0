"""Placement groups, by Ray's names (``ray.util.placement_group``).

``placement_group(bundles, strategy)`` reserves resources on the cluster's hosts,
bundle by bundle, all at once; tasks and actors then run inside a bundle with
``.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i))`` and take
their resources from it, not from the host. The controller does the reserving
(meshrt/_private/placement_groups.py).
"""

from __future__ import annotations

import os

from .._private import state
from .._private.id_types import PlacementGroupID
from ..scheduler import bundles as bundle_names  # (``bundles`` is Ray's argument name here)
from ..scheduler.resources import from_units, normalize, validate_request

__all__ = ["PlacementGroup", "get_current_placement_group", "get_placement_group", "placement_group",
           "placement_group_table", "remove_placement_group"]

_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


class PlacementGroup:
    """A handle to a placement group; picklable, so tasks and actors can use it too."""

    def __init__(self, pg_id: PlacementGroupID, bundles: list | None = None) -> None:
        self.id = pg_id
        self._bundles = bundles  # normalized units per bundle; fetched when not known

    @property
    def bundle_specs(self) -> list[dict]:
        return [{name: from_units(amount) for name, amount in b} for b in self._units()]

    @property
    def bundle_count(self) -> int:
        return len(self._units())

    def ready(self):
        """An ObjectRef that resolves (to this group) once every bundle is reserved."""
        return _ready_task().options(scheduling_strategy=_strategy(self, 0)).remote(self)

    def wait(self, timeout_seconds: float | None = 30) -> bool:
        """Whether the group was reserved within ``timeout_seconds`` (False once removed)."""
        if timeout_seconds is not None and (isinstance(timeout_seconds, bool) or timeout_seconds < 0):
            raise ValueError(f"PlacementGroup.wait(timeout_seconds={timeout_seconds!r}): give seconds >= 0 or None")
        return state.core().request_sync("wait_placement_group", self.id.hex(), timeout_seconds,
                                         timeout=None if timeout_seconds is None else timeout_seconds + 30)

    def check_request(self, units: tuple, index: int, what: str) -> None:
        """A task or actor asking for ``units`` in bundle ``index`` (-1: any) could ever
        fit there; else a ValueError at the caller's line, naming the bundle."""
        specs = self._units()
        if isinstance(index, bool) or not isinstance(index, int) or not -1 <= index < len(specs):
            raise ValueError(f"{what}: placement_group_bundle_index={index!r}: the placement group has "
                             f"{len(specs)} bundle(s); give 0..{len(specs) - 1}, or -1 for any")
        candidates = range(len(specs)) if index < 0 else [index]
        if any(bundle_names.within(units, dict(specs[i])) for i in candidates):
            return
        which = "any bundle" if index < 0 else f"bundle {index}"
        asked = {name: from_units(amount) for name, amount in units} or {"CPU": 0}
        raise ValueError(f"{what} asks for {asked}, more than {which} of its placement group holds "
                         f"({self.bundle_specs if index < 0 else self.bundle_specs[index]}); ask for less "
                         "(num_cpus=0 for an actor or task that needs no CPU of its own) or make the bundle larger")

    def _units(self) -> list:
        if self._bundles is None:
            table = state.core().request_sync("placement_group_table", self.id.hex())
            if not table:
                raise ValueError(f"placement group {self.id.hex()} is not one of this cluster's")
            self._bundles = [normalize(spec) for _, spec in sorted(table["bundles"].items())]
        return self._bundles

    def __eq__(self, other) -> bool:
        return isinstance(other, PlacementGroup) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"PlacementGroup(id={self.id.hex()})"

    def __reduce__(self):
        return (_rebuild, (self.id.hex(), self._bundles))


def placement_group(bundles: list[dict], strategy: str = "PACK", name: str = "", lifetime: str | None = None,
                    _max_cpu_fraction_per_node: float | None = None, _soft_target_node_id=None,
                    bundle_label_selector=None) -> PlacementGroup:
    """Reserve ``bundles`` (``[{"CPU": 2, "GPU": 1}, ...]``) with ``strategy``; returns at
    once (``pg.ready()``/``pg.wait()`` for the reservation). A group that no arrangement of
    the cluster's hosts could hold fails here."""
    what = "placement_group"
    if not isinstance(bundles, list) or not bundles:
        raise ValueError(f"{what}: bundles must be a non-empty list of dicts, e.g. [{{'CPU': 1}}], got {bundles!r}")
    units = []
    for i, bundle in enumerate(bundles):
        if not isinstance(bundle, dict) or not any(bundle.values()):
            raise ValueError(f"{what}: bundle {i} must be a dict asking for some resource, "
                             f"e.g. {{'CPU': 1}}, got {bundle!r}")
        validate_request(bundle, f"{what}: bundle {i}")
        units.append(normalize(bundle))
    if strategy not in _STRATEGIES:
        raise ValueError(f"{what}: strategy={strategy!r}; use one of {', '.join(_STRATEGIES)}")
    if lifetime not in (None, "detached"):
        raise ValueError(f"{what}: lifetime must be None or 'detached', got {lifetime!r}")
    if not isinstance(name, str):
        raise ValueError(f"{what}: name must be a string, got {name!r}")
    selectors = _bundle_selectors(bundle_label_selector, len(bundles), what)
    core = state.core()
    pg = PlacementGroup(PlacementGroupID(os.urandom(14).hex()), units)
    core.request_sync("create_placement_group", pg.id.hex(), units, strategy, name, _namespace(), selectors,
                      lifetime == "detached")
    return pg


def _bundle_selectors(given, count: int, what: str) -> tuple:
    """``bundle_label_selector``: a label selector per bundle (Ray's), the hosts each
    bundle may be reserved on (meshrt/_private/labels.py)."""
    from .._private import labels

    if given is None:
        return ()
    if not isinstance(given, list) or len(given) != count:
        raise ValueError(f"{what}: bundle_label_selector must be a list of one dict per bundle ({count}), "
                         f"e.g. [{{'zone': 'a'}}, {{}}]; got {given!r}")
    return tuple(labels.selector(s, f"{what}: bundle_label_selector[{i}]") for i, s in enumerate(given))


def remove_placement_group(placement_group: PlacementGroup) -> None:
    """Give the group's resources back; what runs in it is killed, what waits for it fails."""
    if not isinstance(placement_group, PlacementGroup):
        raise ValueError(f"remove_placement_group: expected a PlacementGroup, got {placement_group!r}")
    state.core().request_sync("remove_placement_group", placement_group.id.hex())


def get_placement_group(placement_group_name: str) -> PlacementGroup:
    """The live group created with ``name=placement_group_name`` (this namespace)."""
    pg_id, units = state.core().request_sync("get_placement_group", placement_group_name, _namespace())
    return PlacementGroup(PlacementGroupID(pg_id), units)


def placement_group_table(placement_group: PlacementGroup | None = None) -> dict:
    """Ray's table: state, strategy, bundles and the node of each reserved bundle,
    for one group or (by id) for all."""
    pg_id = placement_group.id.hex() if placement_group is not None else None
    return state.core().request_sync("placement_group_table", pg_id)


def get_current_placement_group() -> PlacementGroup | None:
    """The group the running task or actor was placed in; None outside one."""
    from .._private.toplevel import get_runtime_context

    pg_id = get_runtime_context().get_placement_group_id()
    return PlacementGroup(PlacementGroupID(pg_id)) if pg_id else None


def _namespace() -> str:
    from .._private.toplevel import get_runtime_context

    return get_runtime_context().namespace


def _strategy(pg: PlacementGroup, index: int):
    from .scheduling_strategies import PlacementGroupSchedulingStrategy

    return PlacementGroupSchedulingStrategy(pg, index)


def _rebuild(pg_id: str, bundles: list | None) -> PlacementGroup:
    return PlacementGroup(PlacementGroupID(pg_id), bundles)


_READY = None


def _ready_task():
    """The no-op task ``ready()`` runs in bundle 0 (it runs once the group is reserved)."""
    global _READY
    if _READY is None:
        from .._private.api import remote

        def placement_group_ready(pg):
            return pg

        _READY = remote(num_cpus=0, max_retries=-1)(placement_group_ready)
    return _READY

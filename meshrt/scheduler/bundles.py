"""Placement group bundles as resources: names only, no state.

A reserved bundle ``i`` of placement group ``G`` shows on its node as resources of
its own (the names Ray gives them, so ``available_resources()`` reads the same):
``CPU_group_i_G``, ``GPU_group_i_G``, ... for what the bundle holds, and a marker
``bundle_group_i_G`` that even a task asking for nothing takes a sliver of (so it
still lands on that node). A task or actor scheduled into the bundle asks for those
names instead of ``CPU``, ``GPU`` ...: the scheduler then needs no notion of groups
at all. One that may use any bundle (index -1) asks for ``CPU_group_G`` ..., which
no node has: the controller gives it a bundle with room (``in_bundle``), waiting for
one to free up if none has.
"""

from __future__ import annotations

from .resources import to_units

MARKER = "bundle"
MARKER_TOTAL = to_units(1000)  # (as Ray: a bundle's marker is 1000, each user takes 0.0001 of it)
MARKER_TAKE = 1


def _suffix(pg_id: str, index: int) -> str:
    return f"_group_{index}_{pg_id}" if index >= 0 else f"_group_{pg_id}"


def request_in_bundle(units: tuple, pg_id: str, index: int) -> tuple:
    """A request (normalized units) for bundle ``index`` of ``pg_id`` (-1: any bundle)."""
    suffix = _suffix(pg_id, index)
    renamed = {name + suffix: amount for name, amount in units}
    renamed[MARKER + suffix] = MARKER_TAKE
    return tuple(sorted(renamed.items()))


def bundle_of(units: tuple) -> tuple[str, int] | None:
    """(placement group id, bundle index or -1) a request is for; None outside groups."""
    prefix = MARKER + "_group_"
    for name, _ in units:
        if name.startswith(prefix):
            parts = name[len(prefix):].split("_")
            return (parts[0], -1) if len(parts) == 1 else (parts[1], int(parts[0]))
    return None


def in_bundle(units: tuple, index: int) -> tuple:
    """An any-bundle request of group ``G`` as one for its bundle ``index``."""
    pg_id, _ = bundle_of(units)
    old, new = _suffix(pg_id, -1), _suffix(pg_id, index)
    return tuple(sorted((name[: -len(old)] + new, amount) for name, amount in units))


def base_request(units: tuple) -> tuple:
    """What a request in a bundle asks for, by the node's names (the marker dropped)."""
    found = bundle_of(units)
    if found is None:
        return units
    suffix = _suffix(*found)
    return tuple(sorted((name[: -len(suffix)], amount) for name, amount in units
                        if not name.startswith(MARKER + "_group_")))


def bundle_resources(bundle: tuple, pg_id: str, index: int) -> dict:
    """The resources a reserved bundle adds to its node (its marker included)."""
    suffix = _suffix(pg_id, index)
    names = {name + suffix: amount for name, amount in bundle}
    names[MARKER + suffix] = MARKER_TOTAL
    return names


def summed(bundle_list: list) -> tuple:
    """What all the bundles ask for together (normalized units)."""
    total: dict = {}
    for bundle in bundle_list:
        for name, amount in bundle:
            total[name] = total.get(name, 0) + amount
    return tuple(sorted(total.items()))


def within(units: tuple, held: dict) -> bool:
    """``units`` fit in ``held`` ({name: units}: a host's totals, a bundle)."""
    return all(amount <= held.get(name, 0) for name, amount in units)


def gpu_pool(pg_id: str, index: int) -> str:
    """The name a bundle's GPUs are tracked under on its node."""
    return "GPU" + _suffix(pg_id, index)

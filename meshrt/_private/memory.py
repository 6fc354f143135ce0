"""``memory_summary()``: what the object store holds, where, and who refers to it."""

from __future__ import annotations

from . import ids, state


def memory_summary() -> str:
    """A readable table of stored objects (size, place, pins, owner, refs) and totals."""
    core = state.core()
    core.flush_frees()  # count refs made and dropped since the last drain
    info = core.request_sync("store_summary") if core.store is not None else None
    lines = []
    if info is None:
        lines.append("no shared-memory store in this mode (local_mode keeps values in the driver)")
    else:
        u = info["usage"]
        lines.append(
            f"object store: {_mib(u['used'])} used of {_mib(u['capacity'])} "
            f"({u['objects']} objects in shared memory, {u['pinned']} mapped by readers); "
            f"spilled: {u['spilled_objects']} objects, {_mib(u['spilled_bytes'])} "
            f"({u['spills']} spills, {u['restores']} restores so far)"
        )
        lines.append(f"{'object':38} {'size':>10}  {'where':14} {'owner':>6}  {'mapped by':14} refs in owner")
        entries = core.table.entries
        for rec in sorted(info["objects"], key=lambda r: -r["size"]):
            entry = entries.get(rec["key"])
            refs = _holders(entry) if entry is not None else "-"
            pins = ",".join(f"w{w}x{n}" for w, n in rec["pins"].items()) or "-"
            where = rec["where"] + (" (freed)" if rec["freed"] else "")
            lines.append(f"{ids.to_hex(rec['key'], ids.OBJECT_HEX):38} {_mib(rec['size']):>10}  {where:14} "
                         f"{'w' + str(rec['owner']):>6}  {pins:14} {refs}")
    inline = [e for e in core.table.entries.values()
              if e.owner == core.worker_id and e.payload is not None and e.payload.shm is None]
    lines.append(f"inline values owned by this process: {len(inline)}, "
                 f"{_mib(sum(e.payload.nbytes for e in inline))}")
    return "\n".join(lines)


def _holders(entry) -> str:
    parts = [f"{entry.local} local"]
    if entry.borrowers:
        parts.append("borrowed by " + ",".join(f"w{w}" for w, n in entry.borrowers.items() if n > 0))
    return "; ".join(parts)


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB"

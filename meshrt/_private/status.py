"""``meshrt status``: a running cluster's hosts, processes, actors and object store.

The controller answers a ``cluster_status`` request on any connection that passed the
token handshake; the command line connects, asks, and prints ``render(...)``.
"""

from __future__ import annotations

import collections

from . import ids, labels


def collect(controller, store: dict) -> dict:
    """Controller loop: a plain-data snapshot of the cluster (``store``: the store's
    usage and objects, as store_summary gives them)."""
    per_host = collections.Counter(w.host for w in controller.workers.values())
    hosts = [{
        "id": 0, "name": controller.config["hostname"], "role": "head",
        "total": controller.node.as_floats("total"), "available": controller.node.as_floats("available"),
        "workers": per_host.get(0, 0), "labels": labels.given(controller.labels),
    }]
    for h in controller.hosts.values():
        if h.alive:
            hosts.append({"id": h.id, "name": h.name, "role": "agent", "total": h.node.as_floats("total"),
                          "available": h.node.as_floats("available"), "workers": per_host.get(h.id, 0),
                          "labels": labels.given(h.labels)})
    actors = collections.Counter()
    for rec in controller.actors.values():
        actors[(rec.spec.class_name, rec.state, rec.spec.host)] += 1
    return {
        "session": controller.config["session"],
        "address": controller.public_address,
        "hosts": hosts,
        "actors": [{"class": c, "state": s, "host": h, "count": n} for (c, s, h), n in sorted(actors.items())],
        "store": store,
    }


def render(info: dict) -> str:
    lines = [f"meshrt cluster {info['address'] or ''} (session {info['session']})".replace("  ", " ")]
    lines.append(f"hosts: {len(info['hosts'])}")
    for h in info["hosts"]:
        res = ", ".join(f"{k} {_num(h['available'].get(k, 0))}/{_num(v)} free"
                        for k, v in sorted(h["total"].items()) if k in ("CPU", "GPU"))
        tags = "".join(f" {k}={v}" for k, v in sorted(h.get("labels", {}).items()))
        lines.append(f"  host {h['id']} {h['name']!r} ({h['role']}): {res}; {h['workers']} worker process(es)"
                     f"{'; labels' + tags if tags else ''}")
    alive = sum(a["count"] for a in info["actors"] if a["state"] == "alive")
    lines.append(f"actors: {alive} alive, {sum(a['count'] for a in info['actors'])} known")
    for a in info["actors"]:
        lines.append(f"  {a['count']:>4} x {a['class']} {a['state']} on host {a['host']}")
    u = info["store"]["usage"]
    lines.append(f"object store (head host): {_mib(u['used'])} used of {_mib(u['capacity'])}, "
                 f"{u['objects']} objects in shared memory, {u['spilled_objects']} spilled "
                 f"({_mib(u['spilled_bytes'])})")
    for rec in sorted(info["store"]["objects"], key=lambda r: -r["size"])[:50]:
        pins = ",".join(f"w{w}x{n}" for w, n in rec["pins"].items()) or "-"
        lines.append(f"  {ids.to_hex(rec['key'], ids.OBJECT_HEX)} {_mib(rec['size']):>10}  {rec['where']:14} "
                     f"owner w{rec['owner']}  mapped by {pins}")
    return "\n".join(lines)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB"

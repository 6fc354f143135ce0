"""Plan: a Strategy plus what it was chosen from and why, printable and saved as JSON.

``print(plan)`` shows the degrees, each stage's layers, processes, memory and time,
the reason for the choice and how every other candidate compared.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from .strategy import Strategy


@dataclasses.dataclass
class Plan:
    strategy: Strategy
    layers: list[str] = dataclasses.field(default_factory=list)
    stages: list[dict] = dataclasses.field(default_factory=list)  # layers, ranks, memory, time
    step_s: float | None = None
    memory_cap: float | None = None
    reasons: list[str] = dataclasses.field(default_factory=list)
    candidates: list[dict] = dataclasses.field(default_factory=list)  # strategy, step_s, memory, verdict
    measured: dict[str, Any] = dataclasses.field(default_factory=dict)  # links, device, batch

    # -- persistence ------------------------------------------------------------------------

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["strategy"] = self.strategy.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Plan:
        data = dict(data)
        data["strategy"] = Strategy.from_dict(data["strategy"])
        return cls(**data)

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1)

    @classmethod
    def load(cls, path: str) -> Plan:
        with open(path) as f:
            return cls.from_dict(json.load(f))

    # -- reading ----------------------------------------------------------------------------

    def __str__(self) -> str:
        lines = [f"Plan: {self.strategy}"]
        if self.step_s is not None:
            lines[0] += f"  (estimated step {self.step_s * 1e3:.1f} ms)"
        if self.stages:
            rows = [("stage", "layers", "processes", "memory/process", "time/microbatch")]
            for k, st in enumerate(self.stages):
                names = st["layers"]
                span = names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]} ({len(names)})"
                rows.append((str(k), span, _ranks(st["ranks"]), _bytes(st["memory"]),
                             f"{st['time_s'] * 1e3:.2f} ms"))
            lines += _table(rows)
        if self.memory_cap:
            lines.append(f"memory per process: {_bytes(self.memory_cap)} available")
        if self.measured.get("links"):
            links = self.measured["links"]
            lines.append(f"links: all-reduce {links['allreduce'] / 1e9:.2f} GB/s, "
                         f"point-to-point {links['p2p'] / 1e9:.2f} GB/s, "
                         f"{links.get('latency', 0) * 1e6:.0f} us per small collective (measured)")
            if links.get("cpu_share", 1) > 1:
                lines.append(f"cores: {links['cpu_share']:.1f} processes per core (they share them)")
        if self.reasons:
            lines.append("why:")
            lines += [f"  - {r}" for r in self.reasons]
        if self.candidates:
            lines.append("candidates:")
            rows = [("strategy", "est. step", "memory/process", "verdict")]
            for c in self.candidates:
                step = "-" if c["step_s"] is None else f"{c['step_s'] * 1e3:.1f} ms"
                mem = "-" if c["memory"] is None else _bytes(c["memory"])
                rows.append((c["strategy"], step, mem, c["verdict"]))
            lines += ["  " + r for r in _table(rows)]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Plan {self.strategy}>"


def _table(rows: list[tuple]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    out.insert(1, "  ".join("-" * w for w in widths))
    return out


def _ranks(ranks: list[int]) -> str:
    if len(ranks) > 1 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(map(str, ranks))


def _bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"

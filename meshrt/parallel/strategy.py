"""Strategy: how many ways a model is split along each kind of parallelism.

The four degrees multiply to the number of processes. Processes are laid out as a
row-major array of dims ``("pp", "dp", "fsdp", "tp")``: tensor-parallel peers are
neighbours (the same host, the fastest links), pipeline stages are farthest apart
(they exchange only activations).
"""

from __future__ import annotations

import dataclasses
import json

DIMS = ("pp", "dp", "fsdp", "tp")
SCHEDULES = ("gpipe", "1f1b")


@dataclasses.dataclass(frozen=True)
class Strategy:
    """Degrees of data (``dp``, DDP), fully-sharded data (``fsdp``, FSDP2), tensor (``tp``,
    DTensor) and pipeline (``pp``) parallelism, plus the pipeline's microbatches and
    schedule and whether each stage is compiled with ``torch.compile``."""

    dp: int = 1
    fsdp: int = 1
    tp: int = 1
    pp: int = 1
    microbatches: int | None = None
    schedule: str = "1f1b"
    compile: bool = False

    def __post_init__(self) -> None:
        for name in DIMS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Strategy({name}={value!r}): a degree must be an int >= 1")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"Strategy(schedule={self.schedule!r}): choose one of {SCHEDULES}")
        m = self.microbatches
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise ValueError(f"Strategy(microbatches={m!r}): must be an int >= 1 (or None: "
                             "one per pipeline stage)")
        if m is None:  # one per stage keeps every stage busy in the steady state
            object.__setattr__(self, "microbatches", self.pp)

    @property
    def size(self) -> int:
        """How many processes this strategy needs."""
        return self.pp * self.dp * self.fsdp * self.tp

    @property
    def replicas(self) -> int:
        """How many ways the global batch is split (dp x fsdp)."""
        return self.dp * self.fsdp

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(getattr(self, d) for d in DIMS)

    def check_size(self, processes: int, what: str = "the mesh") -> None:
        if self.size != processes:
            raise ValueError(
                f"{self} needs pp*dp*fsdp*tp = {self.size} processes but {what} has {processes}; "
                f"change the degrees so that they multiply to {processes}"
            )

    def coords(self, rank: int) -> dict[str, int]:
        """Where flat rank ``rank`` sits along each dim."""
        out = {}
        for name, size in zip(reversed(DIMS), reversed(self.sizes), strict=True):
            out[name] = rank % size
            rank //= size
        return {d: out[d] for d in DIMS}

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Strategy:
        return cls(**data)

    def __str__(self) -> str:
        parts = [f"{d}={getattr(self, d)}" for d in DIMS if getattr(self, d) > 1] or ["dp=1"]
        if self.pp > 1:
            parts += [f"microbatches={self.microbatches}", f"schedule={self.schedule!r}"]
        if self.compile:
            parts.append("compile=True")
        return f"Strategy({', '.join(parts)})"

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

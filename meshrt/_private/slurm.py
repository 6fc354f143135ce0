"""What an agent reads from SLURM's environment, so ``srun meshrt agent`` needs no flags.

The head is the first host of the job (``SLURM_JOB_NODELIST``), where the batch
script runs the driver; this host's name is ``SLURMD_NODENAME``.
"""

from __future__ import annotations

import os
import re


def node_name() -> str | None:
    return os.environ.get("SLURMD_NODENAME")


def num_nodes() -> int | None:
    value = os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES")
    return int(value) if value and value.isdigit() else None


def head_address(port: int) -> str | None:
    """The first host of the job, at ``MESHRT_PORT`` (or ``port``)."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if not nodelist:
        return None
    hosts = expand_nodelist(nodelist)
    port = int(os.environ.get("MESHRT_PORT") or port)
    return f"{hosts[0]}:{port}" if hosts else None


def expand_nodelist(text: str) -> list[str]:
    """``"gpu[01-03,07],cpu5"`` -> ``["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"]``.

    Written here rather than calling ``scontrol show hostnames``: the agent may run
    where scontrol is not installed (a container), and the grammar is small.
    """
    hosts: list[str] = []
    for prefix, ranges, suffix in re.findall(r"([^,\[\]]*)(?:\[([^\]]*)\])?([^,\[\]]*)(?:,|$)", text):
        if not (prefix or ranges or suffix):
            continue
        if not ranges:
            hosts.append(prefix + suffix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if not hi:
                hosts.append(prefix + lo + suffix)
                continue
            width = len(lo)
            hosts.extend(f"{prefix}{i:0{width}d}{suffix}" for i in range(int(lo), int(hi) + 1))
    return hosts

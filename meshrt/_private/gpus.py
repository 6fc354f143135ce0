"""Counting NVIDIA GPUs without importing torch or creating a CUDA context."""

from __future__ import annotations

import os
import shutil
import subprocess


def detect_gpu_count() -> int:
    """GPUs this process may use: CUDA_VISIBLE_DEVICES if set, else what the driver reports."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [d for d in visible.split(",") if d.strip() and d.strip() != "-1"]
        return len(ids)
    proc = "/proc/driver/nvidia/gpus"
    if os.path.isdir(proc):
        try:
            return len(os.listdir(proc))
        except OSError:
            pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10)
            return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
        except (OSError, subprocess.SubprocessError):
            pass
    return 0


def physical_ids(assigned: tuple[int, ...]) -> list[str]:
    """Map the node's GPU slots to the driver's device ids (honouring CUDA_VISIBLE_DEVICES)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        names = [d.strip() for d in visible.split(",") if d.strip()]
        return [names[i] if i < len(names) else str(i) for i in assigned]
    return [str(i) for i in assigned]

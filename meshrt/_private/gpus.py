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


# What a worker was given, for get_gpu_ids(): CUDA_VISIBLE_DEVICES says it only when
# it was given some (worker_env).
ASSIGNED = "MESHRT_GPU_IDS"
# A worker's GPU slots as the head sends them to an agent, which maps them (worker_env).
SLOTS = "MESHRT_GPU_SLOTS"


def worker_env(slots: tuple[int, ...] | list[int]) -> dict:
    """The environment of a worker given these GPU slots of this host. As Ray 2.x does
    (ray-project/ray#54868), CUDA_VISIBLE_DEVICES is set only for a worker given GPUs: one
    given none keeps what it inherits, so a ``num_gpus=0`` task may still use a card;
    ``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1`` hides every GPU from it, as Ray did before."""
    ids = physical_ids(tuple(slots))
    env = {ASSIGNED: ",".join(ids)}
    if ids or os.environ.get("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "").lower() in ("1", "true"):
        env["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
    return env


def physical_ids(assigned: tuple[int, ...]) -> list[str]:
    """Map the node's GPU slots to the driver's device ids (honouring CUDA_VISIBLE_DEVICES)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        names = [d.strip() for d in visible.split(",") if d.strip()]
        return [names[i] if i < len(names) else str(i) for i in assigned]
    return [str(i) for i in assigned]


def detect_accelerator_type() -> str | None:
    """This host's GPU model in Ray's naming ("H100", "A100", "L4", ...), from the
    driver's /proc files or nvidia-smi (no CUDA context); None without an NVIDIA GPU."""
    proc = "/proc/driver/nvidia/gpus"
    try:
        for bus in sorted(os.listdir(proc)):
            with open(os.path.join(proc, bus, "information")) as f:
                for line in f:
                    if line.startswith("Model:"):
                        return accelerator_type_of(line.split(":", 1)[1])
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                                 timeout=10)
            names = [line for line in out.stdout.splitlines() if line.strip()]
            if names:
                return accelerator_type_of(names[0])
        except (OSError, subprocess.SubprocessError):
            pass
    return None


_VENDOR_WORDS = ("NVIDIA", "Tesla")


def accelerator_type_of(name: str) -> str | None:
    """A GPU's product name as Ray's accelerator type: the model's upper-case words,
    joined by "-", without vendor, memory size or form factor ("NVIDIA H100 80GB
    HBM3" -> "H100", "Tesla V100-SXM2-16GB" -> "V100", "NVIDIA RTX PRO 6000
    Blackwell" -> "RTX-PRO-6000"); a consumer card's whole name otherwise
    ("NVIDIA GeForce RTX 4090" -> "GeForce-RTX-4090")."""
    words = name.split()
    while words and words[0] in _VENDOR_WORDS:
        words = words[1:]
    if not words:
        return None
    model: list[str] = []
    for word in words:
        part = word.split("-", 1)[0]
        is_memory = part[:-2].isdigit() and part.endswith("GB")
        if not part or is_memory or part != part.upper() or not part.isalnum():
            break
        model.append(part)
        if "-" in word:  # ("A100-SXM4-40GB": the rest is form factor and memory)
            break
    if model and len("-".join(model)) > 1:
        return "-".join(model)
    return "-".join(words)

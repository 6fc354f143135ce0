"""Measure a model layer by layer, on the device it will train on.

Per layer: parameter, gradient and optimizer-state bytes (the optimizer really takes
a step, so its state is what it allocates, not a guess), activation bytes kept for
backward per sample (counted as autograd saves them) and compute time. Time is
measured at two batch sizes and fitted as ``fixed + per_sample * n``: small batches
are dominated by per-call overhead, and the partitioner asks about microbatches of
sizes we never ran. Forward time is timed per layer; the measured backward total is
split over layers in proportion to their forward time.
"""

from __future__ import annotations

import dataclasses
import os
import time

import torch

from . import batch as batches
from .defaults import make_optimizer
from .layers import layer_units


@dataclasses.dataclass
class LayerStats:
    name: str
    params: int  # parameter count
    param_bytes: int
    grad_bytes: int
    optim_bytes: int
    act_bytes_per_sample: float
    time_fixed: float  # seconds per forward+backward call, whatever the batch
    time_per_sample: float  # seconds per sample, forward+backward
    out_bytes_per_sample: float  # what a pipeline stage ending here sends on

    @property
    def static_bytes(self) -> int:
        return self.param_bytes + self.grad_bytes + self.optim_bytes

    def time(self, samples: float) -> float:
        return self.time_fixed + self.time_per_sample * samples


def profile_model(model_fn, sample_batch, optimizer_fn, loss_fn, seed: int = 0,
                  repeats: int = 3) -> list[LayerStats]:
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    torch.manual_seed(seed)
    model = model_fn().to(device)
    units = layer_units(model)
    owned = _owned_params(units)
    n_full = batches.batch_size(sample_batch)
    full = batches.to_device(sample_batch, device)
    sizes = [n_full] if n_full < 2 else [n_full, n_full // 2]
    optimizer, _scheduler = make_optimizer(optimizer_fn, model)
    probe = _Probe(units, device)
    runs = {}
    for n in sizes:
        part = batches.split(full, n_full // n, 0) if n != n_full else full
        samples = []
        for i in range(repeats + 1):
            optimizer.zero_grad(set_to_none=True)
            probe.start()
            out = batches.forward(model, part)
            loss = loss_fn(out, part)
            fwd_done = probe.now()
            loss.backward()
            bwd = probe.now() - fwd_done
            probe.stop()
            if n == n_full and i == 0:
                optimizer.step()  # allocates the optimizer's state
            if i > 0:  # the first run warms caches and allocators
                samples.append((list(probe.fwd), bwd, list(probe.act), list(probe.out)))
        runs[n] = _median_run(samples)
    stats = []
    for k, (name, _unit) in enumerate(units):
        params = owned[k]
        pbytes = sum(p.numel() * p.element_size() for p in params)
        gbytes = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
        obytes = sum(_state_bytes(optimizer.state.get(p, {})) for p in params)
        t_full = _layer_time(runs[n_full], k)
        if len(sizes) > 1:
            t_half = _layer_time(runs[sizes[1]], k)
            per = max((t_full - t_half) / (n_full - sizes[1]), 0.0)
            fixed = max(t_full - per * n_full, 0.0)
        else:
            per, fixed = t_full / n_full, 0.0
        stats.append(LayerStats(name, sum(p.numel() for p in params), pbytes, gbytes, obytes,
                                runs[n_full][2][k] / n_full, fixed, per, runs[n_full][3][k] / n_full))
    return stats


def memory_per_process(processes_on_host: int) -> int:
    """What one process may use: its GPU's memory, or its share of the host's free RAM."""
    if torch.cuda.is_available():
        _free, total = torch.cuda.mem_get_info()
        return int(total * 0.9)
    avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return int(avail * 0.8 / max(processes_on_host, 1))


class _Probe:
    """Forward hooks on every layer: time, saved-for-backward bytes and output bytes."""

    def __init__(self, units, device) -> None:
        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        self.n = len(units)
        self.active = False
        for k, (_name, unit) in enumerate(units):
            unit.register_forward_pre_hook(self._pre(k))
            unit.register_forward_hook(self._post(k))

    def now(self) -> float:
        self.sync()
        return time.perf_counter()

    def start(self) -> None:
        self.fwd = [0.0] * self.n
        self.act = [0] * self.n
        self.out = [0] * self.n
        self.active = True

    def stop(self) -> None:
        self.active = False

    def _pre(self, k):
        def hook(module, args):
            if not self.active:
                return
            seen: set = set()

            def pack(t):
                key = (t.untyped_storage().data_ptr(), t.dtype)
                if key not in seen and t.device.type != "meta":
                    seen.add(key)
                    self.act[k] += t.untyped_storage().nbytes()
                return t

            ctx = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
            ctx.__enter__()
            module._meshrt_probe = (ctx, self.now())
        return hook

    def _post(self, k):
        def hook(module, args, output):
            state = getattr(module, "_meshrt_probe", None)
            if state is None or not self.active:
                return
            ctx, t0 = state
            self.fwd[k] += self.now() - t0
            ctx.__exit__(None, None, None)
            module._meshrt_probe = None
            self.out[k] = _output_bytes(output)
        return hook


def _output_bytes(output) -> int:
    if isinstance(output, torch.Tensor):
        return output.numel() * output.element_size()
    if isinstance(output, (tuple, list)):
        return sum(_output_bytes(o) for o in output)
    if isinstance(output, dict):
        return sum(_output_bytes(o) for o in output.values())
    tensor = getattr(output, "last_hidden_state", None) or getattr(output, "logits", None)
    return _output_bytes(tensor) if tensor is not None else 0


def _owned_params(units) -> list[list]:
    seen: set[int] = set()
    out = []
    for _name, unit in units:
        mine = [p for p in unit.parameters() if id(p) not in seen]
        seen.update(id(p) for p in mine)
        out.append(mine)
    return out


def _state_bytes(state: dict) -> int:
    return sum(v.numel() * v.element_size() for v in state.values() if isinstance(v, torch.Tensor) and v.dim() > 0)


def _median_run(samples):
    """The run whose total time is the median (noisy machines: one slow outlier is common)."""
    ordered = sorted(samples, key=lambda s: sum(s[0]) + s[1])
    return ordered[len(ordered) // 2]


def _layer_time(run, k: int) -> float:
    fwd, bwd, _act, _out = run
    total_fwd = sum(fwd) or 1.0
    return fwd[k] + bwd * fwd[k] / total_fwd


def merge_layers(stats: list[LayerStats], groups: list[list[int]]) -> list[LayerStats]:
    """One LayerStats per group of ``layers.cut_groups``: the units a pipeline cannot
    separate are priced and placed together. Named ``first+...+last``."""
    out = []
    for group in groups:
        members = [stats[k] for k in group]
        if len(members) == 1:
            out.append(members[0])
            continue
        out.append(LayerStats(
            "+".join(m.name for m in members),
            sum(m.params for m in members), sum(m.param_bytes for m in members),
            sum(m.grad_bytes for m in members), sum(m.optim_bytes for m in members),
            sum(m.act_bytes_per_sample for m in members), sum(m.time_fixed for m in members),
            sum(m.time_per_sample for m in members), members[-1].out_bytes_per_sample))
    return out

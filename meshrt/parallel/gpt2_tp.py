"""Tensor parallelism for GPT-2 (Hugging Face ``GPT2LMHeadModel``), whose projections are
``Conv1D`` (``x @ W + b``, weight stored input-major) rather than ``nn.Linear``, with
query, key and value fused into one ``c_attn``. DTensor's ``ColwiseParallel`` shards
Linears, and a plain column split of the fused weight would hand one rank all the
queries and another the values, so before tensor parallelism each block's projections
become Linears: ``c_attn`` three of them (``q_proj``, ``k_proj``, ``v_proj``, each split
by heads), ``c_proj`` and ``c_fc`` one each (under ``.linear``). The attention then
splits its local projection into ``hidden / tp`` wide parts.

Parameter names change with the layout (``attn.c_attn.q_proj.weight``), so a
checkpoint of a tensor-parallel GPT-2 fails loudly, naming the missing key, when read
back without tensor parallelism instead of loading transposed weights. The gathered
state dict (``Trainer.state_dict``) is turned back into GPT-2's own layout
(``hf_layout``).
"""

from __future__ import annotations

import re

import torch
import torch.nn as nn


class FusedQKV(nn.Module):
    """``c_attn`` as three Linears whose outputs are concatenated, as the fused one's are."""

    def __init__(self, conv: nn.Module) -> None:
        super().__init__()
        weight, bias = conv.weight.detach(), conv.bias.detach()
        width = weight.shape[1] // 3
        for k, name in enumerate(("q_proj", "k_proj", "v_proj")):
            linear = nn.Linear(weight.shape[0], width, device=weight.device, dtype=weight.dtype)
            with torch.no_grad():
                linear.weight.copy_(weight[:, k * width:(k + 1) * width].t())
                linear.bias.copy_(bias[k * width:(k + 1) * width])
            self.add_module(name, linear)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)


class ConvAsLinear(nn.Module):
    """A ``Conv1D`` as the Linear it is (weight transposed)."""

    def __init__(self, conv: nn.Module) -> None:
        super().__init__()
        weight, bias = conv.weight.detach(), conv.bias.detach()
        self.linear = nn.Linear(weight.shape[0], weight.shape[1], device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            self.linear.weight.copy_(weight.t())
            self.linear.bias.copy_(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def _is_conv1d(module) -> bool:
    # transformers' Conv1D, recognised by name: importing transformers for a check would
    # cost every model a second of import time
    return type(module).__name__ == "Conv1D" and getattr(module, "weight", None) is not None


def _attention(module, children) -> bool:
    return (_is_conv1d(children.get("c_attn")) and _is_conv1d(children.get("c_proj"))
            and hasattr(module, "split_size") and not getattr(module, "is_cross_attention", False))


def _mlp(children) -> bool:
    return _is_conv1d(children.get("c_fc")) and _is_conv1d(children.get("c_proj"))


def pairs(model: nn.Module, tp: int) -> list[tuple[list[str], str]]:
    """The Megatron pairs (q/k/v -> c_proj, c_fc -> c_proj) of GPT-2 blocks, named as
    they will be after ``convert``; raises if ``tp`` does not divide heads or widths."""
    from .tensor_plan import TensorParallelError

    out = []
    for prefix, module in model.named_modules():
        children = dict(module.named_children())
        p = f"{prefix}." if prefix else ""
        if _attention(module, children):
            if module.num_heads % tp:
                raise TensorParallelError(f"tp={tp} does not divide the {module.num_heads} attention "
                                          f"heads of {prefix!r}; choose a tp that divides them")
            out.append(([f"{p}c_attn.q_proj", f"{p}c_attn.k_proj", f"{p}c_attn.v_proj"], f"{p}c_proj.linear"))
        elif _mlp(children):
            width = children["c_fc"].weight.shape[1]
            if width % tp:
                raise TensorParallelError(f"tp={tp} does not divide the {width} hidden features of "
                                          f"{prefix!r}; choose a tp that divides {width}")
            out.append(([f"{p}c_fc.linear"], f"{p}c_proj.linear"))
    return out


def convert(model: nn.Module, tp: int) -> None:
    """Turn every GPT-2 block's Conv1D pairs into Linears, in place, and size each
    attention's split for its ``1/tp`` share of the heads."""
    for module in list(model.modules()):
        children = dict(module.named_children())
        if _attention(module, children):
            module.c_attn = FusedQKV(children["c_attn"])
            module.c_proj = ConvAsLinear(children["c_proj"])
            module.split_size = module.embed_dim // tp
            module.num_heads = module.num_heads // tp
            module.embed_dim = module.embed_dim // tp
        elif _mlp(children):
            module.c_fc = ConvAsLinear(children["c_fc"])
            module.c_proj = ConvAsLinear(children["c_proj"])


_QKV = re.compile(r"^(.*\.c_attn)\.([qkv])_proj\.(weight|bias)$")
_LINEAR = re.compile(r"^(.*\.(?:c_proj|c_fc))\.linear\.(weight|bias)$")


def hf_layout(state: dict) -> dict:
    """A converted model's full state dict in GPT-2's own names and Conv1D layout."""
    out, qkv = {}, {}
    for key, value in state.items():
        m = _QKV.match(key)
        if m:
            qkv.setdefault((m.group(1), m.group(3)), {})[m.group(2)] = value
            continue
        m = _LINEAR.match(key)
        if m:
            out[f"{m.group(1)}.{m.group(2)}"] = value.t().contiguous() if m.group(2) == "weight" else value
            continue
        out[key] = value
    for (prefix, kind), parts in qkv.items():
        ordered = [parts[c] for c in "qkv"]
        out[f"{prefix}.{kind}"] = (torch.cat([w.t() for w in ordered], dim=1) if kind == "weight"
                                   else torch.cat(ordered))
    return out

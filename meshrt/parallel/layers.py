"""A model seen as an ordered list of layers: the units that are profiled, sharded
one by one (FSDP) and cut into pipeline stages.

Transformers keep their repeated blocks in one ``nn.ModuleList`` (GPT-2's
``transformer.h``, Llama's ``model.layers``); what comes before it (embeddings) and
after it (final norm, head) are layers too. An ``nn.Sequential`` is its children.
Anything else is one layer.
"""

from __future__ import annotations

import torch.nn as nn


def layer_units(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``[(qualified name, module)]`` in execution order; every parameter of the model
    belongs to exactly one of them (tied weights count once, with the first user)."""
    units = _expand(model, "")
    seen: set[int] = set()
    out = []
    for name, module in units:
        own = [p for p in module.parameters() if id(p) not in seen]
        seen.update(id(p) for p in own)
        out.append((name, module))
    return out


def cut_groups(model: nn.Module) -> list[list[int]]:
    """Indices into ``layer_units(model)`` grouped so that a pipeline stage may start at
    any group: every layer of an ``nn.Sequential``; for a model of repeated blocks, the
    blocks, with the layers before them joined to the first block and those after them
    to the last (a stage of embeddings alone would not run: the model's forward joins
    them in ways only its own code knows)."""
    units = layer_units(model)
    path = None if isinstance(model, nn.Sequential) else _main_block_list(model)
    if path is None:
        return [[i] for i in range(len(units))]
    prefix = path + "."
    blocks = [i for i, (name, _) in enumerate(units) if name.startswith(prefix)]
    if not blocks:
        return [list(range(len(units)))]
    groups = [[i] for i in blocks]
    groups[0] = list(range(0, blocks[0])) + groups[0]
    groups[-1] = groups[-1] + list(range(blocks[-1] + 1, len(units)))
    return groups


def _expand(module: nn.Module, prefix: str) -> list[tuple[str, nn.Module]]:
    if isinstance(module, nn.Sequential):
        return [(_join(prefix, n), c) for n, c in module.named_children()]
    blocks = _main_block_list(module)
    if blocks is None:
        return [(prefix or "model", module)]
    path = blocks.split(".")
    out = []
    for name, child in module.named_children():
        full = _join(prefix, name)
        if name == path[0] and len(path) == 1:
            out += [(_join(full, n), c) for n, c in child.named_children()]
        elif name == path[0]:
            out += _expand(child, full)
        elif _has_params(child):
            out.append((full, child))
    return out


def _main_block_list(module: nn.Module) -> str | None:
    """The dotted path of the ModuleList holding most of the parameters, if any holds
    at least a third of them (that is a model built from repeated blocks)."""
    total = sum(p.numel() for p in module.parameters())
    best, best_n = None, 0
    for name, sub in module.named_modules():
        if isinstance(sub, (nn.ModuleList, nn.ModuleDict)) and len(sub) > 1:
            n = sum(p.numel() for p in sub.parameters())
            if n > best_n:
                best, best_n = name, n
    if best is None or total == 0 or best_n * 3 < total:
        return None
    return best


def _has_params(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name

"""Which Linear layers tensor parallelism splits, and how (DTensor ``parallelize_module``).

Megatron's pairing: the first Linear of a pair is split by output columns, the
second by input rows, so the pair needs one all-reduce forward and one backward,
and whatever runs between them (an activation, attention over local heads) works on
local shards. Pairs come from names in attention and MLP blocks
(``q_proj/k_proj/v_proj`` -> ``o_proj``, ``gate_proj/up_proj`` -> ``down_proj``,
``fc1`` -> ``fc2``, ``c_fc`` -> ``c_proj``, ``linear1`` -> ``linear2``), from GPT-2's
``Conv1D`` blocks once ``gpt2_tp`` has made Linears of them, or, in an
``nn.Sequential``, from consecutive Linears with only element-wise modules between
them (an activation, dropout): a module that mixes features (softmax, a norm) would
see only its shard of them, so it ends the pair.
"""

from __future__ import annotations

import torch.nn as nn

# name of the column-split layer(s) -> name of the row-split layer that closes the pair
_NAMED_PAIRS = [
    (("q_proj", "k_proj", "v_proj"), "o_proj"),
    (("gate_proj", "up_proj"), "down_proj"),
    (("fc1",), "fc2"),
    (("c_fc",), "c_proj"),
    (("w1", "w3"), "w2"),
    (("linear1",), "linear2"),  # torch.nn.TransformerEncoderLayer / DecoderLayer feed-forward
]


# Modules that act on each feature alone: safe on a column shard.
_ELEMENTWISE = (
    nn.ReLU, nn.ReLU6, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.LeakyReLU, nn.ELU, nn.SELU, nn.CELU,
    nn.Mish, nn.Hardtanh, nn.Hardswish, nn.Hardsigmoid, nn.Softplus, nn.Softsign, nn.Tanhshrink,
    nn.Dropout, nn.Identity,
)


class TensorParallelError(ValueError):
    """The model has nothing tensor parallelism can split, or a dim that tp does not divide."""


def linear_pairs(model: nn.Module) -> list[tuple[list[str], str]]:
    """``[([column-split names], row-split name)]`` over the whole model."""
    pairs: list[tuple[list[str], str]] = []
    for prefix, module in model.named_modules():
        children = dict(module.named_children())
        for cols, row in _NAMED_PAIRS:
            found = [c for c in cols if isinstance(children.get(c), nn.Linear)]
            if found and isinstance(children.get(row), nn.Linear):
                pairs.append(([_join(prefix, c) for c in found], _join(prefix, row)))
        if isinstance(module, nn.Sequential):
            pairs += _sequential_pairs(module, prefix)
    return pairs


def _sequential_pairs(seq: nn.Sequential, prefix: str) -> list[tuple[list[str], str]]:
    pairs, open_col = [], None
    for name, child in seq.named_children():
        if isinstance(child, nn.Linear):
            if open_col is None:
                open_col = name
            else:
                pairs.append(([_join(prefix, open_col)], _join(prefix, name)))
                open_col = None
        elif not isinstance(child, _ELEMENTWISE):
            open_col = None  # it mixes features (softmax, a norm) or may: no pair across it
    return pairs


def plan_for(model: nn.Module, tp: int) -> dict:
    """The ``parallelize_module`` plan for degree ``tp``; raises naming what blocks it.
    GPT-2's entries name the Linears ``gpt2_tp.convert`` will make of its Conv1D blocks."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    from . import gpt2_tp

    converted = gpt2_tp.pairs(model, tp)  # divisibility checked there
    pairs = linear_pairs(model)
    if not pairs and not converted:
        raise TensorParallelError(
            f"tp={tp}: found no Linear layers to split in {type(model).__name__} (looked for "
            "q/k/v_proj->o_proj, gate/up_proj->down_proj, fc1->fc2, c_fc->c_proj, GPT-2 blocks and Linear "
            "pairs in nn.Sequential); use dp/fsdp/pp instead"
        )
    modules = dict(model.named_modules())
    for cols, row in pairs:
        for name in cols:
            _check_divisible(name, modules[name].out_features, "output features", tp)
        _check_divisible(row, modules[row].in_features, "input features", tp)
    plan: dict = {}
    for cols, row in pairs + converted:
        plan.update({name: ColwiseParallel() for name in cols})
        plan[row] = RowwiseParallel()
    return plan


def _check_divisible(name: str, n: int, what: str, tp: int) -> None:
    if n % tp:
        raise TensorParallelError(f"tp={tp} does not divide the {n} {what} of layer {name!r}; "
                                  f"choose a tp that divides {n}")


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name

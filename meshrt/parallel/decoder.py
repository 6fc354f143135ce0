"""Pipeline stages of Hugging Face decoder-only language models (GPT-2 and Llama-style:
Llama, Mistral, Qwen2 and the others laid out as ``model.embed_tokens`` /
``model.layers`` / ``model.norm`` / ``lm_head``).

Their ``forward`` is not a chain of layers (GPT-2 adds position embeddings to token
embeddings, Llama hands every block rotary embeddings), so a stage cannot be a slice
of children as for ``nn.Sequential``. A stage here is the model itself with the blocks
of other stages and the embeddings or head it does not run removed; its parameters
keep their names (``transformer.h.5.attn.c_attn.weight``), so the stages' state dicts
together are the whole model's. Its forward runs what the model's own forward runs
for those parts, without caches or padding masks (training on full sequences).

We write these few lines per family rather than trace the model into a graph
(``torch.distributed.pipelining.pipeline``): tracing breaks with each transformers
release, and it copies tied weights into both stages without keeping them tied.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn


class PipelineLayoutError(ValueError):
    """The model cannot be cut into the requested stages."""


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    blocks: str  # the ModuleList of repeated blocks
    first: tuple[str, ...]  # modules only the first stage runs
    last: tuple[str, ...]  # modules only the last stage runs
    every: tuple[str, ...] = ()  # parameter-free modules every stage runs


GPT2 = Family("GPT-2", "transformer.h", ("transformer.wte", "transformer.wpe"), ("transformer.ln_f", "lm_head"))
LLAMA = Family("Llama", "model.layers", ("model.embed_tokens",), ("model.norm", "lm_head"), ("model.rotary_emb",))


def family_of(model: nn.Module) -> Family | None:
    if not hasattr(model, "config"):
        return None
    for family in (GPT2, LLAMA):
        if all(_has(model, p) for p in (family.blocks, *family.first, *family.last, *family.every)):
            return family
    return None


def decoder_stage(model: nn.Module, family: Family, unit_names: list[str], is_first: bool,
                  is_last: bool) -> DecoderStage:
    """``model`` cut down to the units named (consecutive blocks, plus the embeddings on
    the first stage and the final norm and head on the last)."""
    prefix = family.blocks + "."
    blocks = [int(n[len(prefix):]) for n in unit_names if n.startswith(prefix)]
    extra = [n for n in unit_names if not n.startswith(prefix)]
    allowed = (family.first if is_first else ()) + (family.last if is_last else ())
    stray = [n for n in extra if n not in allowed]
    if stray or not blocks:
        raise PipelineLayoutError(
            f"a {family.name} pipeline stage holds whole blocks, the first stage also the "
            f"embeddings and the last the final norm and head; this stage was given "
            f"{', '.join(unit_names)}; make the plan with this model_fn or use fewer stages (pp)")
    all_blocks = model.get_submodule(family.blocks)
    mine = nn.ModuleDict({str(i): all_blocks[i] for i in blocks})  # keeps the names h.5, ...
    parent, leaf = _split(family.blocks)
    setattr(model.get_submodule(parent), leaf, mine)
    for path in (() if is_first else family.first) + (() if is_last else family.last):
        parent, leaf = _split(path)
        delattr(model.get_submodule(parent), leaf)
    return DecoderStage(model, family, is_first, is_last)


class DecoderStage(nn.Module):
    """One stage: token ids (first stage) or hidden states in; hidden states or, on the
    last stage, logits out."""

    def __init__(self, model: nn.Module, family: Family, is_first: bool, is_last: bool) -> None:
        super().__init__()
        for name, child in model.named_children():
            self.add_module(name, child)
        self.config = model.config
        self.family = family
        self.is_first, self.is_last = is_first, is_last
        self.loss_function = model.loss_function if is_last else None
        impl = getattr(self.config, "_attn_implementation", None) or "eager"
        if impl not in ("sdpa", "eager"):
            raise PipelineLayoutError(
                f"pipeline stages of {family.name} run sdpa or eager attention, this model uses "
                f"{impl!r}; build it with attn_implementation='sdpa'")
        self.attn_impl = impl

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.family is GPT2:
            return self._gpt2(x)
        return self._llama(x)

    def _gpt2(self, x):
        t = self.transformer
        positions = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
        if self.is_first:
            x = t.drop(t.wte(x) + t.wpe(positions))
        mask = self._causal_mask(x)
        for block in t.h.values():
            x = _hidden(block(x, attention_mask=mask, position_ids=positions))
        if self.is_last:
            return self.lm_head(t.ln_f(x))
        return x

    def _llama(self, x):
        m = self.model
        positions = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
        if self.is_first:
            x = m.embed_tokens(x)
        rotary = m.rotary_emb(x, positions)
        mask = self._causal_mask(x)
        for block in m.layers.values():
            x = _hidden(block(x, attention_mask=mask, position_ids=positions, position_embeddings=rotary))
        if self.is_last:
            return self.lm_head(m.norm(x))
        return x

    def _causal_mask(self, x: torch.Tensor) -> torch.Tensor | None:
        # sdpa attends causally when given no mask, as the whole model's forward does
        if self.attn_impl == "sdpa":
            return None
        n = x.shape[1]
        mask = torch.full((n, n), torch.finfo(x.dtype).min, device=x.device, dtype=x.dtype).triu(1)
        return mask[None, None]

    def output(self, logits: torch.Tensor, batch):
        """What the whole model returns: ``loss`` (when the batch has labels) and ``logits``,
        so the user's ``loss_fn(out, batch)`` reads the same on every strategy."""
        from transformers.modeling_outputs import CausalLMOutput

        labels = batch.get("labels") if isinstance(batch, dict) else None
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size)
        return CausalLMOutput(loss=loss, logits=logits)


def check_batch(batch) -> torch.Tensor:
    """The first stage's input: the token ids of a dict batch; refuses what a stage
    cannot honour (padding masks, other model inputs)."""
    if not isinstance(batch, dict) or "input_ids" not in batch:
        raise PipelineLayoutError("a language model's pipeline takes dict batches with 'input_ids' "
                                  "(and 'labels' for the loss)")
    mask = batch.get("attention_mask")
    if mask is not None and not bool((mask == 1).all()):
        raise PipelineLayoutError("pipeline stages train on full sequences: this batch's attention_mask "
                                  "pads some of them; pack the sequences, or use dp/fsdp/tp")
    other = sorted(set(batch) - {"input_ids", "labels", "attention_mask"})
    if other:
        raise PipelineLayoutError(f"pipeline stages take input_ids and labels; this batch also has "
                                  f"{', '.join(other)}; drop them or use dp/fsdp/tp")
    return batch["input_ids"]


def _hidden(out):
    # blocks return the hidden states (transformers 5) or a tuple starting with them (4.x)
    return out[0] if isinstance(out, tuple) else out


def _has(model: nn.Module, path: str) -> bool:
    try:
        model.get_submodule(path)
    except AttributeError:
        return False
    return True


def _split(path: str) -> tuple[str, str]:
    parent, _, leaf = path.rpartition(".")
    return parent, leaf

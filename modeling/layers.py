"""Pieces shared by both nanoformer models.

Kept free of model-specific imports so that `save_pretrained` can copy it next to either
model file (remote code imports it as `from .layers import ...`).
"""

import functools
import inspect

import torch
from torch import nn
from transformers.generation.logits_process import LogitsProcessorList


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference attention: softmax(QKᵀ·scaling + mask)·V, returning (B, T, heads, D) and the weights.

    `attention_mask` is the additive float mask built by `transformers.masking_utils` for eager
    attention (0 where allowed, a very negative number where blocked).
    """
    attn_weights = torch.matmul(query, key.transpose(-1, -2)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(value.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value).transpose(1, 2).contiguous()
    return attn_output, attn_weights


class LogitsProcessorsWithKnownSignatures(LogitsProcessorList):
    """transformers' `LogitsProcessorList`, reading each processor class's `__call__` signature once.

    The parent runs `inspect.signature` on every processor at every decoding step (~15 µs each, more than top-k and
    softmax cost a small model's sampling step together). The calling rule is the parent's: processors whose
    `__call__` declares more than `(input_ids, scores)` get the extra keyword arguments, which must all be given.
    """

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
        for processor in self:
            extra = _extra_parameters(type(processor))
            if extra is None:  # no class-level signature to cache (e.g. a builtin): the parent's per-call lookup
                extra = tuple(inspect.signature(processor.__call__).parameters)[2:]
            if extra:
                if not all(name in kwargs for name in extra):
                    raise ValueError(
                        f"Make sure that all the required parameters: {['input_ids', 'scores', *extra]} for "
                        f"{processor.__class__} are passed to the logits processor."
                    )
                scores = processor(input_ids, scores, **kwargs)
            else:
                scores = processor(input_ids, scores)
        return scores


@functools.cache
def _extra_parameters(processor_class: type) -> tuple[str, ...] | None:
    """Names after `(self, input_ids, scores)` in `processor_class.__call__`, or None if it has no Python signature."""
    try:
        return tuple(inspect.signature(processor_class.__call__).parameters)[3:]
    except (TypeError, ValueError):
        return None


class KnownSignaturesGenerationMixin:
    """Put before `GenerationMixin`: `generate()` applies its logits processors through
    [`LogitsProcessorsWithKnownSignatures`] (same processors, same order, no per-step signature lookups)."""

    def _get_logits_processor(self, *args, **kwargs) -> LogitsProcessorList:
        return LogitsProcessorsWithKnownSignatures(super()._get_logits_processor(*args, **kwargs))

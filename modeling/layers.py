"""Pieces shared by both nanoformer models.

Kept free of model-specific imports so that `save_pretrained` can copy it next to either
model file (remote code imports it as `from .layers import ...`).
"""

import torch
from torch import nn


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

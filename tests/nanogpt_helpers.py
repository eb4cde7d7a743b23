"""Tiny NanoGPT models shared by the tests/test_nanogpt_*.py files."""

import torch
from nanoformer.modeling import NanoGPTConfig, NanoGPTForCausalLM

VARIANTS = {
    "gpt2": {},  # LayerNorm + GELU MLP + learned positions (the defaults)
    "llama": {"norm_type": "rmsnorm", "mlp_type": "swiglu", "position_embedding_type": "rope"},
}
VOCAB = 61
BLOCK = 16


def tiny_config(variant: str, **overrides) -> NanoGPTConfig:
    fields = {"vocab_size": VOCAB, "block_size": BLOCK, "n_layer": 2, "n_head": 2, "n_embd": 32}
    fields.update(VARIANTS[variant])
    fields.update(overrides)
    return NanoGPTConfig(**fields)


def sharp_model(variant: str, seed: int = 0, **overrides) -> NanoGPTForCausalLM:
    """A random model whose weights are large enough (std 0.3 instead of 0.02) that earlier tokens really move
    the next-token logits, so that cache / padding / crop bugs change the generated tokens."""
    torch.manual_seed(seed)
    overrides.setdefault("initializer_range", 0.3)
    return NanoGPTForCausalLM(tiny_config(variant, **overrides)).eval()


def prompts(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, VOCAB, (batch, length), generator=generator)

"""NanoGPT learns, matches GPT-2 and LLaMA from transformers, and trains with the usual HF conventions."""

import math

import pytest
import torch
from nanoformer.modeling import NanoGPTConfig, NanoGPTForCausalLM
from nanogpt_helpers import VARIANTS, prompts, tiny_config
from torch.nn import functional as F
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_two_layer_model_overfits_a_repeated_sequence(variant):
    torch.manual_seed(0)
    model = NanoGPTForCausalLM(tiny_config(variant, n_embd=64, n_head=4, block_size=48))
    pattern = torch.randperm(60)[:16] + 1  # 16 distinct tokens: each one determines the next
    batch = pattern.repeat(3).unsqueeze(0).repeat(4, 1)  # (4, 48)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    losses = []
    for _ in range(150):
        loss = model(batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if losses[-1] < 0.1:
            break
    assert losses[0] > 3.0 and min(losses) < 0.1, (losses[0], min(losses))
    model.eval()
    continuation = model.generate(batch[:1, :20], max_new_tokens=20, do_sample=False)
    assert torch.equal(continuation[0], batch[0, :40])


def test_loss_shifts_labels_and_ignores_minus_100():
    torch.manual_seed(0)
    model = NanoGPTForCausalLM(tiny_config("gpt2")).eval()
    x = prompts(2, 10)
    labels = x.clone()
    labels[0, :4] = -100
    out = model(x, labels=labels)
    # position t predicts token t+1; -100 targets do not count
    expected = F.cross_entropy(out.logits[:, :-1].reshape(-1, 61), labels[:, 1:].reshape(-1), ignore_index=-100)
    torch.testing.assert_close(out.loss, expected)


def test_gpt2_init_scales_residual_projections():
    torch.manual_seed(0)
    config = NanoGPTConfig(vocab_size=64, block_size=32, n_layer=8, n_head=4, n_embd=256)
    model = NanoGPTForCausalLM(config)
    block = model.transformer.h[0]
    assert abs(block.attn.c_attn.weight.std().item() - 0.02) < 0.002
    for projection in (block.attn.c_proj, block.mlp.c_proj):
        assert abs(projection.weight.std().item() - 0.02 / math.sqrt(2 * 8)) < 0.0007
    assert block.attn.c_attn.bias.abs().max() == 0 and torch.all(block.ln_1.weight == 1)
    assert model.lm_head.weight is model.transformer.wte.weight


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_activation_checkpointing_recomputes_and_gives_the_same_gradients(variant):
    torch.manual_seed(0)
    model = NanoGPTForCausalLM(tiny_config(variant)).train()
    x = prompts(2, 12)

    def gradients():
        model.zero_grad()
        model(x, labels=x).loss.backward()
        return {name: p.grad.clone() for name, p in model.named_parameters()}

    calls = []
    model.transformer.h[0].attn.register_forward_hook(lambda *args: calls.append(1))
    plain = gradients()
    assert len(calls) == 1
    model.activation_checkpointing_enable()
    checkpointed = gradients()
    assert len(calls) == 3  # forward + recomputation during backward
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], msg=name)


def test_same_logits_as_transformers_gpt2():
    """minGPT-style parity: copy a random GPT2LMHeadModel into our GPT-2-style model (GPT-2's Conv1D stores
    weights as (in, out), nn.Linear as (out, in))."""
    torch.manual_seed(0)
    gpt2_config = GPT2Config(
        vocab_size=61, n_positions=16, n_embd=32, n_layer=2, n_head=2, activation_function="gelu",
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    reference = GPT2LMHeadModel(gpt2_config).eval()
    ours = NanoGPTForCausalLM(tiny_config("gpt2")).eval()
    state = {}
    for name, tensor in reference.state_dict().items():
        is_conv1d = any(name.endswith(f"{layer}.weight") for layer in ("c_attn", "c_proj", "c_fc"))
        state[name] = tensor.t() if is_conv1d else tensor
    ours.load_state_dict(state)
    x = prompts(2, 16)
    mask = torch.ones_like(x)
    mask[0, :5] = 0  # a left-padded row
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        torch.testing.assert_close(ours(x).logits, reference(x).logits, atol=1e-5, rtol=1e-5)
        padded = {"attention_mask": mask, "position_ids": position_ids}
        real = mask.bool()
        torch.testing.assert_close(
            ours(x, **padded).logits[real], reference(x, **padded).logits[real], atol=1e-5, rtol=1e-5
        )


def test_same_logits_as_transformers_llama():
    """The LLaMA-style variant (RMSNorm + SwiGLU + RoPE, no biases) against LlamaForCausalLM: our fused c_attn is
    [q; k; v] and our fused c_fc is [gate; up]. Past block_size, plain RoPE attends through a sliding window of
    block_size tokens, which makes it Mistral (same weights) rather than LLaMA."""
    torch.manual_seed(0)
    ours_config = tiny_config("llama", bias=False, intermediate_size=80)
    dims = dict(
        vocab_size=61, hidden_size=32, intermediate_size=80, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=16, rms_norm_eps=ours_config.layer_norm_epsilon,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=None,
    )  # fmt: skip
    reference = LlamaForCausalLM(LlamaConfig(**dims)).eval()
    ours = NanoGPTForCausalLM(ours_config).eval()
    ref = reference.state_dict()
    state = {
        "transformer.wte.weight": ref["model.embed_tokens.weight"],
        "transformer.ln_f.weight": ref["model.norm.weight"],
    }
    for i in range(2):
        r, o = f"model.layers.{i}.", f"transformer.h.{i}."
        attn = [ref[f"{r}self_attn.{p}_proj.weight"] for p in "qkv"]
        state[f"{o}attn.c_attn.weight"] = torch.cat(attn)
        state[f"{o}attn.c_proj.weight"] = ref[f"{r}self_attn.o_proj.weight"]
        state[f"{o}mlp.c_fc.weight"] = torch.cat([ref[f"{r}mlp.gate_proj.weight"], ref[f"{r}mlp.up_proj.weight"]])
        state[f"{o}mlp.c_proj.weight"] = ref[f"{r}mlp.down_proj.weight"]
        state[f"{o}ln_1.weight"] = ref[f"{r}input_layernorm.weight"]
        state[f"{o}ln_2.weight"] = ref[f"{r}post_attention_layernorm.weight"]
    ours.load_state_dict(state, strict=False)  # lm_head is tied to wte
    x = prompts(2, 24)  # longer than block_size: RoPE has no hard limit
    mistral = MistralForCausalLM(MistralConfig(**dims, sliding_window=16)).eval()
    mistral.load_state_dict(ref)
    with torch.no_grad():
        torch.testing.assert_close(ours(x[:, :16]).logits, reference(x[:, :16]).logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours(x).logits, mistral(x).logits, atol=1e-5, rtol=1e-5)
        assert (ours(x).logits - reference(x).logits).abs().max() > 1e-3  # the window changes the last 8 positions

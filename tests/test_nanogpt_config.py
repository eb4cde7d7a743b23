"""NanoGPTConfig: HF names, derived sizes, RoPE scaling, and clear errors for bad values and over-long inputs."""

import pytest
import torch
from nanoformer.modeling import NanoGPTConfig, NanoGPTForCausalLM
from nanogpt_helpers import BLOCK, prompts, sharp_model, tiny_config


def test_defaults_are_nanogpt_gpt2_124m():
    config = NanoGPTConfig()
    assert (config.vocab_size, config.block_size, config.n_layer, config.n_head, config.n_embd) == (
        50304,
        1024,
        12,
        12,
        768,
    )
    assert config.activation_function == "gelu" and config.tie_word_embeddings and config.initializer_range == 0.02
    assert (config.norm_type, config.mlp_type, config.position_embedding_type) == ("layernorm", "gelu", "learned")


def test_hf_attribute_names_map_to_nanogpt_fields():
    config = NanoGPTConfig(n_layer=3, n_head=4, n_embd=64, block_size=32)
    assert (config.num_hidden_layers, config.num_attention_heads, config.hidden_size) == (3, 4, 64)
    assert config.max_position_embeddings == 32
    config.num_hidden_layers = 5
    assert config.n_layer == 5


@pytest.mark.parametrize(("n_embd", "expected"), [(128, 384), (768, 2048), (4096, 10944)])
def test_swiglu_hidden_size_is_two_thirds_of_4d_rounded_to_64(n_embd, expected):
    config = NanoGPTConfig(n_embd=n_embd, n_head=4, mlp_type="swiglu")
    assert config.intermediate_size == expected
    assert NanoGPTConfig(n_embd=n_embd, n_head=4).intermediate_size == 4 * n_embd
    assert NanoGPTConfig(n_embd=n_embd, n_head=4, mlp_type="swiglu", intermediate_size=100).intermediate_size == 100


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"n_embd": 30, "n_head": 4}, ["n_embd", "n_head"]),
        ({"n_layer": 0}, ["n_layer"]),
        ({"vocab_size": 2.5}, ["vocab_size"]),
        ({"norm_type": "batchnorm"}, ["norm_type"]),
        ({"mlp_type": "relu"}, ["mlp_type"]),
        ({"position_embedding_type": "alibi"}, ["position_embedding_type"]),
        ({"activation_function": "swish_typo"}, ["activation_function"]),
        ({"dropout": 1.5}, ["dropout"]),
        ({"layer_norm_epsilon": 0.0}, ["layer_norm_epsilon"]),
        ({"position_embedding_type": "rope", "rope_parameters": {"rope_type": "yarn", "factor": 2.0}}, ["rope_type"]),
        ({"position_embedding_type": "rope", "rope_parameters": {"rope_type": "dynamic", "factor": 0.5}}, ["factor"]),
        ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}, ["position_embedding_type"]),
        ({"position_embedding_type": "rope", "n_embd": 30, "n_head": 10}, ["head size", "even"]),
        ({"rope_theta": 500.0, "rope_parameters": {"rope_type": "default", "rope_theta": 10.0}}, ["rope_theta"]),
    ],
)
def test_bad_config_raises_value_error_naming_the_field(fields, names):
    with pytest.raises(ValueError) as error:
        NanoGPTConfig(**fields)
    for name in names:
        assert name in str(error.value)


def test_too_long_input_with_learned_positions_raises():
    model = sharp_model("gpt2")
    with pytest.raises(ValueError, match="block_size"):
        model(prompts(1, BLOCK + 1))
    # the same limit holds for cached decoding
    out = model(prompts(1, BLOCK), use_cache=True)
    with pytest.raises(ValueError, match="block_size"):
        model(prompts(1, 1), cache=out.cache)
    with pytest.raises(ValueError, match="exactly one of `input_ids` or `inputs_embeds`"):
        model()


def test_rope_has_no_hard_length_limit():
    model = sharp_model("llama")
    with torch.no_grad():
        assert model(prompts(1, 3 * BLOCK)).logits.shape == (1, 3 * BLOCK, model.config.vocab_size)


def test_ntk_rope_scaling_changes_only_positions_beyond_block_size():
    plain = sharp_model("llama")
    scaled = NanoGPTForCausalLM(
        tiny_config("llama", initializer_range=0.3, rope_parameters={"rope_type": "dynamic", "factor": 4.0})
    ).eval()
    scaled.load_state_dict(plain.state_dict())
    inside, beyond = prompts(1, BLOCK), prompts(1, 3 * BLOCK)
    with torch.no_grad():
        torch.testing.assert_close(scaled(inside).logits, plain(inside).logits, atol=1e-5, rtol=1e-5)
        difference = (scaled(beyond).logits - plain(beyond).logits).abs()
    # with a longer sequence the base grows, so even early positions rotate differently
    assert difference[0, -BLOCK:].max() > 1e-2


def test_legacy_rope_scaling_keyword_is_accepted():
    config = NanoGPTConfig(position_embedding_type="rope", rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    assert config.rope_parameters["rope_type"] == "dynamic" and config.rope_parameters["factor"] == 2.0

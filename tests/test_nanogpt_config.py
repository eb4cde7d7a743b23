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
        ({"position_embedding_type": "rope", "rope_parameters": {"rope_type": "bogus", "factor": 2.0}}, ["rope_type"]),
        ({"position_embedding_type": "rope", "rope_parameters": {"rope_type": "dynamic", "factor": 0.5}}, ["factor"]),
        ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}, ["position_embedding_type"]),
        ({"position_embedding_type": "rope", "n_embd": 30, "n_head": 10}, ["head size", "even"]),
        ({"position_embedding_type": "rope", "rope_theta": 500.0,
          "rope_parameters": {"rope_type": "default", "rope_theta": 10.0}}, ["rope_theta"]),
        ({"position_embedding_type": "rope", "sliding_window": 0}, ["sliding_window"]),
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


# Every RoPE type of transformers either works (computed by transformers' own functions) or raises clearly.
SCALED_ROPE = {
    "linear": {"factor": 4.0},
    "dynamic": {"factor": 4.0},
    "yarn": {"factor": 4.0},
    "longrope": {"factor": 4.0, "short_factor": [1.0] * 8, "long_factor": [4.0] * 8},  # one per pair (head size 16)
    "llama3": {"factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
}


def test_every_transformers_rope_type_is_covered():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    # "proportional" (Gemma 4's partial rotation) needs partial_rotary_factor, which NanoGPT does not have.
    assert set(ROPE_INIT_FUNCTIONS) - set(SCALED_ROPE) <= {"proportional"}


@pytest.mark.parametrize("rope_type", sorted(SCALED_ROPE))
def test_rope_type_changes_the_output_and_matches_transformers_frequencies(rope_type):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = {"rope_type": rope_type, **SCALED_ROPE[rope_type]}
    plain = sharp_model("llama")
    scaled = NanoGPTForCausalLM(tiny_config("llama", initializer_range=0.3, rope_parameters=params)).eval()
    scaled.load_state_dict(plain.state_dict())
    x = prompts(1, 3 * BLOCK)
    with torch.no_grad():
        assert not torch.allclose(scaled(x).logits, plain(x).logits, atol=1e-4)
        # the rotary tables are transformers' reference frequencies for that config and length
        rotary = scaled.transformer.rotary_emb
        position_ids = torch.arange(3 * BLOCK)[None]
        cos, _ = rotary(torch.zeros(1), position_ids)
        inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](scaled.config, None, seq_len=3 * BLOCK)
        angles = position_ids[..., None].float() * inv_freq
        torch.testing.assert_close(cos, torch.cat((angles, angles), -1).cos() * scaling)


def test_rope_type_set_after_construction_is_used():
    """What transformers' common tests (and users) do: `config.rope_parameters = {...}`, then build a model."""
    config = tiny_config("llama")
    config.rope_parameters = {"rope_type": "linear", "factor": 4.0, "rope_theta": config.rope_theta}
    model = NanoGPTForCausalLM(config)
    assert model.transformer.rotary_emb.rope_type == "linear"
    config.rope_parameters = {"rope_type": "bogus", "rope_theta": config.rope_theta}
    with pytest.raises(ValueError, match="rope_type"):
        NanoGPTForCausalLM(config)


def test_learned_positions_carry_no_rope_parameters_and_refuse_scaling():
    config = tiny_config("gpt2")
    assert not hasattr(config, "rope_parameters") and "rope_parameters" not in config.to_dict()
    # configs saved before, with the default dictionary, still load
    assert not hasattr(NanoGPTConfig(rope_parameters={"rope_type": "default", "rope_theta": 1e4}), "rope_parameters")
    config.rope_parameters = {"rope_type": "linear", "factor": 2.0}  # set after construction: refused too
    with pytest.raises(ValueError, match="position_embedding_type"):
        NanoGPTForCausalLM(config)


@pytest.mark.parametrize("variant", ["gpt2", "llama"])
def test_sliding_window_is_settable_and_applied(variant, tmp_path):
    config = tiny_config(variant)
    assert config.sliding_window == (BLOCK if variant == "llama" else None)
    config.sliding_window = 4
    model = NanoGPTForCausalLM(config).eval()
    x = prompts(1, BLOCK)
    i = torch.arange(BLOCK)
    band = ((i[:, None] >= i[None]) & (i[:, None] - i[None] < 4)).float()
    band = torch.where(band.bool(), 0.0, torch.finfo(torch.float).min)[None, None]
    with torch.no_grad():
        torch.testing.assert_close(model(x).logits, model(x, attention_mask=band).logits)
    config.save_pretrained(tmp_path)
    assert NanoGPTConfig.from_pretrained(tmp_path).sliding_window == 4
    config.sliding_window = None  # no window, also for plain RoPE
    assert config.sliding_window is None

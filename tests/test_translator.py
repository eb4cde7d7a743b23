"""Behaviour of the translator model: cache, padding, loss, tying, save/load, errors, attention-logit monitor."""

import json

import pytest
import torch
from nanoformer.modeling import (
    TranslatorConfig,
    TranslatorForConditionalGeneration,
    TranslatorModel,
    shift_tokens_right,
)
from nanoformer.modeling.modeling_translator import sinusoidal_positions
from safetensors import safe_open
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

VOCAB, PAD, BOS, EOS = 40, 0, 2, 3


pytestmark = pytest.mark.usefixtures("one_torch_thread")

VARIANTS = {
    "post_ln": {},
    "pre_ln": {"norm_first": True},
    "qk_norm": {"qk_norm": True},
}


def tiny_config(**overrides) -> TranslatorConfig:
    settings = dict(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, dropout=0.0,
    )
    settings.update(overrides)
    return TranslatorConfig(**settings)


def contextful_model(seed: int = 0, attn_implementation: str = "sdpa", **overrides) -> TranslatorForConditionalGeneration:
    """A random model whose next-token logits clearly depend on the source and on the decoded prefix.

    Attention projections are scaled up (×2), so that agreeing outputs are evidence, not a coincidence of a model
    that ignores its context; the helper asserts that dependence.
    """
    torch.manual_seed(seed)
    # Xavier init (`init_std=None`): larger weights than the default N(0, 0.02), so context visibly moves logits.
    overrides.setdefault("init_std", None)
    model = TranslatorForConditionalGeneration(tiny_config(**overrides)).eval()
    model.set_attn_implementation(attn_implementation)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("qkv_proj.weight", "kv_proj.weight", "q_proj.weight")):
                param.mul_(2.0)
    src = torch.tensor([[5, 9, 14, 7, 22, 3]])
    dec = torch.tensor([[BOS, 11, 30, 8, 17]])
    logits = model(input_ids=src, decoder_input_ids=dec).logits[0, -1]
    other_src = model(input_ids=src.roll(1, dims=1), decoder_input_ids=dec).logits[0, -1]
    other_prefix = model(input_ids=src, decoder_input_ids=torch.tensor([[BOS, 12, 30, 8, 17]])).logits[0, -1]
    assert (logits - other_src).abs().max() > 0.05, "test model ignores its source"
    assert (logits - other_prefix).abs().max() > 0.02, "test model ignores its decoded prefix"
    return model


def sources() -> tuple[torch.Tensor, torch.Tensor]:
    """A right-padded batch: row 0 has 5 tokens + 3 pads, row 1 has 8 tokens."""
    input_ids = torch.tensor([[6, 17, 25, 9, EOS, PAD, PAD, PAD], [12, 7, 33, 21, 8, 30, 15, EOS]])
    return input_ids, input_ids.ne(PAD).long()


# ---------------------------------------------------------------- config


def test_config_defaults_are_transformer_base():
    config = TranslatorConfig()
    assert (config.d_model, config.encoder_layers, config.decoder_layers) == (512, 6, 6)
    assert (config.encoder_attention_heads, config.encoder_ffn_dim, config.dropout) == (8, 2048, 0.1)
    assert (config.pad_token_id, config.bos_token_id, config.eos_token_id, config.decoder_start_token_id) == (0, 2, 3, 2)
    assert config.norm_first is False and config.qk_norm is False and config.tie_word_embeddings is True
    assert config.activation_function == "relu" and config.scale_embedding and config.label_smoothing == 0.0
    assert config.is_encoder_decoder and config.num_hidden_layers == 6
    assert AutoConfig.for_model("translator", d_model=64, encoder_attention_heads=4, decoder_attention_heads=4).d_model == 64


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("encoder_attention_heads", 5),  # does not divide d_model=32
        ("decoder_attention_heads", 3),
        ("d_model", 0),
        ("encoder_layers", 0),
        ("decoder_ffn_dim", -1),
        ("dropout", 1.0),
        ("attention_dropout", -0.1),
        ("label_smoothing", 1.5),
        ("activation_function", "no_such_activation"),
        ("eos_token_id", VOCAB),
        ("pad_token_id", None),
        ("max_position_embeddings", 0),
        ("layer_norm_eps", 0.0),
        ("init_std", 0.0),
        ("init_std", "0.02"),
    ],
)
def test_bad_config_raises_value_error_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        tiny_config(**{field: value})


def test_default_init_is_normal_002_and_none_gives_the_paper_code_init():
    torch.manual_seed(0)
    config = tiny_config(d_model=64, encoder_attention_heads=4, decoder_attention_heads=4, vocab_size=2000)
    model = TranslatorForConditionalGeneration(config)
    layer = model.model.encoder.layers[0]
    for weight in (model.model.encoder.embed_tokens.weight, layer.self_attn.qkv_proj.weight, layer.ffn.fc1.weight):
        assert abs(weight.std().item() - 0.02) < 0.002
    assert layer.self_attn.qkv_proj.bias.abs().max() == 0 and layer.ffn_norm.weight.eq(1).all()

    torch.manual_seed(0)
    paper = TranslatorForConditionalGeneration(tiny_config(**{**config.to_dict(), "init_std": None}))
    embedding = paper.model.encoder.embed_tokens.weight
    assert abs(embedding.std().item() - 64**-0.5) < 0.005  # N(0, d^-0.5): unit variance after the √d scaling
    qkv, fc1 = paper.model.encoder.layers[0].self_attn.qkv_proj.weight, paper.model.encoder.layers[0].ffn.fc1.weight
    # Xavier-uniform: bound √(6 / (fan_in + fan_out)), per q/k/v block for the fused projection; both are 64 → 64.
    bound = (6 / (64 + 64)) ** 0.5
    for weight in (qkv, fc1):
        assert weight.abs().max() <= bound and weight.abs().max() > 0.95 * bound


def marian_twin(model: TranslatorForConditionalGeneration):
    """A `MarianMTModel` with the same architecture and weights as `model` (post-LN, ReLU, shared scaled embedding).

    Marian lays out its sinusoids as [sin | cos] while the paper (and we) interleave them, so Marian's fixed position
    table is overwritten with ours; every learned weight is copied (our fused projections split back).
    """
    from transformers import MarianConfig, MarianMTModel

    c = model.config
    config = MarianConfig(
        vocab_size=c.vocab_size, decoder_vocab_size=c.vocab_size, d_model=c.d_model, encoder_layers=c.encoder_layers,
        decoder_layers=c.decoder_layers, encoder_attention_heads=c.encoder_attention_heads,
        decoder_attention_heads=c.decoder_attention_heads, encoder_ffn_dim=c.encoder_ffn_dim,
        decoder_ffn_dim=c.decoder_ffn_dim, max_position_embeddings=c.max_position_embeddings, dropout=c.dropout,
        activation_function=c.activation_function, scale_embedding=True, share_encoder_decoder_embeddings=True,
        pad_token_id=c.pad_token_id, eos_token_id=c.eos_token_id, bos_token_id=c.bos_token_id,
        decoder_start_token_id=c.decoder_start_token_id, forced_eos_token_id=c.eos_token_id,
    )  # fmt: skip
    marian = MarianMTModel(config)
    d = c.d_model
    positions = sinusoidal_positions(torch.arange(c.max_position_embeddings), d)

    def attention(ours, theirs, cross: bool) -> None:
        if cross:
            theirs.q_proj.load_state_dict(ours.q_proj.state_dict())
            pairs = zip(("k_proj", "v_proj"), ours.kv_proj.weight.split(d), ours.kv_proj.bias.split(d), strict=True)
        else:
            pairs = zip(
                ("q_proj", "k_proj", "v_proj"), ours.qkv_proj.weight.split(d), ours.qkv_proj.bias.split(d), strict=True
            )
        for name, weight, bias in pairs:
            getattr(theirs, name).weight.copy_(weight)
            getattr(theirs, name).bias.copy_(bias)
        theirs.out_proj.load_state_dict(ours.out_proj.state_dict())

    with torch.no_grad():
        marian.model.shared.weight.copy_(model.model.encoder.embed_tokens.weight)
        for stack in ("encoder", "decoder"):
            getattr(marian.model, stack).embed_positions.weight.copy_(positions)
            for ours, theirs in zip(getattr(model.model, stack).layers, getattr(marian.model, stack).layers, strict=True):
                attention(ours.self_attn, theirs.self_attn, cross=False)
                theirs.self_attn_layer_norm.load_state_dict(ours.self_attn_norm.state_dict())
                if stack == "decoder":
                    attention(ours.cross_attn, theirs.encoder_attn, cross=True)
                    theirs.encoder_attn_layer_norm.load_state_dict(ours.cross_attn_norm.state_dict())
                theirs.fc1.load_state_dict(ours.ffn.fc1.state_dict())
                theirs.fc2.load_state_dict(ours.ffn.fc2.state_dict())
                theirs.final_layer_norm.load_state_dict(ours.ffn_norm.state_dict())
    return marian


def test_post_ln_model_matches_marian_with_copied_weights():
    """Parity in the spirit of minGPT's GPT-2 check: the same weights give MarianMTModel's logits, loss and
    gradients (forward and backward are faithful; any learning-speed difference can only come from the init)."""
    model = contextful_model()
    marian = marian_twin(model)
    input_ids, attention_mask = sources()
    labels = torch.tensor([[9, 14, 22, 31, EOS, -100], [17, 5, 8, 12, 30, EOS]])
    # Dropout is 0: training mode only exercises the training code paths.
    model.train()
    marian.train()
    ours = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    theirs = marian(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    torch.testing.assert_close(ours.logits, theirs.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.loss, theirs.loss)
    ours.loss.backward()
    theirs.loss.backward()
    torch.testing.assert_close(
        model.model.encoder.embed_tokens.weight.grad, marian.model.shared.weight.grad, rtol=1e-4, atol=1e-6
    )
    torch.testing.assert_close(
        model.model.decoder.layers[-1].ffn.fc1.weight.grad, marian.model.decoder.layers[-1].fc1.weight.grad,
        rtol=1e-4, atol=1e-6,
    )


# ---------------------------------------------------------------- generation: cache and padding


def _generate(model, input_ids, attention_mask, use_cache, num_beams):
    out = model.generate(
        input_ids=input_ids, attention_mask=attention_mask, use_cache=use_cache, num_beams=num_beams,
        length_penalty=0.6, min_new_tokens=10, max_new_tokens=10, return_dict_in_generate=True, output_scores=True,
    )
    # Per-step scores over the whole vocabulary (beam: running beam scores), not just the chosen tokens.
    return out.sequences, torch.stack(out.scores, dim=1)


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cached_generation_equals_uncached(variant, attn_implementation):
    model = contextful_model(attn_implementation=attn_implementation, **VARIANTS[variant])
    input_ids, attention_mask = sources()
    for num_beams in (1, 4):
        cached_ids, cached_scores = _generate(model, input_ids, attention_mask, True, num_beams)
        plain_ids, plain_scores = _generate(model, input_ids, attention_mask, False, num_beams)
        assert torch.equal(cached_ids, plain_ids), f"{variant} num_beams={num_beams}"
        torch.testing.assert_close(cached_scores, plain_scores, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_step_by_step_cached_logits_equal_full_forward(variant):
    """Teacher-forced: feeding an arbitrary target one token at a time through the cache gives the full-pass logits."""
    model = contextful_model(**VARIANTS[variant])
    input_ids, attention_mask = sources()
    dec = torch.tensor([[BOS, 7, 19, 4, 30, 11, 25], [BOS, 9, 9, 1, 38, 16, 5]])
    full = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec, use_cache=False).logits
    encoder_outputs = model.get_encoder()(input_ids, attention_mask)
    cache, steps = None, []
    for t in range(dec.shape[1]):
        out = model(attention_mask=attention_mask, encoder_outputs=encoder_outputs, decoder_input_ids=dec[:, t : t + 1],
                    cache=cache, use_cache=True)
        cache = out.cache
        steps.append(out.logits)
    assert cache.get_seq_length() == dec.shape[1]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_right_padded_source_decodes_like_unpadded(variant):
    model = contextful_model(**VARIANTS[variant])
    input_ids, attention_mask = sources()
    alone = input_ids[:1, :5]
    for num_beams in (1, 4):
        batch_ids, batch_scores = _generate(model, input_ids, attention_mask, True, num_beams)
        alone_ids, alone_scores = _generate(model, alone, None, True, num_beams)
        assert torch.equal(batch_ids[:1], alone_ids)
        torch.testing.assert_close(batch_scores[:num_beams], alone_scores, rtol=1e-4, atol=1e-4)
    # Same through a plain forward, and the mask is derived from pad ids when not given.
    dec = torch.tensor([[BOS, 7, 19, 4]]).expand(2, -1)
    padded = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec).logits[0]
    inferred = model(input_ids=input_ids, decoder_input_ids=dec).logits[0]
    unpadded = model(input_ids=alone, decoder_input_ids=dec[:1]).logits[0]
    torch.testing.assert_close(padded, unpadded, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(inferred, unpadded, rtol=1e-5, atol=1e-5)


def test_eager_and_sdpa_agree_with_padding():
    input_ids, attention_mask = sources()
    dec = torch.tensor([[BOS, 7, 19, 4], [BOS, 9, 9, 1]])
    logits = [
        contextful_model(attn_implementation=impl, norm_first=True)(
            input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec
        ).logits
        for impl in ("sdpa", "eager")
    ]
    torch.testing.assert_close(logits[0], logits[1], rtol=1e-5, atol=1e-5)


def test_cross_attention_keys_values_are_computed_once_per_generate():
    model = contextful_model()
    input_ids, attention_mask = sources()
    calls = []
    handle = model.model.decoder.layers[0].cross_attn.kv_proj.register_forward_hook(lambda *_: calls.append(1))
    try:
        for num_beams in (1, 4):
            for use_cache, expected in ((True, 1), (False, 6)):
                calls.clear()
                model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=num_beams,
                               use_cache=use_cache, min_new_tokens=6, max_new_tokens=6)
                assert len(calls) == expected, f"num_beams={num_beams} use_cache={use_cache}"
    finally:
        handle.remove()


def test_default_generation_follows_the_paper():
    model = contextful_model()
    config = model.generation_config
    assert (config.num_beams, config.length_penalty, config.early_stopping) == (4, 0.6, True)
    assert config.decoder_start_token_id == BOS and config.forced_eos_token_id == EOS
    assert config.max_length == model.config.max_position_embeddings and config.max_new_tokens is None
    input_ids, attention_mask = sources()
    # No length given: at most source length + 50 new tokens (here forced to the bound with min_new_tokens).
    out = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1, min_new_tokens=8 + 50)
    assert out.shape[1] == 1 + 8 + 50
    assert torch.all(out[:, -1] == EOS)  # a hypothesis cut by the bound is closed with </s>
    # Seq2SeqTrainer fills the model's generation config with library defaults in place (max_length=20 among
    # them) after its first prediction step; the source-relative bound must survive that.
    config.update(**config._get_default_generation_params(), defaults_only=True)
    out = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1, min_new_tokens=8 + 50)
    assert out.shape[1] == 1 + 8 + 50
    # Explicit lengths are honoured.
    assert model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=3).shape[1] <= 4
    assert model.generate(input_ids=input_ids, attention_mask=attention_mask, max_length=5).shape[1] <= 5
    # generate() with no arguments at all = beam 4 with lp 0.6 and the source-length bound.
    # (a source where this random model's beam result differs from greedy's)
    short = torch.tensor([[12, 7, 33, EOS]])
    default = model.generate(short)
    explicit = model.generate(short, num_beams=4, length_penalty=0.6, early_stopping=True, max_new_tokens=4 + 50)
    assert torch.equal(default, explicit)
    assert not torch.equal(default, model.generate(short, num_beams=1, max_new_tokens=4 + 50))


def test_length_rule_budget_is_source_plus_50_capped_to_the_position_table():
    from nanoformer.modeling import decoding_budget

    assert decoding_budget(8, 64) == 8 + 50
    assert decoding_budget(20, 64) == 63  # start token + 63 new tokens = the 64 positions
    assert decoding_budget(64, 64) == 63
    assert decoding_budget(1000, None) == 1050
    # generate() uses the same rule: a source near the table's end decodes to the end and stops there, no error.
    model = contextful_model()
    source = torch.randint(4, VOCAB, (1, 60), generator=torch.Generator().manual_seed(0))
    source[0, -1] = EOS
    out = model.generate(input_ids=source, num_beams=2, min_new_tokens=63)
    assert out.shape[1] == 64
    # A generation config whose max_length is past the table cannot lift the cap.
    model.generation_config.max_length = 1000
    assert model.generate(input_ids=source, num_beams=1, min_new_tokens=63).shape[1] == 64


# ---------------------------------------------------------------- loss


def test_loss_equals_hand_computed_cross_entropy():
    model = contextful_model()
    input_ids, attention_mask = sources()
    labels = torch.tensor([[7, 19, 4, EOS, -100, -100], [9, 9, 11, 12, 13, EOS]])
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)

    # Teacher forcing input is the labels shifted right behind <s>, with -100 turned into pad.
    dec = torch.tensor([[BOS, 7, 19, 4, EOS, PAD], [BOS, 9, 9, 11, 12, 13]])
    assert torch.equal(shift_tokens_right(labels, PAD, BOS), dec)
    assert torch.equal(model.prepare_decoder_input_ids_from_labels(labels), dec)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec).logits
    torch.testing.assert_close(out.logits, logits)

    log_probs = torch.log_softmax(logits.double(), dim=-1)
    terms = [-log_probs[b, t, labels[b, t]] for b in range(2) for t in range(6) if labels[b, t] != -100]
    torch.testing.assert_close(out.loss.double(), torch.stack(terms).mean(), rtol=1e-5, atol=1e-6)

    # Trainer path: sum over tokens / num_items_in_batch (exact token mean under gradient accumulation).
    summed = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, num_items_in_batch=20)
    torch.testing.assert_close(summed.loss.double(), torch.stack(terms).sum() / 20, rtol=1e-5, atol=1e-6)

    # label_smoothing=ε: (1-ε)·NLL + ε·mean over the vocabulary of -log p.
    model.config.label_smoothing = 0.1
    smoothed = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.double()
    keep = labels != -100
    uniform = -log_probs[keep].mean(dim=-1).mean()
    torch.testing.assert_close(smoothed, 0.9 * torch.stack(terms).mean() + 0.1 * uniform, rtol=1e-5, atol=1e-6)


def test_gradient_checkpointing_gives_the_same_gradients():
    input_ids, attention_mask = sources()
    labels = torch.tensor([[7, 19, 4, EOS], [9, 9, 11, EOS]])
    grads = []
    for checkpointing in (False, True):
        model = contextful_model(norm_first=True).train()
        if checkpointing:
            model.activation_checkpointing_enable()
        model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    torch.testing.assert_close(grads[0], grads[1])


# ---------------------------------------------------------------- tying, save / load


def test_one_embedding_shared_stored_once_and_save_load_is_exact(tmp_path):
    model = contextful_model(qk_norm=True)
    shared = model.model.encoder.embed_tokens.weight
    assert model.model.decoder.embed_tokens.weight is shared
    assert model.lm_head.weight is shared
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight

    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        vocab_tensors = [k for k in f.keys() if f.get_slice(k).get_shape()[0] == VOCAB]
    assert vocab_tensors == ["model.encoder.embed_tokens.weight"]
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_translator.TranslatorForConditionalGeneration"
    assert {"modeling_translator.py", "configuration_translator.py", "layers.py", "pipeline_translator.py"} <= {
        p.name for p in tmp_path.iterdir()
    }

    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is TranslatorForConditionalGeneration
    assert loaded.lm_head.weight is loaded.model.encoder.embed_tokens.weight
    assert loaded.model.decoder.embed_tokens.weight is loaded.model.encoder.embed_tokens.weight
    assert loaded.generation_config.num_beams == 4
    input_ids, attention_mask = sources()
    dec = torch.tensor([[BOS, 7, 19, 4], [BOS, 9, 9, 1]])
    expected = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec).logits
    got = loaded(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec).logits
    assert torch.equal(expected, got)
    assert torch.equal(model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=8),
                       loaded.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=8))

    # The bare encoder-decoder loads from the same checkpoint, tied as well.
    base = AutoModel.from_pretrained(tmp_path).eval()
    assert type(base) is TranslatorModel
    assert base.decoder.embed_tokens.weight is base.encoder.embed_tokens.weight
    hidden = base(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec).last_hidden_state
    torch.testing.assert_close(model.lm_head(hidden), expected)


def test_untied_embeddings_are_separate_and_both_saved(tmp_path):
    model = TranslatorForConditionalGeneration(tiny_config(tie_word_embeddings=False))
    assert model.lm_head.weight is not model.model.encoder.embed_tokens.weight
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        assert sum(f.get_slice(k).get_shape()[0] == VOCAB for k in f.keys()) == 3


# ---------------------------------------------------------------- bad inputs


def test_empty_or_too_long_source_raises_a_clear_error():
    model = contextful_model()
    dec = torch.tensor([[BOS]])
    with pytest.raises(ValueError, match="empty"):
        model(input_ids=torch.zeros(1, 0, dtype=torch.long), decoder_input_ids=dec)
    with pytest.raises(ValueError, match="empty"):
        model.generate(input_ids=torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="all padding"):
        model(input_ids=torch.tensor([[5, 6], [PAD, PAD]]), decoder_input_ids=dec.expand(2, 1))
    too_long = torch.full((1, 65), 5)
    with pytest.raises(ValueError, match="max_position_embeddings=64"):
        model(input_ids=too_long, decoder_input_ids=dec)
    with pytest.raises(ValueError, match="max_position_embeddings=64"):
        model.generate(input_ids=too_long)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(input_ids=too_long[:, :10], decoder_input_ids=torch.full((1, 65), 5))


# ---------------------------------------------------------------- attention-logit monitor


def _manual_max_logits(attn, hidden):
    """max |q·kᵀ|/√d per head of an encoder self-attention module, computed independently."""
    q, k, _ = attn.qkv_proj(hidden).split(attn.num_heads * attn.head_dim, dim=-1)
    q = q.view(*hidden.shape[:2], attn.num_heads, attn.head_dim).transpose(1, 2)
    k = k.view(*hidden.shape[:2], attn.num_heads, attn.head_dim).transpose(1, 2)
    if attn.config.qk_norm:
        q, k = attn.q_norm(q), attn.k_norm(k)
    return (q @ k.transpose(-1, -2)).abs().amax(dim=(0, 2, 3)) * attn.scaling


@pytest.mark.parametrize("variant", ["post_ln", "qk_norm"])
def test_attention_logit_monitor(variant):
    model = contextful_model(**VARIANTS[variant])
    input_ids, attention_mask = sources()
    dec = torch.tensor([[BOS, 7, 19, 4], [BOS, 9, 9, 1]])
    model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec)
    assert model.attention_logit_stats() == {}  # off by default: nothing recorded

    model.set_attention_logit_monitor(True)
    inputs_to_first = []
    first = model.model.encoder.layers[0].self_attn
    handle = first.register_forward_pre_hook(lambda _m, args: inputs_to_first.append(args[0]))
    model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec)
    handle.remove()
    stats = model.attention_logit_stats()
    expected_names = {f"model.encoder.layers.{i}.self_attn" for i in range(2)} | {
        f"model.decoder.layers.{i}.{kind}" for i in range(2) for kind in ("self_attn", "cross_attn")
    }
    assert set(stats) == expected_names
    for name, per_head in stats.items():
        assert per_head.shape == (4,) and torch.isfinite(per_head).all() and (per_head > 0).all(), name
    torch.testing.assert_close(stats["model.encoder.layers.0.self_attn"],
                               _manual_max_logits(first, inputs_to_first[0]).detach(), rtol=1e-5, atol=1e-5)
    if variant == "qk_norm":
        # |q| = |k| = √head_dim after RMSNorm (unit gain), so |q·k|/√d ≤ √head_dim.
        assert all((per_head <= 8**0.5 + 1e-4).all() for per_head in stats.values())
    assert model.attention_logit_stats() == {}  # reading resets
    model.set_attention_logit_monitor(False)
    model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec)
    assert model.attention_logit_stats() == {}


def test_set_attn_implementation_switches_kernels():
    """`set_attn_implementation` must really switch (transformers refuses models that hide the dispatch call)."""
    config = TranslatorConfig(
        vocab_size=100, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
    )  # fmt: skip
    model = TranslatorForConditionalGeneration(config).eval()
    assert model.config._attn_implementation == "sdpa"
    model.set_attn_implementation("eager")
    assert model.config._attn_implementation == "eager"


# ---------------------------------------------------------------- transformers output conventions (as MarianMT)

OUTPUT_FIELDS = ("encoder_hidden_states", "decoder_hidden_states", "encoder_attentions", "decoder_attentions",
                 "cross_attentions")


@pytest.mark.parametrize("how", ["kwarg", "config"])
def test_hidden_states_and_attentions_equal_marians(how):
    """`output_hidden_states` / `output_attentions` used to be refused (kwarg) or silently ignored (config)."""
    model = contextful_model(attn_implementation="eager")
    marian = marian_twin(model).eval()
    marian.set_attn_implementation("eager")
    src, mask = sources()
    dec = torch.tensor([[BOS, 11, 30, 8], [BOS, 5, 6, 7]])
    flags = {"output_hidden_states": True, "output_attentions": True}
    if how == "config":
        for name, value in flags.items():
            setattr(model.config, name, value)
        flags = {}
    with torch.no_grad():
        ours = model(input_ids=src, attention_mask=mask, decoder_input_ids=dec, **flags)
        theirs = marian(input_ids=src, attention_mask=mask, decoder_input_ids=dec, output_hidden_states=True,
                        output_attentions=True)
    for field in OUTPUT_FIELDS:
        assert len(getattr(ours, field)) == len(getattr(theirs, field)) > 0, field
        for a, b in zip(getattr(ours, field), getattr(theirs, field), strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert len(ours.encoder_hidden_states) == model.config.encoder_layers + 1  # embeddings, then each layer
    torch.testing.assert_close(ours.encoder_hidden_states[-1], ours.encoder_last_hidden_state)


def test_outputs_are_none_unless_asked_for():
    model = contextful_model()
    src, mask = sources()
    out = model(input_ids=src, attention_mask=mask, decoder_input_ids=src[:, :3])
    assert all(getattr(out, field) is None for field in OUTPUT_FIELDS)


@pytest.mark.parametrize("how", ["kwarg", "config"])
def test_return_dict_false_gives_tuples(how):
    model = contextful_model()
    src, mask = sources()
    dec = src[:, :3]
    expected = model(input_ids=src, attention_mask=mask, decoder_input_ids=dec, labels=dec)
    if how == "config":
        model.config.return_dict = False
    kwargs = {"return_dict": False} if how == "kwarg" else {}
    for m in (model, model.model):
        out = m(input_ids=src, attention_mask=mask, decoder_input_ids=dec, **kwargs)
        assert isinstance(out, tuple) and torch.is_tensor(out[0])
    loss, logits = model(input_ids=src, attention_mask=mask, decoder_input_ids=dec, labels=dec, **kwargs)[:2]
    torch.testing.assert_close(loss, expected.loss)
    torch.testing.assert_close(logits, expected.logits)


def test_inputs_embeds_equal_input_ids():
    model = contextful_model()
    src, mask = sources()
    dec = src[:, :3]
    embed = model.get_input_embeddings()
    with torch.no_grad():
        by_ids = model(input_ids=src, attention_mask=mask, decoder_input_ids=dec).logits
        by_embeds = model(inputs_embeds=embed(src), attention_mask=mask, decoder_inputs_embeds=embed(dec)).logits
    torch.testing.assert_close(by_ids, by_embeds)


def test_old_cache_name_past_key_values_warns_and_is_used():
    model = contextful_model()
    src, mask = sources()
    dec = torch.tensor([[BOS, 11, 30, 8], [BOS, 5, 6, 7]])
    with torch.no_grad():
        prefix = model(input_ids=src, attention_mask=mask, decoder_input_ids=dec[:, :3], use_cache=True)
        with pytest.warns(FutureWarning, match="`past_key_values` is deprecated"):
            step = model(encoder_outputs=(prefix.encoder_last_hidden_state,), attention_mask=mask,
                         decoder_input_ids=dec[:, 3:], past_key_values=prefix.cache, use_cache=True)
        assert step.cache.get_seq_length() == 4
        full = model(input_ids=src, attention_mask=mask, decoder_input_ids=dec).logits[:, -1]
        torch.testing.assert_close(step.logits[:, -1], full, atol=1e-5, rtol=1e-5)


def test_unknown_keyword_arguments_are_handled_as_marian_handles_them():
    """transformers' models take `**kwargs` (attention-kernel options) and ignore names no layer reads; the
    translator does the same, and gives the same logits, so nothing is silently different from an in-library model."""
    model = contextful_model()
    marian = marian_twin(model).eval()
    src, mask = sources()
    dec = src[:, :3]
    with torch.no_grad():
        ours = model(input_ids=src, attention_mask=mask, decoder_input_ids=dec, not_a_real_argument=1).logits
        theirs = marian(input_ids=src, attention_mask=mask, decoder_input_ids=dec, not_a_real_argument=1).logits
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours, model(input_ids=src, attention_mask=mask, decoder_input_ids=dec).logits)

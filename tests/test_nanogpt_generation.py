"""generate() with NanoGPT: KV cache, beams, left padding, past block_size, attention backends."""

import logging

import pytest
import torch
from nanogpt_helpers import BLOCK, VARIANTS, VOCAB, prompts, sharp_model
from transformers import LogitsProcessor, LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper

PAD = 0


@pytest.fixture(scope="module", params=list(VARIANTS))
def model(request):
    return sharp_model(request.param)


def greedy(model, input_ids, **kwargs):
    out = model.generate(
        input_ids,
        do_sample=False,
        output_scores=True,
        return_dict_in_generate=True,
        pad_token_id=PAD,
        **kwargs,
    )
    return out.sequences, torch.stack(out.scores, dim=1)


def test_context_matters(model):
    """Guard for the tests below: with these weights, the first token changes the last position's logits."""
    x = prompts(1, 8)
    y = x.clone()
    y[0, 0] = (x[0, 0] % 60) + 1
    with torch.no_grad():
        diff = (model(x).logits[0, -1] - model(y).logits[0, -1]).abs().max()
    assert diff > 0.1


def test_greedy_same_with_and_without_cache(model):
    x = prompts(2, 5)
    cached, cached_scores = greedy(model, x, max_new_tokens=10, use_cache=True)
    uncached, uncached_scores = greedy(model, x, max_new_tokens=10, use_cache=False)
    assert torch.equal(cached, uncached)
    torch.testing.assert_close(cached_scores, uncached_scores, atol=1e-4, rtol=1e-4)


def test_beam4_same_with_and_without_cache(model):
    x = prompts(2, 5)
    kwargs = {"max_new_tokens": 8, "num_beams": 4, "num_return_sequences": 4, "do_sample": False, "pad_token_id": PAD}
    cached = model.generate(x, use_cache=True, output_scores=True, return_dict_in_generate=True, **kwargs)
    uncached = model.generate(x, use_cache=False, output_scores=True, return_dict_in_generate=True, **kwargs)
    assert torch.equal(cached.sequences, uncached.sequences)
    torch.testing.assert_close(cached.sequences_scores, uncached.sequences_scores, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("num_beams", [1, 4])
def test_left_padded_row_generates_like_the_prompt_alone(model, num_beams):
    short, long = prompts(1, 4, seed=2), prompts(1, 7, seed=3)
    batch = torch.cat([torch.cat([torch.full((1, 3), PAD), short], dim=1), long])
    mask = (torch.arange(7) >= torch.tensor([[3], [0]])).long()
    kwargs = {"max_new_tokens": 8, "num_beams": num_beams, "do_sample": False, "pad_token_id": PAD}
    together = model.generate(batch, attention_mask=mask, **kwargs)
    alone_short = model.generate(short, **kwargs)
    alone_long = model.generate(long, **kwargs)
    assert torch.equal(together[0, 7:], alone_short[0, 4:])
    assert torch.equal(together[1, 7:], alone_long[0, 7:])


def nanogpt_reference_generate(model, idx, max_new_tokens, block_size):
    """nanoGPT's generate loop with argmax: crop to the last block_size tokens, full forward, no cache."""
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(idx[:, -block_size:], use_cache=False).logits[:, -1, :]
            idx = torch.cat([idx, logits.argmax(dim=-1, keepdim=True)], dim=1)
    return idx


@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_past_block_size(model, use_cache):
    x = prompts(2, 5)
    new = BLOCK + 50
    out = model.generate(x, max_new_tokens=new, do_sample=False, pad_token_id=PAD, use_cache=use_cache)
    assert out.shape == (2, 5 + new)
    if model.config.position_embedding_type == "learned":
        assert torch.equal(out, nanogpt_reference_generate(model, x, new, BLOCK))
    else:  # RoPE: a sliding window of block_size, in the cache and in a full forward alike (tests below)
        reference = model.generate(x, max_new_tokens=new, do_sample=False, pad_token_id=PAD, use_cache=not use_cache)
        assert torch.equal(out, reference)


def test_generation_past_block_size_logs_no_length_reminder(model, transformers_warnings):
    """Going past block_size is documented behaviour: transformers' "exceeded the model's predefined maximum length"
    reminder (MaxLengthCriteria vs max_position_embeddings = block_size) must not be printed."""
    from transformers.generation.stopping_criteria import MaxLengthCriteria

    # Control: the criterion itself still warns when asked to, and the fixture sees it.
    MaxLengthCriteria(max_length=10, max_position_embeddings=2)(torch.zeros(1, 5, dtype=torch.long), None)
    assert any("predefined maximum length" in m for m in transformers_warnings)
    transformers_warnings.clear()
    logging.Logger.warning_once.cache_clear()  # the control's reminder must not hide a later one
    for use_cache in (True, False):
        out = model.generate(prompts(1, 5), max_new_tokens=BLOCK + 8, do_sample=False, pad_token_id=PAD,
                             use_cache=use_cache)  # fmt: skip
        assert out.shape[1] == 5 + BLOCK + 8  # the length limit itself still applies
    assert not [m for m in transformers_warnings if "maximum length" in m], transformers_warnings


def test_learned_positions_past_block_size_with_left_padding():
    model = sharp_model("gpt2")
    short, long = prompts(1, 4, seed=2), prompts(1, 7, seed=3)
    batch = torch.cat([torch.cat([torch.full((1, 3), PAD), short], dim=1), long])
    mask = (torch.arange(7) >= torch.tensor([[3], [0]])).long()
    new = BLOCK + 10
    together = model.generate(batch, attention_mask=mask, max_new_tokens=new, do_sample=False, pad_token_id=PAD)
    assert torch.equal(together[0, 3:], nanogpt_reference_generate(model, short, new, BLOCK)[0])
    assert torch.equal(together[1], nanogpt_reference_generate(model, long, new, BLOCK)[0])


def test_eager_and_sdpa_agree(model):
    x = prompts(2, 9)
    mask = torch.ones_like(x)
    mask[0, :4] = 0
    eager = sharp_model("gpt2" if model.config.position_embedding_type == "learned" else "llama")
    eager.set_attn_implementation("eager")
    assert model.config._attn_implementation == "sdpa" and eager.config._attn_implementation == "eager"
    with torch.no_grad():
        torch.testing.assert_close(eager(x).logits, model(x).logits)
        real = mask.bool()  # padded positions attend to nothing; their outputs are meaningless in both
        torch.testing.assert_close(
            eager(x, attention_mask=mask).logits[real], model(x, attention_mask=mask).logits[real]
        )
        attentions = eager(x, output_attentions=True).attentions  # only eager can return the weights
    assert len(attentions) == eager.config.n_layer and attentions[0].shape == (2, 2, 9, 9)
    torch.testing.assert_close(attentions[0].sum(-1), torch.ones(2, 2, 9))
    assert attentions[0][0, 0].triu(1).abs().max() == 0  # causal
    kwargs = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": PAD}
    assert torch.equal(
        eager.generate(x, attention_mask=mask, **kwargs), model.generate(x, attention_mask=mask, **kwargs)
    )


def test_logits_to_keep_and_hidden_states(model):
    x = prompts(2, 9)
    with torch.no_grad():
        full = model(x, output_hidden_states=True)
        last = model(x, logits_to_keep=1)
    torch.testing.assert_close(last.logits, full.logits[:, -1:])
    assert len(full.hidden_states) == model.config.n_layer + 1


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_last_position_only_runs_the_last_block_for_one_row(model, attn_implementation):
    """logits_to_keep=1 (what generate() asks for) runs the last block's MLP on one row per sequence, and the
    logits match the full forward's with left padding, both attention backends and (RoPE) past the sliding window;
    recording hidden states or attentions keeps every row."""
    model.set_attn_implementation(attn_implementation)
    length = model.config.block_size if model.config.position_embedding_type == "learned" else 3 * BLOCK
    x = prompts(2, length)
    mask = torch.ones_like(x)
    mask[0, :5] = 0
    rows_seen = []
    hook = model.transformer.h[-1].mlp.register_forward_hook(lambda module, args, out: rows_seen.append(args[0].shape[1]))
    try:
        with torch.no_grad():
            full = model(x, attention_mask=mask)
            last = model(x, attention_mask=mask, logits_to_keep=1)
            recorded = model(x, attention_mask=mask, logits_to_keep=1, output_hidden_states=True,
                             output_attentions=attn_implementation == "eager")
    finally:
        hook.remove()
        model.set_attn_implementation("sdpa")
    assert rows_seen == [length, 1, length]
    torch.testing.assert_close(last.logits, full.logits[:, -1:])
    torch.testing.assert_close(recorded.logits, full.logits[:, -1:])
    assert all(h.shape == (2, length, model.config.n_embd) for h in recorded.hidden_states)
    if attn_implementation == "eager":
        assert recorded.attentions[-1].shape[-2:] == (length, length)


def test_generate_from_inputs_embeds(model):
    x = prompts(2, 6)
    kwargs = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": PAD}
    from_embeds = model.generate(inputs_embeds=model.get_input_embeddings()(x), **kwargs)
    assert torch.equal(from_embeds, model.generate(x, **kwargs)[:, 6:])  # only new tokens come back


def band_mask(length: int, width: int) -> torch.Tensor:
    """(1, 1, length, length) boolean mask: query i sees keys i-width+1..i, built by hand (not by transformers)."""
    rows, cols = torch.arange(length)[:, None], torch.arange(length)[None, :]
    return ((cols <= rows) & (cols > rows - width))[None, None]


def banded_reference_generate(model, idx, max_new_tokens, width):
    """Greedy loop without cache or generate(): full forward under an explicit band mask of `width`, argmax."""
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(idx, attention_mask=band_mask(idx.shape[1], width), use_cache=False).logits[:, -1, :]
            idx = torch.cat([idx, logits.argmax(dim=-1, keepdim=True)], dim=1)
    return idx


@pytest.fixture(scope="module")
def rope_model():
    return sharp_model("llama")


def test_rope_attends_through_a_window_of_block_size(rope_model):
    """A forward longer than block_size applies the band by itself; with one layer, the last position then sees
    exactly the last block_size tokens (RoPE is relative, so the absolute offset does not matter)."""
    x = prompts(2, 3 * BLOCK)
    with torch.no_grad():
        logits = rope_model(x).logits
        torch.testing.assert_close(logits, rope_model(x, attention_mask=band_mask(3 * BLOCK, BLOCK)).logits)
        full_causal = rope_model(x, attention_mask=band_mask(3 * BLOCK, 3 * BLOCK)).logits
        assert (logits - full_causal).abs().max() > 0.1  # the band really changes something
        one_layer = sharp_model("llama", n_layer=1)
        torch.testing.assert_close(
            one_layer(x).logits[:, -1], one_layer(x[:, -BLOCK:]).logits[:, -1], atol=1e-4, rtol=1e-4
        )


@pytest.mark.parametrize("use_cache", [True, False])
def test_rope_generation_past_block_size_matches_banded_reference(rope_model, use_cache):
    x = prompts(2, 5)
    new = BLOCK + 50
    out = rope_model.generate(x, max_new_tokens=new, do_sample=False, pad_token_id=PAD, use_cache=use_cache)
    assert torch.equal(out, banded_reference_generate(rope_model, x, new, BLOCK))
    # the window matters: attending to the whole history (the old behaviour) generates something else
    assert not torch.equal(out, banded_reference_generate(rope_model, x, new, 10 * BLOCK))


def test_rope_cache_holds_at_most_block_size_minus_one_tokens(rope_model):
    x = prompts(2, 5)
    kwargs = {"max_new_tokens": BLOCK + 20, "do_sample": False, "pad_token_id": PAD, "return_dict_in_generate": True}
    out = rope_model.generate(x, **kwargs)
    assert [layer.keys.shape[-2] for layer in out.cache.layers] == [BLOCK - 1] * rope_model.config.n_layer
    dynamic = sharp_model("llama", rope_parameters={"rope_type": "dynamic", "factor": 2.0})
    out = dynamic.generate(x, **kwargs)
    assert out.cache.layers[0].keys.shape[-2] == 5 + BLOCK + 20 - 1  # NTK scaling keeps the whole context


def test_rope_beam4_past_block_size_same_with_and_without_cache(rope_model):
    x = prompts(2, 5)
    kwargs = {"max_new_tokens": BLOCK + 10, "num_beams": 4, "num_return_sequences": 4, "do_sample": False}
    kwargs |= {"pad_token_id": PAD, "output_scores": True, "return_dict_in_generate": True}
    cached = rope_model.generate(x, use_cache=True, **kwargs)
    uncached = rope_model.generate(x, use_cache=False, **kwargs)
    assert torch.equal(cached.sequences, uncached.sequences)
    torch.testing.assert_close(cached.sequences_scores, uncached.sequences_scores, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("use_cache", [True, False])
def test_rope_left_padded_batch_past_block_size(rope_model, use_cache):
    short, long = prompts(1, 4, seed=2), prompts(1, 7, seed=3)
    batch = torch.cat([torch.cat([torch.full((1, 3), PAD), short], dim=1), long])
    mask = (torch.arange(7) >= torch.tensor([[3], [0]])).long()
    new = BLOCK + 20
    kwargs = {"max_new_tokens": new, "do_sample": False, "pad_token_id": PAD, "use_cache": use_cache}
    together = rope_model.generate(batch, attention_mask=mask, **kwargs)
    assert torch.equal(together[0, 3:], banded_reference_generate(rope_model, short, new, BLOCK)[0])
    assert torch.equal(together[1], banded_reference_generate(rope_model, long, new, BLOCK)[0])


@pytest.mark.parametrize("variant", ["gpt2", "llama"])
def test_old_cache_name_past_key_values_warns_and_is_used(variant):
    """transformers 4.x called the cache `past_key_values`; it used to vanish into **kwargs (no cache, no warning)."""
    model = sharp_model(variant)
    x = prompts(2, 6)
    with torch.no_grad():
        prefix = model(x[:, :5], use_cache=True)
        with pytest.warns(FutureWarning, match="`past_key_values` is deprecated"):
            old = model(x[:, 5:], past_key_values=prefix.cache)
        assert old.cache.get_seq_length() == 6
        torch.testing.assert_close(old.logits[:, -1], model(x).logits[:, -1], atol=1e-5, rtol=1e-5)
        with pytest.warns(FutureWarning, match="`past_key_values` is deprecated"):
            base = model.transformer(x[:, :5], past_key_values=model(x[:, :5], use_cache=True).cache)
        assert base.cache.get_seq_length() == 10


@pytest.mark.parametrize("how", ["kwarg", "config"])
def test_return_dict_false_gives_tuples(how):
    model = sharp_model("llama")
    x = prompts(2, 6)
    with torch.no_grad():
        expected = model(x, labels=x)
        if how == "config":
            model.config.return_dict = False
        kwargs = {"return_dict": False} if how == "kwarg" else {}
        for m in (model, model.transformer):
            out = m(x, **kwargs)
            assert isinstance(out, tuple) and torch.is_tensor(out[0])
        loss, logits = model(x, labels=x, **kwargs)[:2]
    torch.testing.assert_close(loss, expected.loss)
    torch.testing.assert_close(logits, expected.logits)


def test_hidden_states_and_attentions_are_returned():
    model = sharp_model("gpt2")
    model.set_attn_implementation("eager")
    x = prompts(2, 6)
    with torch.no_grad():
        out = model(x, output_hidden_states=True, output_attentions=True)
        model.config.output_hidden_states = True
        from_config = model(x)
    assert len(out.hidden_states) == model.config.n_layer + 1 and len(out.attentions) == model.config.n_layer
    assert out.attentions[0].shape == (2, model.config.n_head, 6, 6)
    assert len(from_config.hidden_states) == model.config.n_layer + 1


class BanToken(LogitsProcessor):
    """A user's processor: forbids one token."""

    def __init__(self, token: int):
        self.token = token

    def __call__(self, input_ids, scores):
        return scores.masked_fill(torch.arange(scores.shape[-1]) == self.token, -float("inf"))


class NeedsStep(LogitsProcessor):
    """A processor with an extra argument, which LogitsProcessorList passes as a keyword."""

    def __call__(self, input_ids, scores, step):
        return scores + step


def test_logits_processors_are_applied_as_transformers_does_with_signatures_read_once(monkeypatch):
    from nanoformer.modeling import layers

    scores = torch.randn(2, VOCAB, generator=torch.Generator().manual_seed(0))
    ids = prompts(2, 4)
    processors = [TemperatureLogitsWarper(0.7), TopKLogitsWarper(5), BanToken(3), NeedsStep()]
    ours, theirs = layers.LogitsProcessorsWithKnownSignatures(processors), LogitsProcessorList(processors)
    torch.testing.assert_close(ours(ids, scores, step=1.5), theirs(ids, scores, step=1.5))
    for processor_list in (ours, theirs):
        with pytest.raises(ValueError, match="required parameters"):
            processor_list(ids, scores)
    lookups = []
    real_signature = layers.inspect.signature
    monkeypatch.setattr(layers.inspect, "signature", lambda obj: lookups.append(obj) or real_signature(obj))
    ours(ids, scores, step=1.0)
    assert lookups == []  # every class was seen above: nothing is inspected again


def test_generate_applies_a_users_logits_processor(model):
    out = model.generate(prompts(2, 3), max_new_tokens=3 * BLOCK, do_sample=True, top_k=0, pad_token_id=PAD,
                         logits_processor=LogitsProcessorList([BanToken(5)]))  # fmt: skip
    assert out.shape == (2, 3 + 3 * BLOCK) and not (out[:, 3:] == 5).any()

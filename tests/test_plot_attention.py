"""plot_attention: the attention matrices (what the model attended to), merged byte pieces, the PNG, CJK glyphs,
one-line CLI errors.

Tiny random models saved next to the shared tokenizers (the EN–ZH BPE for a translator, the Shakespeare characters
for a NanoGPT); no training needed.
"""

import subprocess
import sys
import warnings

import pytest
import torch
from nanoformer.modeling import NanoGPTConfig, NanoGPTForCausalLM, TranslatorConfig, TranslatorForConditionalGeneration
from nanoformer.training import plot_attention as pa
from nanoformer.training.arguments import UsageError
from transformers import AutoModelForCausalLM, AutoTokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SOURCE = "Tom is reading a book."
TARGET = "汤姆在看书。"
RARE = "鬣"  # a character the shared 8000-token BPE has no token for: byte pieces


@pytest.fixture(scope="module")
def translator_dir(bpe_tokenizer_dir, tmp_path_factory):
    """A saved tiny translator (2 layers, 2 heads; Xavier init so attention is far from uniform), greedy by default
    so that its own translation can be checked against `generate(output_attentions=True)` step by step."""
    tokenizer = AutoTokenizer.from_pretrained(bpe_tokenizer_dir)
    torch.manual_seed(0)
    config = TranslatorConfig(
        vocab_size=len(tokenizer), d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, init_std=None,
    )  # fmt: skip
    model = TranslatorForConditionalGeneration(config)
    model.generation_config.update(num_beams=1, length_penalty=1.0, early_stopping=False)
    folder = tmp_path_factory.mktemp("plot_attention_translator")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def nanogpt_dir(char_tokenizer, tmp_path_factory):
    torch.manual_seed(0)
    config = NanoGPTConfig(vocab_size=len(char_tokenizer), block_size=16, n_layer=2, n_head=2, n_embd=32,
                           initializer_range=0.3)  # fmt: skip
    folder = tmp_path_factory.mktemp("plot_attention_nanogpt")
    NanoGPTForCausalLM(config).save_pretrained(folder)
    char_tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def translator(translator_dir):
    return pa.load_model(str(translator_dir))


def rows_sum_to_one(weights: torch.Tensor) -> None:
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


def test_load_model_uses_eager_attention(translator, nanogpt_dir):
    model, _ = translator
    assert model.config._attn_implementation == "eager" and not model.training
    lm, _ = pa.load_model(str(nanogpt_dir))
    assert isinstance(lm, NanoGPTForCausalLM) and lm.config._attn_implementation == "eager"


def test_cross_attention_rows_are_what_generate_attended_to(translator):
    """Own translation: rows = the translation's tokens (ending with </s>), columns = the source's; each row equals
    the cross-attention of the decoding step that output that token (generate with cached decoding)."""
    model, tokenizer = translator
    maps = pa.attention_maps(model, tokenizer, SOURCE)
    source = tokenizer(SOURCE)["input_ids"]
    inputs = torch.tensor([source])
    steps = model.generate(inputs, num_beams=1, output_attentions=True, return_dict_in_generate=True)
    sequence = steps.sequences[0].tolist()
    assert maps.kind == "cross" and maps.key_ids == source and maps.query_ids == sequence[1:]
    assert maps.weights.shape == (2, 2, len(sequence) - 1, len(source))
    assert maps.translation == tokenizer.decode(sequence, skip_special_tokens=True)
    rows_sum_to_one(maps.weights)
    for step, per_layer in enumerate(steps.cross_attentions):
        for layer, weights in enumerate(per_layer):
            torch.testing.assert_close(maps.weights[layer, :, step], weights[0, :, -1], atol=1e-5, rtol=1e-4)
    assert maps.weights.std() > 0.05  # not uniform: a wrong row or column order would show


def test_forced_target_and_the_other_kinds_match_output_attentions(translator):
    model, tokenizer = translator
    source = tokenizer(SOURCE)["input_ids"]
    labels = tokenizer(text_target=TARGET)["input_ids"]
    decoder_input = [model.config.decoder_start_token_id, *labels[:-1]]
    with torch.no_grad():
        out = model(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([decoder_input]),
                    output_attentions=True)  # fmt: skip
    expected = {
        "cross": (out.cross_attentions, labels, source),
        "self": (out.decoder_attentions, decoder_input, decoder_input),
        "encoder": (out.encoder_attentions, source, source),
    }
    for kind, (attentions, query_ids, key_ids) in expected.items():
        maps = pa.attention_maps(model, tokenizer, SOURCE, kind=kind, target=TARGET)
        assert (maps.query_ids, maps.key_ids, maps.translation) == (query_ids, key_ids, TARGET), kind
        assert maps.weights.shape == (2, 2, len(query_ids), len(key_ids)), kind
        torch.testing.assert_close(maps.weights, torch.stack([a[0] for a in attentions]))
        rows_sum_to_one(maps.weights)
    assert maps.query_labels[-1] == "</s>" and maps.key_labels[:2] == ["Tom", "is"]
    decoder_self = pa.attention_maps(model, tokenizer, SOURCE, kind="self", target=TARGET).weights
    allowed = torch.ones(decoder_self.shape[-2:]).tril().bool()
    assert decoder_self[..., ~allowed].abs().max() == 0 and decoder_self[..., allowed].min() > 0  # causal, no more


def test_byte_pieces_of_a_character_are_merged(translator):
    model, tokenizer = translator
    target = f"{RARE}狗在看书。"
    raw = pa.attention_maps(model, tokenizer, SOURCE, target=target)
    assert raw.query_labels[0] == raw.query_labels[1] == pa.REPLACEMENT, "the shared BPE now has a token for it"
    merged = pa.merge_pieces(raw, tokenizer)
    assert merged.query_labels[:3] == [RARE, "狗", "在"] and pa.REPLACEMENT not in "".join(merged.query_labels)
    assert merged.query_groups[0] == [0, 1] and merged.key_groups == [[i] for i in range(len(raw.key_ids))]
    assert merged.weights.shape == (2, 2, len(raw.query_ids) - 1, len(raw.key_ids))
    torch.testing.assert_close(merged.weights[:, :, 0], raw.weights[:, :, :2].mean(2))  # from it: the mean
    torch.testing.assert_close(merged.weights[:, :, 1:], raw.weights[:, :, 2:])
    rows_sum_to_one(merged.weights)
    # Attention *to* a character in pieces (the source side here) is the sum over its pieces.
    to_pieces = pa.merge_pieces(pa.attention_maps(model, tokenizer, f"{RARE} is here.", kind="encoder"), tokenizer)
    assert to_pieces.key_labels[0] == RARE and to_pieces.key_groups[0] == [0, 1]
    rows_sum_to_one(to_pieces.weights)


def test_causal_lm_self_attention(nanogpt_dir, capsys):
    model, tokenizer = pa.load_model(str(nanogpt_dir))
    text = "To be, or not"
    maps = pa.attention_maps(model, tokenizer, text)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert maps.kind == "causal" and maps.query_ids == maps.key_ids == ids and maps.translation is None
    assert maps.query_labels[:3] == ["T", "o", "␣"]
    reference = AutoModelForCausalLM.from_pretrained(nanogpt_dir, attn_implementation="eager").eval()
    with torch.no_grad():
        attentions = reference(torch.tensor([ids]), output_attentions=True).attentions
    torch.testing.assert_close(maps.weights, torch.stack([a[0] for a in attentions]))
    assert maps.weights.shape == (2, 2, len(ids), len(ids)) and maps.weights.triu(1).abs().max() == 0
    rows_sum_to_one(maps.weights)
    long = pa.attention_maps(model, tokenizer, "x" * 20)  # past block_size 16: the first 16 tokens
    assert long.weights.shape[-1] == 16 and "drawing the first 16" in capsys.readouterr().err
    with pytest.raises(UsageError, match="--kind cross needs a translator"):
        pa.attention_maps(model, tokenizer, text, kind="cross")


def test_panels_per_layer_head_and_bad_indices(translator):
    model, tokenizer = translator
    maps = pa.attention_maps(model, tokenizer, SOURCE, target=TARGET)
    panels = pa.select_panels(maps)
    assert [name for name, _ in panels] == ["layer 0, heads averaged", "layer 1, heads averaged"]
    torch.testing.assert_close(panels[1][1], maps.weights[1].mean(0))
    assert all(matrix.shape == (len(maps.query_ids), len(maps.key_ids)) for _, matrix in panels)
    ((name, matrix),) = pa.select_panels(maps, layer=-1, head=1)
    assert name == "layer 1, head 1" and torch.equal(matrix, maps.weights[1, 1])
    assert len(pa.select_panels(maps, head="all")) == 4 and len(pa.select_panels(maps, head=0)) == 2
    with pytest.raises(UsageError, match=r"--layer 2: the decoder has 2 layers"):
        pa.select_panels(maps, layer=2)
    with pytest.raises(UsageError, match=r"--head -3: the decoder has 2 heads"):
        pa.select_panels(maps, head=-3)


def read_png(path):
    import matplotlib.image

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return matplotlib.image.imread(path)


def test_chinese_labels_draw_with_a_cjk_font(translator, tmp_path):
    """A CJK font is found (the noto-cjk-sans-otc font of the dev extra at least), so matplotlib reports no missing glyph;
    the figure grows with the panels and tokens."""
    model, tokenizer = translator
    maps = pa.merge_pieces(pa.attention_maps(model, tokenizer, SOURCE, target=TARGET), tokenizer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        drawn = pa.plot(maps, tmp_path / "all.png")
        one = pa.plot(maps, tmp_path / "one.png", layer=0, head=1)
    assert drawn["font"] is not None and drawn["missing_glyph_warnings"] == 0
    assert not [w for w in caught if "missing from font" in str(w.message)]
    assert drawn["panels"] == ["layer 0, heads averaged", "layer 1, heads averaged"] and one["panels"] == [
        "layer 0, head 1"
    ]
    all_layers, single = read_png(tmp_path / "all.png"), read_png(tmp_path / "one.png")
    assert single.shape[0] > 300 and single.shape[1] > 300 and all_layers.shape[1] > 1.5 * single.shape[1]
    assert single.std() > 0.05  # an image, not a blank canvas
    # English labels, but the heading names the Chinese translation.
    encoder = pa.attention_maps(model, tokenizer, SOURCE, kind="encoder", target=TARGET)
    assert pa.plot(encoder, tmp_path / "encoder.png")["missing_glyph_warnings"] == 0
    # The same font from a file given with --font.
    assert pa.plot(maps, tmp_path / "font.png", font=drawn["font_source"])["font_source"] == drawn["font_source"]


def test_without_a_cjk_font_one_warning_line_and_the_png(translator, tmp_path, monkeypatch, capsys):
    model, tokenizer = translator
    maps = pa.attention_maps(model, tokenizer, SOURCE, target=TARGET)
    assert pa.find_font(["Tom", "</s>", "␣"]) == (None, "DejaVu Sans", set())  # Latin only: no CJK font needed
    monkeypatch.setattr(pa, "find_font", lambda labels, font=None: (None, "", {"汤", "姆"}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        drawn = pa.plot(maps, tmp_path / "boxes.png")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("plot_attention: warning: no font") and "noto-cjk-sans-otc" in err[0]
    assert drawn["missing_glyph_warnings"] > 0  # DejaVu really lacks them: the check above can fail
    assert not [w for w in caught if "missing from font" in str(w.message)]  # reported once, not once per glyph
    assert read_png(tmp_path / "boxes.png").shape[0] > 300


def test_cli_writes_the_png(translator_dir, nanogpt_dir, tmp_path):
    output = tmp_path / "attn.png"
    result = subprocess.run(
        [sys.executable, "-m", "nanoformer.training.plot_attention", "--model_dir", str(translator_dir), "--text",
         SOURCE, "--layer", "1", "--output", str(output)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "wrote" in result.stdout and "1 panel(s) of cross attention" in result.stdout
    assert "missing from font" not in result.stderr and "Traceback" not in result.stderr
    assert read_png(output).shape[1] > 300
    lm_output = tmp_path / "lm" / "attn.png"
    with pytest.raises(SystemExit) as exit_info:
        pa.main(["--model_dir", str(nanogpt_dir), "--text", "ROMEO:", "--head", "all", "--output", str(lm_output)])
    assert exit_info.value.code == 0
    assert read_png(lm_output).shape[0] > 300


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--model_dir", "{missing}"], "--model_dir {missing}: folder not found"),
        (["--text", "  "], "--text is empty"),
        (["--layer", "5"], "--layer 5: the decoder has 2 layers"),
        (["--head", "2"], "--head 2: the decoder has 2 heads"),
        (["--head", "x"], "argument --head: expected an integer or 'all'"),
        (["--kind", "encoder", "--head", "-9"], "--head -9: the encoder has 2 heads"),
        (["--output", "{file}/attn.png"], "is not a writable folder"),
        (["--font", "{file}"], "not a font file matplotlib can read"),
    ],
)
def test_cli_errors_are_one_line(extra, message, translator_dir, tmp_path, capsys):
    (tmp_path / "file").write_text("not a folder")
    fill = {"missing": str(tmp_path / "no-model"), "file": str(tmp_path / "file")}
    args = {"--model_dir": str(translator_dir), "--text": SOURCE, "--output": str(tmp_path / "a.png")}
    for flag, value in zip(extra[::2], extra[1::2]):
        args[flag] = value.format(**fill)
    with pytest.raises(SystemExit) as exit_info:
        pa.main([item for pair in args.items() for item in pair])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1, err
    assert err[0].startswith("plot_attention: error: ") and message.format(**fill) in err[0]
    assert not (tmp_path / "a.png").exists()

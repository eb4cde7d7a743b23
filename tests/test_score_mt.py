"""score_mt and the translator's length rule on text: long lines, defaults from the run, one-line errors.

A tiny random translator (default 512 positions) is saved next to the shared BPE tokenizer; no training needed.
"""

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
import torch
from nanoformer.modeling import TranslatorConfig, TranslatorForConditionalGeneration, encode_sources
from transformers import AutoTokenizer

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
SCORE_MT = [sys.executable, "-m", "nanoformer.training.score_mt"]
LONG_LINE = " ".join(f"word{i % 97}" for i in range(1500))  # ~3000 tokens: far past the 512 positions
MEDIUM_LINE = " ".join(["It is raining again today."] * 70)  # ~480 tokens: decoding past 512 crashed before
NORMAL = ["Tom is reading a book.", "Where is the station?", "I like tea."]
TOKENIZER_WARNING = "longer than the specified maximum sequence length"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model_dir(bpe_tokenizer_dir, tmp_path_factory):
    """A saved tiny translator (512 positions) with the tokenizer as train_mt saves it."""
    tokenizer = AutoTokenizer.from_pretrained(bpe_tokenizer_dir)
    torch.manual_seed(0)
    config = TranslatorConfig(
        vocab_size=len(tokenizer), d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
    )  # fmt: skip
    assert config.max_position_embeddings == 512
    folder = tmp_path_factory.mktemp("score_mt_model")
    TranslatorForConditionalGeneration(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def test_file(tmp_path_factory):
    pairs = [*NORMAL[:2], LONG_LINE, MEDIUM_LINE, NORMAL[2]]
    path = tmp_path_factory.mktemp("score_mt_data") / "test.jsonl"
    rows = [{"translation": {"en": en, "zh": "我喜欢茶。"}} for en in pairs]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    return path


def run(args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*SCORE_MT, *map(str, args)], env=ENV, capture_output=True, text=True, timeout=600, **kwargs)


def test_encode_sources_cuts_to_the_limit_keeping_eos_and_counts(bpe_tokenizer_dir, transformers_warnings):
    tokenizer = AutoTokenizer.from_pretrained(bpe_tokenizer_dir)  # fresh: its once-only warning not yet spent
    ids, cut = encode_sources(tokenizer, [NORMAL[0], LONG_LINE, MEDIUM_LINE], 512)
    assert cut == 1
    assert ids[0] == tokenizer(NORMAL[0])["input_ids"]
    assert len(ids[1]) == 512 and ids[1][-1] == tokenizer.eos_token_id
    assert ids[2] == tokenizer(MEDIUM_LINE)["input_ids"] and 400 < len(ids[2]) < 512
    assert not [m for m in transformers_warnings if TOKENIZER_WARNING in m], transformers_warnings


def test_translate_never_fails_on_a_long_line(model_dir):
    from nanoformer.training.mt_evaluation import translate

    model = TranslatorForConditionalGeneration.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    counters = Counter()
    out = translate(model, tokenizer, [NORMAL[0], MEDIUM_LINE, LONG_LINE], num_beams=1, batch_size=1,
                    counters=counters)  # fmt: skip
    assert len(out) == 3 and counters["truncated_sources"] == 1
    # --max_source_length below the table: cut there (and counted) instead.
    counters = Counter()
    translate(model, tokenizer, [NORMAL[0], MEDIUM_LINE], num_beams=1, max_source_length=100, max_target_length=5,
              counters=counters)  # fmt: skip
    assert counters["truncated_sources"] == 1


def test_a_3000_token_line_does_not_lose_the_run(model_dir, test_file, tmp_path):
    output = tmp_path / "scores.json"
    result = run(["--model_dir", model_dir, "--test_file", test_file, "--num_beams", 1, "--batch_size", 2,
                  "--output_file", output])  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    scores = json.loads(output.read_text(encoding="utf-8"))
    assert scores["num_samples"] == 5 and len(scores["hypotheses"]) == 5
    assert scores["truncated_sources"] == 1 and scores["max_source_length"] == 512
    assert "1 source line(s) longer than 512 tokens were truncated" in result.stderr
    assert TOKENIZER_WARNING not in result.stderr and "Traceback" not in result.stderr


def test_stdin_mode_translates_every_line_with_a_long_one(model_dir):
    lines = [NORMAL[0], LONG_LINE, "", MEDIUM_LINE, NORMAL[1]]
    result = run(["--model_dir", model_dir, "--num_beams", 1, "--batch_size", 2], input="\n".join(lines) + "\n")
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout.split("\n")
    assert len(out) == len(lines) + 1 and out[2] == "" and out[-1] == ""
    assert "1 source line(s) longer than 512 tokens were truncated" in result.stderr
    assert TOKENIZER_WARNING not in result.stderr and "Traceback" not in result.stderr


def test_zh_script_and_num_beams_default_to_the_runs(model_dir, test_file, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for f in model_dir.iterdir():
        (run_dir / f.name).write_bytes(f.read_bytes())
    (run_dir / "all_results.json").write_text(json.dumps({"zh_script": "simplified", "num_beams": 1}))
    output = tmp_path / "scores.json"
    common = ["--model_dir", run_dir, "--test_file", test_file, "--max_samples", 2, "--output_file", output]
    result = run(common)
    assert result.returncode == 0, result.stderr[-3000:]
    scores = json.loads(output.read_text(encoding="utf-8"))
    assert (scores["zh_script"], scores["num_beams"]) == ("simplified", 1)
    assert scores["defaults_from"] == {"zh_script": "run", "num_beams": "run"}
    # The command line wins.
    result = run([*common, "--zh_script", "as-is", "--num_beams", 2])
    assert result.returncode == 0, result.stderr[-3000:]
    scores = json.loads(output.read_text(encoding="utf-8"))
    assert (scores["zh_script"], scores["num_beams"]) == ("as-is", 2)
    assert scores["defaults_from"] == {"zh_script": "command line", "num_beams": "command line"}
    # An averaged folder reads the run it was made from (averaged_checkpoints.json's config_from).
    averaged = tmp_path / "averaged"
    averaged.mkdir()
    for f in model_dir.iterdir():
        (averaged / f.name).write_bytes(f.read_bytes())
    (averaged / "averaged_checkpoints.json").write_text(json.dumps({"config_from": str(run_dir)}))
    result = run(["--model_dir", averaged, "--test_file", test_file, "--max_samples", 2, "--output_file", output])
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(output.read_text(encoding="utf-8"))["zh_script"] == "simplified"
    # No run record: as-is, and the model's generation config (beam 4).
    result = run(["--model_dir", model_dir, "--test_file", test_file, "--max_samples", 2, "--output_file", output])
    assert result.returncode == 0, result.stderr[-3000:]
    scores = json.loads(output.read_text(encoding="utf-8"))
    assert (scores["zh_script"], scores["num_beams"]) == ("as-is", 4)


@pytest.mark.parametrize("name", ["out/missing", "missing-model", "/no/such/model", "no such:folder"])
def test_missing_model_dir_is_one_line(name, test_file, tmp_path):
    result = run(["--model_dir", name, "--test_file", test_file], cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"score_mt: error: --model_dir {name}"), result.stderr

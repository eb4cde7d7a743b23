"""The tokenizer CLI (`python -m nanoformer.tokenization`) and the corpus readers it shares with the trainers."""

import json
import logging
import os
import subprocess
import sys

import pytest
from nanoformer.tokenization.__main__ import main
from nanoformer.tokenization.corpus import (
    CorpusStats,
    read_hub_translation_pairs,
    read_text_lines,
    read_translation_pairs,
)
from transformers import AutoTokenizer


def _run_cli(*args, cwd):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "nanoformer.tokenization", *args], capture_output=True, text=True, cwd=cwd, env=env
    )


# --- CLI ------------------------------------------------------------------------------------------------------------


def test_cli_trains_a_tokenizer_that_loads_with_autotokenizer(shared_data, tmp_path):
    train_file = shared_data / "tatoeba-cmn-eng" / "train.jsonl"
    result = _run_cli(
        "train", "--train_file", str(train_file), "--vocab_size", "2000", "--output_dir", "tok", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "28979 rows, 0 skipped" in result.stderr
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert len(tokenizer) == 2000
    text = "我们今天去北京。 We went to Beijing today."
    assert tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True) == text


def test_cli_missing_file_fails_clearly(tmp_path):
    result = _run_cli("train", "--train_file", "no/such/file.jsonl", "--output_dir", "tok", cwd=tmp_path)
    assert result.returncode != 0
    assert "training file not found: no/such/file.jsonl" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "tok").exists()


def test_cli_counts_and_logs_malformed_rows(shared_data, tmp_path, caplog):
    lines = (shared_data / "tatoeba-cmn-eng" / "train.jsonl").read_text(encoding="utf-8").splitlines()[:4000]
    lines[10:10] = ["{not json", "", '{"translation": {"en": "only English"}}', "[1, 2]"]
    train_file = tmp_path / "bad.jsonl"
    train_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="nanoformer.tokenization"), pytest.raises(SystemExit):
        main(["train", "--train_file", str(train_file), "--vocab_size", "1000", "--output_dir", str(tmp_path / "tok")])
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("4000 rows, 4 skipped" in message for message in warnings), caplog.text
    assert len(AutoTokenizer.from_pretrained(tmp_path / "tok")) == 1000


def test_cli_too_small_corpus_fails_clearly(tmp_path, capsys):
    train_file = tmp_path / "tiny.txt"
    train_file.write_text("hello world\n你好\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--train_file", str(train_file), "--vocab_size", "1000", "--output_dir", str(tmp_path / "t")])
    error = [line for line in capsys.readouterr().err.splitlines() if "error" in line]  # tqdm also writes here
    assert exit_info.value.code == 2 and len(error) == 1
    assert "only supports" in error[0] and "lower vocab_size" in error[0]


def test_cli_hub_dataset_offline_suggests_train_file(tmp_path, capsys):
    # conftest sets HF_HUB_OFFLINE=1 before huggingface_hub is imported, so the Hub is unreachable here.
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--dataset_name", "wmt/wmt19", "--dataset_config_name", "zh-en", "--output_dir", str(tmp_path)])
    assert exit_info.value.code == 2 and "--train_file" in capsys.readouterr().err


def test_cli_char_builds_the_shakespeare_tokenizer(shared_data, tmp_path):
    text_file = shared_data / "tinyshakespeare" / "input.txt"
    with pytest.raises(SystemExit) as exit_info:
        main(["char", "--train_file", str(text_file), "--output_dir", str(tmp_path / "char")])
    assert exit_info.value.code == 0
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "char")
    assert len(tokenizer) == 67
    assert tokenizer.decode(tokenizer("First Citizen:\n\n  Speak.")["input_ids"]) == "First Citizen:\n\n  Speak."


# --- corpus readers -------------------------------------------------------------------------------------------------


def test_jsonl_reader_accepts_both_schemas_and_counts_bad_rows(tmp_path):
    path = tmp_path / "pairs.jsonl"
    rows = [
        json.dumps({"translation": {"en": "Hi.", "zh": "嗨。"}}, ensure_ascii=False),
        json.dumps({"en": "Flat row.", "zh": "平的。"}, ensure_ascii=False),
        "{broken",
        json.dumps({"translation": {"en": "No target."}}),
        json.dumps({"translation": {"en": 3, "zh": "数字"}}, ensure_ascii=False),
        "",
    ]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    stats = CorpusStats()
    assert list(read_translation_pairs(path, "en", "zh", stats=stats)) == [("Hi.", "嗨。"), ("Flat row.", "平的。")]
    assert stats.rows == 2 and stats.num_skipped == 4
    assert "2 rows, 4 skipped" in str(stats)
    # The direction is whatever the caller asks for.
    assert next(read_translation_pairs(path, "zh", "en")) == ("嗨。", "Hi.")


def test_tsv_and_csv_readers(tmp_path):
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text('zh\ten\n你好\t"Hello", she said\n只有一列\n', encoding="utf-8")
    stats = CorpusStats()
    assert list(read_translation_pairs(tsv, "en", "zh", stats=stats)) == [('"Hello", she said', "你好")]
    assert stats.skipped == {"rows with too few columns": 1}
    csv_file = tmp_path / "pairs.csv"
    csv_file.write_text('"Hello, world",你好，世界\n', encoding="utf-8")
    assert list(read_translation_pairs(csv_file)) == [("Hello, world", "你好，世界")]


def test_readers_fail_at_call_time(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        read_translation_pairs(tmp_path / "missing.jsonl")
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        read_text_lines(tmp_path / "missing.txt")
    (tmp_path / "pairs.parquet").write_bytes(b"")
    with pytest.raises(ValueError, match="unsupported file type"):
        read_translation_pairs(tmp_path / "pairs.parquet")
    with pytest.raises(ConnectionError, match="--train_file"):
        read_hub_translation_pairs("wmt/wmt19", "zh-en")


def test_text_reader_keeps_inner_whitespace(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("  indented\tline \n\nlast", encoding="utf-8")
    stats = CorpusStats()
    assert list(read_text_lines(path, stats=stats)) == ["  indented\tline ", "last"]
    assert stats.rows == 2 and stats.skipped == {"blank lines": 1}

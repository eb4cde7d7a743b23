"""`hub export` / `export_run` build the model card from the run folder a trainer wrote, and ship a clean tokenizer.

Two tiny real runs are shared by the module: `train_mt.py` (12 steps, checkpoints every 4, the final model the
average of the last 2, BLEU on 8 validation pairs) and `train_lm.py` (10 steps). The card must show what those
runs recorded (all_results.json, training_args.json, training_curves.png), never made-up or missing numbers.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import yaml
from nanoformer.hub import export_for_hub, export_run, read_run
from nanoformer.hub.__main__ import main as hub_main
from nanoformer.tokenization import LOAD_LEFTOVERS
from test_train_lm import launch as launch_lm
from test_train_mt import launch as launch_mt
from test_train_mt import run_args as mt_run_args
from transformers import AutoTokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXTS = ["The weather is nice today.", "I love you.", "我们明天去北京。", "Tom " * 80 + "is here."]


def read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def front_matter_and_body(folder: Path) -> tuple[dict, str]:
    text = (folder / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n")
    _, meta, body = text.split("---\n", 2)
    return yaml.safe_load(meta), body


def published(meta: dict) -> dict[str, dict]:
    [entry] = meta["model-index"]
    return {m["type"]: m for result in entry["results"] for m in result["metrics"]}


@pytest.fixture(scope="module")
def mt_run(shared_data, bpe_tokenizer_dir, tmp_path_factory) -> Path:
    """A finished 12-step train_mt.py run: checkpoints at 4, 8, 12; final model = average of steps 8 and 12."""
    lines = (shared_data / "tatoeba-cmn-eng" / "train.jsonl").read_text(encoding="utf-8").splitlines()[:2000]
    train = tmp_path_factory.mktemp("card_data") / "train.jsonl"
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path_factory.mktemp("card_mt_run")
    valid = shared_data / "tatoeba-cmn-eng" / "valid.jsonl"
    args = mt_run_args(bpe_tokenizer_dir, train, valid, out, max_train_steps=12, checkpointing_steps=4, eval_steps=12,
                       max_eval_samples=8, num_beams=1, warmup_steps=4, logging_steps=4)  # fmt: skip
    launch_mt([*args, "--average_last_checkpoints", "2"])
    return out


@pytest.fixture(scope="module")
def lm_run(shared_data, tmp_path_factory) -> Path:
    """A finished 10-step train_lm.py run on tiny Shakespeare."""
    out = tmp_path_factory.mktemp("card_lm_run")
    launch_lm(
        "--train_file", shared_data / "tinyshakespeare" / "input.txt", "--output_dir", out,
        "--config_overrides", "n_layer=1,n_head=2,n_embd=16", "--block_size", "16",
        "--per_device_train_batch_size", "4", "--max_train_steps", "10", "--warmup_steps", "2", "--eval_steps", "10",
        "--eval_iters", "2", "--logging_steps", "5", "--sample_max_new_tokens", "0",
    )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def mt_export(mt_run, tmp_path_factory) -> Path:
    return export_run(mt_run, tmp_path_factory.mktemp("card_exports") / "mt", repo_id="me/tiny-en-zh")


# ----------------------------------------------------------------------------------------- what the trainers record


def test_both_trainers_save_their_arguments(mt_run, lm_run):
    mt = read_json(mt_run / "training_args.json")
    assert mt["trainer"] == "train_mt"
    assert (mt["args"]["max_train_steps"], mt["args"]["max_tokens_per_batch"], mt["args"]["average_last_checkpoints"]) \
        == (12, 768, 2)  # fmt: skip
    assert mt["environment"]["num_processes"] == 1 and mt["environment"]["device"] == "cpu"
    lm = read_json(lm_run / "training_args.json")
    assert lm["trainer"] == "train_lm"
    assert (lm["args"]["block_size"], lm["args"]["per_device_train_batch_size"]) == (16, 4)
    assert lm["environment"]["torch"]
    run = read_run(mt_run)
    assert run.args_file == "training_args.json" and run.trainer == "train_mt"


def test_trainer_output_tokenizer_has_no_loading_leftovers(mt_run):
    """train_mt.py loaded its tokenizer with from_pretrained and tokenized with truncation: neither may stick."""
    config = read_json(mt_run / "tokenizer_config.json")
    assert not set(LOAD_LEFTOVERS) & set(config), config
    backend = read_json(mt_run / "tokenizer.json")
    assert backend["truncation"] is None and backend["padding"] is None
    assert config["model_max_length"] == read_json(mt_run / "config.json")["max_position_embeddings"]


# -------------------------------------------------------------------------------------------- the translator's card


def test_translator_card_is_built_from_the_run(mt_run, mt_export):
    results = read_json(mt_run / "all_results.json")
    meta, body = front_matter_and_body(mt_export)
    metrics = published(meta)
    assert metrics["bleu"]["value"] == results["eval_bleu"]
    assert metrics["bleu"]["args"] == {"signature": results["bleu_signature"]}
    assert results["bleu_signature"].startswith("nrefs:1|") and "tok:zh" in results["bleu_signature"]
    assert metrics["eval_loss"]["value"] == results["eval_loss"]
    assert metrics["perplexity"]["value"] == results["eval_ppl"]
    [entry] = meta["model-index"]
    assert entry["results"][0]["dataset"] == {"name": "tatoeba-cmn-eng/valid.jsonl (8 pairs)", "type": "tatoeba",
                                              "split": "validation"}  # fmt: skip
    assert entry["results"][0]["task"] == {"type": "translation", "name": "Translation"}

    assert f"sacreBLEU signature: `{results['bleu_signature']}`" in body
    assert "Not recorded for this export" not in body
    # The recipe, from training_args.json and all_results.json.
    assert "| Label smoothing | 0.1 |" in body
    assert "| Batches | ≤ 768 padded source + target tokens per batch × 1 accumulation × 1 process" in body
    assert "Noam (inverse square root), 4 warmup steps" in body
    assert "| Steps | 12 (max_train_steps) in " in body
    assert f"| Throughput | {results['train_tokens_per_second']:,.0f} target tokens/s" in body
    assert f"| Data read | {results['rows_read']:,} rows read, {results['skipped_rows']} skipped" in body
    assert results["final_model"] == "average" and results["final_model_steps"] == [8, 12]
    assert "| Final model | average of the 2 checkpoints at steps 8, 12" in body
    assert "| Hardware | 1 × " in body
    assert f"{read_json(mt_run / 'all_results.json')['num_parameters']:,} parameters" in body
    # Every argument, folded; `max_tokens_per_batch` holds the word "token" but is no secret.
    assert "<summary>All training arguments (`training_args.json`)</summary>" in body
    assert "| `max_tokens_per_batch` | 768 |" in body and "| `seed` | 42 |" in body
    assert "output_dir" not in body  # where the run was written is no part of the recipe
    # The run's curves, copied and shown.
    assert (mt_export / "figures" / "training_curves.png").read_bytes() == (mt_run / "training_curves.png").read_bytes()
    assert "![training curves](figures/training_curves.png)" in body


def test_metric_option_adds_and_overrides(mt_run, tmp_path):
    results = read_json(mt_run / "all_results.json")
    out = tmp_path / "hub"
    assert hub_main(["export", str(mt_run), str(out), "--metric", "bleu=30.5", "--metric", "chrf=41.25"]) == 0
    meta, body = front_matter_and_body(out)
    metrics = published(meta)
    assert metrics["bleu"]["value"] == 30.5  # replaced, not listed twice
    assert sum(m["type"] == "bleu" for r in meta["model-index"][0]["results"] for m in r["metrics"]) == 1
    assert metrics["bleu"]["args"] == {"signature": results["bleu_signature"]}
    assert metrics["chrf"]["value"] == 41.25  # added
    assert metrics["eval_loss"]["value"] == results["eval_loss"]  # kept from the run
    assert "| BLEU | 30.5 |" in body

    # The run's own spelling names the same metric; a new loss replaces the run's perplexity.
    from nanoformer.hub.export import load_for_export

    model, tokenizer = load_for_export(mt_run)
    folder = export_for_hub(model, tokenizer, tmp_path / "api", run_dir=mt_run,
                            metrics={"eval_bleu": 12.0, "eval_loss": 2.0})  # fmt: skip
    metrics = published(front_matter_and_body(folder)[0])
    assert metrics["bleu"]["value"] == 12.0 and "eval_bleu" not in metrics
    assert metrics["eval_loss"]["value"] == 2.0 and "perplexity" not in metrics


def test_exported_tokenizer_is_clean_and_encodes_identically(mt_run, mt_export, bpe_tokenizer_dir):
    config = read_json(mt_export / "tokenizer_config.json")
    assert not set(LOAD_LEFTOVERS) & set(config), config
    backend = read_json(mt_export / "tokenizer.json")
    assert backend["truncation"] is None and backend["padding"] is None
    original = AutoTokenizer.from_pretrained(bpe_tokenizer_dir)
    exported = AutoTokenizer.from_pretrained(mt_export)
    for kwargs in ({}, {"truncation": True, "max_length": 12}, {"padding": True}):
        assert exported(TEXTS, **kwargs).input_ids == original(TEXTS, **kwargs).input_ids, kwargs
    # The model's position table, not the fresh tokenizer's 1024.
    assert original.model_max_length == 1024
    assert exported.model_max_length == read_json(mt_export / "config.json")["max_position_embeddings"] == 512
    from tokenizers import Tokenizer

    # The raw tokenizers file no longer truncates at the length the trainer last used.
    assert Tokenizer.from_file(str(mt_export / "tokenizer.json")).encode(TEXTS[-1]).ids == \
        original(TEXTS[-1]).input_ids  # fmt: skip


def test_leftovers_of_a_loaded_and_called_tokenizer_are_removed(mt_run, bpe_tokenizer_dir, tmp_path):
    """The leftovers are real: a tokenizer loaded with from_pretrained, called with truncation, saved and loaded
    again carries all of them; the export drops them and still encodes the same."""
    tokenizer = AutoTokenizer.from_pretrained(bpe_tokenizer_dir)
    tokenizer(TEXTS, truncation=True, max_length=10, padding=True)
    tokenizer.save_pretrained(tmp_path / "dirty")
    dirty = AutoTokenizer.from_pretrained(tmp_path / "dirty")
    assert {"is_local", "local_files_only", "max_length", "stride"} <= set(dirty.init_kwargs)
    from nanoformer.hub.export import load_for_export

    model, _ = load_for_export(mt_run)
    folder = export_for_hub(model, dirty, tmp_path / "hub")
    assert not set(LOAD_LEFTOVERS) & set(read_json(folder / "tokenizer_config.json"))
    clean = AutoTokenizer.from_pretrained(folder)
    assert "max_length" not in clean.init_kwargs
    assert clean(TEXTS).input_ids == AutoTokenizer.from_pretrained(bpe_tokenizer_dir)(TEXTS).input_ids
    assert dirty.model_max_length == 1024  # the caller's tokenizer is left as it was


def test_reexport_messages_name_the_callers_flag(mt_run, mt_export, tmp_path, capsys):
    out = tmp_path / "hub"
    assert hub_main(["export", str(mt_run), str(out)]) == 0
    capsys.readouterr()
    assert hub_main(["export", str(mt_run), str(out)]) == 2
    err = capsys.readouterr().err
    assert "pass --overwrite to replace" in err and "overwrite=True" not in err
    assert len([line for line in err.splitlines() if "error:" in line]) == 1
    assert hub_main(["export", str(mt_run), str(out), "--overwrite"]) == 0
    with pytest.raises(FileExistsError, match="pass overwrite=True to replace"):
        export_run(mt_run, out)


# ------------------------------------------------------------------------------------------------- the LM's card


def test_lm_card_shows_the_runs_eval_loss(lm_run, tmp_path):
    results = read_json(lm_run / "all_results.json")
    folder = export_run(lm_run, tmp_path / "hub")
    meta, body = front_matter_and_body(folder)
    metrics = published(meta)
    assert metrics["eval_loss"]["value"] == results["eval_loss_full"]  # the whole validation split
    assert metrics["perplexity"]["value"] == pytest.approx(math.exp(results["eval_loss_full"]))
    assert meta["model-index"][0]["results"][0]["dataset"]["name"] == "tinyshakespeare/input.txt"
    assert "No evaluation results were recorded" not in body
    assert "| Batches | 4 windows × 16 tokens × 1 accumulation × 1 process = 64 tokens per update |" in body
    assert "| Model | 1 layer × 2 heads × 16, block 16" in body
    assert "| Steps | 10 in " in body
    assert "public domain" in body and "![training curves](figures/training_curves.png)" in body


# ----------------------------------------------------------------------------------------- an averaged folder


def test_averaged_folder_card_names_its_steps(mt_run, tmp_path):
    from nanoformer.training.average_checkpoints import main as average_main

    average = tmp_path / "avg"
    assert average_main(["--inputs", str(mt_run / "step_4"), str(mt_run / "step_8"), "--config_dir", str(mt_run),
                         "--output", str(average)]) == 0  # fmt: skip
    assert not set(LOAD_LEFTOVERS) & set(read_json(average / "tokenizer_config.json"))
    folder = export_run(average, tmp_path / "hub")
    meta, body = front_matter_and_body(folder)
    assert "element-wise average of 2 checkpoints (steps 4, 8)" in body
    # The run's scores belong to its own final model: not published for this average, unless given.
    assert "model-index" not in meta and "No evaluation results were recorded" in body
    assert "| Label smoothing | 0.1 |" in body and f"All training arguments (`{mt_run.name}/training_args.json`)" in body
    assert (folder / "figures" / "training_curves.png").is_file()
    shutil.rmtree(folder)
    folder = export_run(average, tmp_path / "hub", metrics={"bleu": 3.5}, sacrebleu_signature="nrefs:1|tok:zh")
    assert published(front_matter_and_body(folder)[0])["bleu"] == {
        "type": "bleu", "value": 3.5, "name": "BLEU", "args": {"signature": "nrefs:1|tok:zh"}}

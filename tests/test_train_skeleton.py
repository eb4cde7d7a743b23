"""What both trainers share, tried as a user would: the scripts run as subprocesses on tiny models.

Covers the translator's loss coming from the model (config.label_smoothing, exact token mean under gradient
accumulation), the one-line error policy, --output_dir protection, preemption by SIGTERM and the HF flag names.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
TRAIN_MT = str(REPO / "training" / "train_mt.py")
TRAIN_LM = str(REPO / "training" / "train_lm.py")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
TINY_MT = (
    "d_model=32,encoder_layers=1,decoder_layers=1,encoder_attention_heads=2,decoder_attention_heads=2,"
    "encoder_ffn_dim=64,decoder_ffn_dim=64"
)
TINY_LM = "n_layer=1,n_head=2,n_embd=16"


def run(script: str, *args, timeout: int = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, script, *map(str, args)]
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout)


def mt_args(shared_data, tokenizer_dir, output_dir, *extra, steps: int = 2) -> list:
    valid = shared_data / "tatoeba-cmn-eng" / "valid.jsonl"
    return [
        "--train_file", valid, "--validation_file", valid, "--tokenizer_name", tokenizer_dir,
        "--config_overrides", TINY_MT, "--max_source_length", 32, "--max_target_length", 32,
        "--max_tokens_per_batch", 256, "--shuffle_buffer_size", 200, "--warmup_steps", 2, "--max_train_steps", steps,
        "--eval_steps", 1000, "--checkpointing_steps", 1000, "--max_eval_samples", 4, "--num_beams", 1,
        "--logging_steps", 1, "--output_dir", output_dir, *extra,
    ]  # fmt: skip


def lm_args(shared_data, output_dir, *extra, steps: int = 4) -> list:
    return [
        "--train_file", shared_data / "tinyshakespeare" / "input.txt", "--output_dir", output_dir,
        "--config_overrides", TINY_LM, "--block_size", 16, "--per_device_train_batch_size", 4,
        "--max_train_steps", steps, "--eval_steps", 1000, "--eval_iters", 1, "--sample_max_new_tokens", 0,
        "--warmup_steps", 1, "--logging_steps", 1, *extra,
    ]  # fmt: skip


def one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    """The run failed with exit status 2, no traceback and one error line (the last; an error found after set-up
    may follow log lines), which mentions every needle."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    errors = [line for line in lines if ": error: " in line]
    assert len(errors) == 1 and errors[0] == lines[-1] and "Traceback" not in result.stderr, result.stderr[-3000:]
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def read_json(path: Path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


# --------------------------------------------------------------------------------------------------------------------
# The translator's loss comes from the model
# --------------------------------------------------------------------------------------------------------------------


BAD_UTF8 = b'{"translation": {"en": "Caf\xe9 au lait.", "zh": "\xe5\x92\x96"}}\n'  # Latin-1 é, a cut-off character


@pytest.fixture(scope="module")
def bad_utf8_pairs(shared_data, tmp_path_factory) -> Path:
    """Tatoeba valid with one line of invalid UTF-8 bytes in the middle."""
    lines = (shared_data / "tatoeba-cmn-eng" / "valid.jsonl").read_bytes().splitlines(keepends=True)
    path = tmp_path_factory.mktemp("utf8") / "pairs.jsonl"
    path.write_bytes(b"".join(lines[:500]) + BAD_UTF8 + b"".join(lines[500:]))
    return path


@pytest.fixture(scope="module")
def mt_run(shared_data, bpe_tokenizer_dir, bad_utf8_pairs, tmp_path_factory) -> Path:
    """Two steps of a tiny translator on pairs holding a line of invalid UTF-8 (training and validation)."""
    out = tmp_path_factory.mktemp("mt_run")
    args = mt_args(shared_data, bpe_tokenizer_dir, out)
    args[args.index("--train_file") + 1] = args[args.index("--validation_file") + 1] = bad_utf8_pairs
    args[args.index("--max_eval_samples") + 1] = 1000
    result = run(TRAIN_MT, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def test_label_smoothing_is_saved_in_the_config(mt_run, shared_data, bpe_tokenizer_dir, tmp_path):
    assert read_json(mt_run / "config.json")["label_smoothing"] == 0.1  # the paper's default, as trained

    result = run(TRAIN_MT, *mt_args(shared_data, bpe_tokenizer_dir, tmp_path / "flag", "--label_smoothing", "0.2"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert read_json(tmp_path / "flag" / "config.json")["label_smoothing"] == 0.2

    args = mt_args(shared_data, bpe_tokenizer_dir, tmp_path / "override")
    args[args.index("--config_overrides") + 1] = TINY_MT + ",label_smoothing=0.05"
    result = run(TRAIN_MT, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert read_json(tmp_path / "override" / "config.json")["label_smoothing"] == 0.05

    result = run(TRAIN_MT, *args[:-2], "--output_dir", tmp_path / "both", "--label_smoothing", "0.2")
    one_line_error(result, "--label_smoothing", "label_smoothing=")


def test_gradient_accumulation_gives_the_exact_token_mean(bpe_tokenizer):
    """Two micro-batches of different lengths accumulated == one loss averaged over all their target tokens."""
    import argparse

    from accelerate import Accelerator
    from nanoformer.modeling import TranslatorConfig, TranslatorForConditionalGeneration
    from nanoformer.training.data import pad_batch
    from nanoformer.training.train_mt import accumulate_gradients

    torch.manual_seed(0)
    config = TranslatorConfig(vocab_size=len(bpe_tokenizer), d_model=16, encoder_layers=1, decoder_layers=1,
                              encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                              decoder_ffn_dim=32, dropout=0.0, label_smoothing=0.1)  # fmt: skip
    model = TranslatorForConditionalGeneration(config)
    texts = [("Hi.", "嗨。"), ("Where is the station, please?", "请问车站在哪里？"), ("Thanks a lot!", "非常感谢！")]
    enc = bpe_tokenizer([s for s, _ in texts], text_target=[t for _, t in texts])
    pairs = list(zip(enc["input_ids"], enc["labels"]))
    batches = [pad_batch(pairs[:1], 0), pad_batch(pairs[1:], 0)]

    args = argparse.Namespace(gradient_accumulation_steps=2, label_smoothing=0.1)
    accelerator = Accelerator(gradient_accumulation_steps=2, cpu=True)
    prepared = accelerator.prepare(model)
    loss, tokens = accumulate_gradients(accelerator, prepared, batches, args)
    accumulated = {n: p.grad.clone() for n, p in model.named_parameters()}

    model.zero_grad()
    total = sum(int(b["labels"].ne(-100).sum()) for b in batches)
    reference = sum(model(**b, num_items_in_batch=total).loss for b in batches)  # sum of token losses / all tokens
    reference.backward()
    assert tokens == total and float(loss) == pytest.approx(float(reference.detach()), rel=1e-6)
    for name, param in model.named_parameters():
        assert torch.allclose(accumulated[name], param.grad, atol=1e-7), name


# --------------------------------------------------------------------------------------------------------------------
# Invalid UTF-8 is a malformed row in every reader
# --------------------------------------------------------------------------------------------------------------------


def test_invalid_utf8_rows_are_skipped_and_counted_by_the_trainer(mt_run):
    results = read_json(mt_run / "all_results.json")
    assert results["skipped_by_reason"] == {"lines that are not valid UTF-8": 1}
    assert results["skipped_rows"] == 1 and results["rows_read"] > 500  # the bad line is row 501


def test_invalid_utf8_rows_are_skipped_by_the_scorer(mt_run, bad_utf8_pairs, tmp_path):
    output = tmp_path / "scores.json"
    cmd = [sys.executable, "-m", "nanoformer.training.score_mt", "--model_dir", mt_run, "--test_file", bad_utf8_pairs,
           "--max_samples", 3, "--num_beams", 1, "--output_file", output]  # fmt: skip
    result = subprocess.run(list(map(str, cmd)), env=ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert read_json(output)["num_samples"] == 3
    cmd[cmd.index("--max_samples") + 1] = 2000
    result = subprocess.run(list(map(str, cmd)), env=ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert read_json(output)["num_samples"] == 1000 and read_json(output)["skipped_rows"] == 1


def test_invalid_utf8_lines_are_skipped_by_the_tokenizer_cli_and_the_lm_trainer(bad_utf8_pairs, shared_data, tmp_path):
    cli = [sys.executable, "-m", "nanoformer.tokenization"]
    result = subprocess.run([*cli, "train", "--train_file", str(bad_utf8_pairs), "--vocab_size", "600",
                             "--output_dir", str(tmp_path / "bpe")], env=ENV, capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "1000 rows, 1 skipped (1 lines that are not valid UTF-8)" in result.stderr

    text = tmp_path / "shakespeare_bad.txt"
    lines = (shared_data / "tinyshakespeare" / "input.txt").read_bytes().splitlines(keepends=True)[:2000]
    text.write_bytes(b"".join(lines[:1000]) + b"caf\xe9\n" + b"".join(lines[1000:]))
    result = subprocess.run([*cli, "char", "--train_file", str(text), "--output_dir", str(tmp_path / "char")],
                            env=ENV, capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0 and "skipped 1 lines that are not valid UTF-8" in result.stderr, result.stderr
    result = run(TRAIN_LM, *lm_args(shared_data, tmp_path / "lm", steps=2), "--train_file", text)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "skipped 1 lines that are not valid UTF-8" in result.stderr
    from transformers import AutoTokenizer

    assert "\ufffd" not in AutoTokenizer.from_pretrained(tmp_path / "lm").get_vocab()


# --------------------------------------------------------------------------------------------------------------------
# One error policy: one line naming the problem, exit status 2, no traceback, before any expensive work
# --------------------------------------------------------------------------------------------------------------------

MT_ERRORS = {
    "bad override value": (["--config_overrides", "d_model=abc"], ["d_model", "int"]),
    "unknown override": (["--config_overrides", "n_layers=2"], ["unknown key 'n_layers'"]),
    "bad JSON override": (["--config_overrides", "d_model=32,init_std={0.1"], ["init_std", "JSON"]),
    "config check": (["--config_overrides", "d_model=30,encoder_attention_heads=4"], ["d_model"]),
    "negative noam_scale": (["--noam_scale", "-1"], ["--noam_scale"]),
    "negative label_smoothing": (["--label_smoothing", "-0.1"], ["--label_smoothing"]),
    "negative max_grad_norm": (["--max_grad_norm", "-1"], ["--max_grad_norm"]),
    "negative weight_decay": (["--weight_decay", "-1"], ["--weight_decay"]),
    "not a number": (["--learning_rate", "fast"], ["--learning_rate", "'fast'"]),
    "noam without warmup": (["--warmup_steps", "0"], ["--warmup_steps"]),
    "missing tokenizer": (["--tokenizer_name", "/no/such/tokenizer"], ["--tokenizer_name", "not found"]),
    "missing model": (["--model_name_or_path", "./no/such/model"], ["--model_name_or_path", "not found"]),
    "missing resume path": (["--resume_from_checkpoint", "/no/such/step_5"], ["--resume_from_checkpoint"]),
    "missing validation file": (["--validation_file", "/no/valid.jsonl"], ["--validation_file", "not found"]),
    "unsupported train file": (["--train_file", REPO / "README.md"], ["--train_file", "unsupported file type"]),
    "unknown tracker": (["--with_tracking", "--report_to", "nonsense"], ["--report_to", "nonsense"]),
}


@pytest.mark.parametrize("case", MT_ERRORS, ids=list(MT_ERRORS))
def test_train_mt_user_errors_are_one_line(case, shared_data, tmp_path):
    extra, needles = MT_ERRORS[case]
    args = mt_args(shared_data, "tok", tmp_path / "out", "--vocab_size", 500)[2:]  # no --train_file yet
    args = ["--train_file", shared_data / "tatoeba-cmn-eng" / "valid.jsonl", *args]
    del args[args.index("--tokenizer_name") : args.index("--tokenizer_name") + 2]
    result = run(TRAIN_MT, *args, *extra)
    one_line_error(result, *needles)
    assert not (tmp_path / "out" / "tokenizer").exists()  # found before training a tokenizer


LM_ERRORS = {
    "bad override": (["--config_overrides", "n_layer=two"], ["n_layer"]),
    "dict override": (["--config_overrides", 'rope_parameters={"rope_type": 3'], ["rope_parameters", "JSON"]),
    "negative warmup": (["--warmup_steps", "-1"], ["--warmup_steps"]),
    "negative weight_decay": (["--weight_decay", "-1"], ["--weight_decay"]),
    "zero batch": (["--per_device_train_batch_size", "0"], ["--per_device_train_batch_size"]),
    "validation split": (["--validation_split_percentage", "100"], ["--validation_split_percentage"]),
    "missing file": (["--train_file", "/no/such.txt"], ["--train_file", "/no/such.txt"]),
    "output under a file": (["--output_dir", REPO / "README.md" / "out"], ["--output_dir", "is a file"]),
    "missing model": (["--model_name_or_path", "/no/such/model"], ["--model_name_or_path"]),
    "unknown tracker": (["--with_tracking", "--report_to", "wandb"], ["--report_to", "wandb"]),
}


@pytest.mark.parametrize("case", LM_ERRORS, ids=list(LM_ERRORS))
def test_train_lm_user_errors_are_one_line(case, shared_data, tmp_path):
    extra, needles = LM_ERRORS[case]
    result = run(TRAIN_LM, *lm_args(shared_data, tmp_path / "out"), *extra)
    one_line_error(result, *needles)
    assert not (tmp_path / "out" / "cache").exists()  # found before reading the text


@pytest.fixture(scope="module")
def lm_checkpoint(shared_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lm_ckpt")
    result = run(TRAIN_LM, *lm_args(shared_data, out, "--checkpointing_steps", 2, steps=2))
    assert result.returncode == 0, result.stderr[-3000:]
    return out / "step_2"


def test_checkpoints_of_another_model_are_one_line_errors(lm_checkpoint, mt_run, shared_data, bpe_tokenizer_dir, tmp_path):
    result = run(TRAIN_MT, *mt_args(shared_data, bpe_tokenizer_dir, tmp_path / "mt"), "--resume_from_checkpoint",
                 lm_checkpoint)  # fmt: skip
    one_line_error(result, "train_lm checkpoint", "train_mt")
    result = run(TRAIN_LM, *lm_args(shared_data, tmp_path / "lm"), "--resume_from_checkpoint", mt_run / "step_2")
    one_line_error(result, "train_mt checkpoint", "train_lm")
    wider = lm_args(shared_data, tmp_path / "wide")
    wider[wider.index("--config_overrides") + 1] = "n_layer=1,n_head=2,n_embd=32"
    result = run(TRAIN_LM, *wider, "--resume_from_checkpoint", lm_checkpoint)
    one_line_error(result, "--resume_from_checkpoint", "does not fit this model", "size mismatch")


def test_score_sample_hub_and_tokenizer_clis_use_the_same_policy(mt_run, lm_checkpoint, tmp_path):
    python = [sys.executable, "-m"]
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [
        ([*python, "nanoformer.training.score_mt", "--model_dir", "/no/such/model"], ["--model_dir", "not found"]),
        ([*python, "nanoformer.training.score_mt", "--model_dir", mt_run, "--num_beams", "0"], ["--num_beams"]),
        ([*python, "nanoformer.training.score_mt", "--model_dir", mt_run, "--test_file", "/no.jsonl"], ["--test_file"]),
        ([*python, "nanoformer.training.score_mt", "--model_dir", empty, "--test_file", REPO / "README.md"],
         ["unsupported file type"]),
        ([*python, "nanoformer.training.score_mt", "--model_dir", empty], ["cannot load"]),
        ([*python, "nanoformer.training.sample_lm", "--model_dir", lm_checkpoint.parent, "--top_p", "2"], ["--top_p"]),
        ([*python, "nanoformer.training.sample_lm", "--model_dir", "./nope", "--max_new_tokens", "5"], ["not found"]),
        ([*python, "nanoformer.training.sample_lm", "--model_dir", empty], ["cannot load"]),
        ([*python, "nanoformer.hub", "export", "/no/such/ckpt", tmp_path / "hub"], ["checkpoint", "not found"]),
        ([*python, "nanoformer.tokenization", "train", "--train_file", "x.jsonl", "--vocab_size", "-5",
          "--output_dir", tmp_path / "tok"], ["--vocab_size"]),
        ([*python, "nanoformer.tokenization", "char", "--train_file", "/no/such.txt", "--output_dir", tmp_path / "c"],
         ["not found"]),
    ]  # fmt: skip
    for cmd, needles in cases:
        result = subprocess.run(list(map(str, cmd)), env=ENV, capture_output=True, text=True, timeout=300)
        one_line_error(result, *needles)


# --------------------------------------------------------------------------------------------------------------------
# --model_name_or_path: continue from our own output folders and from Hub exports, in both trainers
# --------------------------------------------------------------------------------------------------------------------


def export_for_hub_cli(folder: Path, out: Path) -> Path:
    cmd = [sys.executable, "-m", "nanoformer.hub", "export", str(folder), str(out)]
    result = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "auto_map" in read_json(out / "config.json")  # remote code: loads without nanoformer too
    return out


def test_config_overrides_json_values_reach_the_saved_config(shared_data, tmp_path):
    args = lm_args(shared_data, tmp_path, steps=1)
    rope = 'rope_parameters={"rope_type": "dynamic", "factor": 2.0}'
    args[args.index("--config_overrides") + 1] = f"{TINY_LM},position_embedding_type=rope,{rope}"
    result = run(TRAIN_LM, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    config = read_json(tmp_path / "config.json")
    assert config["rope_parameters"]["rope_type"] == "dynamic" and config["rope_parameters"]["factor"] == 2.0


def test_train_lm_continues_from_its_output_and_from_a_hub_export(lm_checkpoint, shared_data, tmp_path):
    source = lm_checkpoint.parent
    for start in (source, export_for_hub_cli(source, tmp_path / "export")):
        out = tmp_path / f"from_{start.name}"
        args = lm_args(shared_data, out)
        del args[args.index("--config_overrides") : args.index("--config_overrides") + 2]
        del args[args.index("--block_size") : args.index("--block_size") + 2]  # the saved model's
        result = run(TRAIN_LM, *args, "--model_name_or_path", start, "--config_overrides", "dropout=0.1")
        assert result.returncode == 0, result.stderr[-3000:]
        config = read_json(out / "config.json")
        assert (config["n_embd"], config["block_size"], config["dropout"]) == (16, 16, 0.1)


def test_train_mt_continues_from_its_output_and_from_a_hub_export(mt_run, shared_data, tmp_path):
    for start in (mt_run, export_for_hub_cli(mt_run, tmp_path / "export")):
        out = tmp_path / f"from_{start.name}"
        args = mt_args(shared_data, start, out)  # the tokenizer of the saved folder
        del args[args.index("--config_overrides") : args.index("--config_overrides") + 2]
        result = run(TRAIN_MT, *args, "--model_name_or_path", start, "--label_smoothing", "0.2")
        assert result.returncode == 0, result.stderr[-3000:]
        config = read_json(out / "config.json")
        assert (config["d_model"], config["label_smoothing"]) == (32, 0.2)


# --------------------------------------------------------------------------------------------------------------------
# An --output_dir holding a run is protected
# --------------------------------------------------------------------------------------------------------------------


def test_output_dir_holding_a_run_is_refused_unless_overwritten_or_resumed(lm_checkpoint, shared_data, tmp_path):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(lm_checkpoint.parent, out)
    assert (out / "step_2" / "meta.json").is_file() and (out / "all_results.json").is_file()
    one_line_error(run(TRAIN_LM, *lm_args(shared_data, out)), "already holds a run", "--overwrite_output_dir")
    one_line_error(
        run(TRAIN_LM, *lm_args(shared_data, out), "--overwrite_output_dir", "--resume_from_checkpoint", "latest"),
        "contradict",
    )
    result = run(TRAIN_LM, *lm_args(shared_data, out, steps=3), "--resume_from_checkpoint", "latest")
    assert result.returncode == 0 and "Resumed from" in result.stderr, result.stderr[-3000:]
    assert read_json(out / "all_results.json")["step"] == 3

    (out / "notes.txt").write_text("mine")
    result = run(TRAIN_LM, *lm_args(shared_data, out, steps=1), "--overwrite_output_dir")
    assert result.returncode == 0, result.stderr[-3000:]
    assert not list(out.glob("step_*"))  # the old run's checkpoints are gone: a later `latest` cannot pick them
    assert read_json(out / "all_results.json")["step"] == 1 and (out / "notes.txt").read_text() == "mine"
    # `latest` over a finished run without checkpoints would silently start a new run there.
    result = run(TRAIN_LM, *lm_args(shared_data, out), "--resume_from_checkpoint", "latest")
    one_line_error(result, "no checkpoint to continue from")


# --------------------------------------------------------------------------------------------------------------------
# Preemption: SIGTERM/SIGINT finish the update, checkpoint, exit 75; `latest` continues exactly
# --------------------------------------------------------------------------------------------------------------------


def interrupt(cmd: list, signum: int, log: Path) -> subprocess.CompletedProcess:
    """Run `cmd` with stderr in `log`; once its training loop runs (the progress bar is up), send `signum`."""
    with open(log, "w") as stderr:
        proc = subprocess.Popen(list(map(str, cmd)), env=ENV, stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            deadline = time.monotonic() + 300
            while "train:" not in log.read_text():
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, "the training loop never started"
                time.sleep(0.1)
            time.sleep(0.5)  # a few updates in
            proc.send_signal(signum)
            stdout, _ = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, log.read_text())


def test_sigterm_checkpoints_and_resume_latest_continues_exactly(shared_data, tmp_path):
    from nanoformer.training.common import PREEMPTED_EXIT_CODE
    from safetensors.torch import load_file

    # A constant learning rate, so that a run's schedule does not depend on --max_train_steps.
    flags = ["--learning_rate", "1e-3", "--min_learning_rate", "1e-3", "--warmup_steps", "0", "--logging_steps", "50",
             "--config_overrides", TINY_LM + ",dropout=0.1", "--checkpointing_steps", "1000000"]  # fmt: skip
    out = tmp_path / "preempted"
    cmd = [sys.executable, TRAIN_LM, *lm_args(shared_data, out, steps=1_000_000), *flags]
    result = interrupt(cmd, signal.SIGTERM, tmp_path / "preempted.log")
    assert result.returncode == PREEMPTED_EXIT_CODE, result.stderr[-3000:]
    assert "Stopped by SIGTERM" in result.stderr and not (out / "all_results.json").exists()
    (checkpoint,) = list(out.glob("step_*"))
    step = int(checkpoint.name.split("_")[1])
    assert 0 < step < 1_000_000

    resumed = run(TRAIN_LM, *lm_args(shared_data, out, steps=step + 20), *flags, "--resume_from_checkpoint", "latest")
    assert resumed.returncode == 0 and f"at step {step}" in resumed.stderr, resumed.stderr[-3000:]
    reference = run(TRAIN_LM, *lm_args(shared_data, tmp_path / "straight", steps=step + 20), *flags)
    assert reference.returncode == 0, reference.stderr[-3000:]
    a, b = load_file(out / "model.safetensors"), load_file(tmp_path / "straight" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)  # the interrupted + resumed run is the uninterrupted one


def test_sigint_stops_the_translator_trainer_with_a_checkpoint(shared_data, bpe_tokenizer_dir, tmp_path):
    from nanoformer.training.common import PREEMPTED_EXIT_CODE

    out = tmp_path / "mt"
    cmd = [sys.executable, TRAIN_MT, *mt_args(shared_data, bpe_tokenizer_dir, out, steps=100_000)]
    result = interrupt(cmd, signal.SIGINT, tmp_path / "mt.log")
    assert result.returncode == PREEMPTED_EXIT_CODE, result.stderr[-3000:]
    assert "Stopped by SIGINT" in result.stderr and "Traceback" not in result.stderr
    (checkpoint,) = list(out.glob("step_*"))
    step = int(checkpoint.name.split("_")[1])
    resumed = run(TRAIN_MT, *mt_args(shared_data, bpe_tokenizer_dir, out, steps=step + 2), "--resume_from_checkpoint",
                  "latest")  # fmt: skip
    assert resumed.returncode == 0 and f"at step {step}" in resumed.stderr, resumed.stderr[-3000:]
    assert read_json(out / "all_results.json")["step"] == step + 2


# --------------------------------------------------------------------------------------------------------------------
# The HF example scripts' flag names
# --------------------------------------------------------------------------------------------------------------------


def test_hf_flag_names_in_the_lm_trainer(shared_data, tmp_path):
    args = lm_args(shared_data, tmp_path, steps=1)
    del args[args.index("--max_train_steps") : args.index("--max_train_steps") + 2]
    del args[args.index("--warmup_steps") : args.index("--warmup_steps") + 2]
    result = run(TRAIN_LM, *args, "--num_train_epochs", 2, "--max_train_samples", 50, "--lr_scheduler_type", "linear",
                 "--num_warmup_steps", 2, "--min_learning_rate", 0)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    # 50 windows of 16 tokens (+1 target) = 801 training tokens, 4 x 16 tokens per step: 2 epochs = ceil(1602 / 64)
    assert read_json(tmp_path / "all_results.json")["step"] == 26
    lrs = [r["learning_rate"] for r in read_json(tmp_path / "log_history.json") if "learning_rate" in r]
    assert lrs[2] == pytest.approx(1e-3) and lrs[-1] == pytest.approx(1e-3 / 24)  # linear decay towards 0


def test_hf_flag_names_in_the_mt_trainer(shared_data, bpe_tokenizer_dir, tmp_path):
    args = mt_args(shared_data, bpe_tokenizer_dir, tmp_path / "epochs", steps=1)
    del args[args.index("--max_train_steps") : args.index("--max_train_steps") + 2]
    result = run(TRAIN_MT, *args, "--num_train_epochs", 1, "--max_train_samples", 40)
    assert result.returncode == 0, result.stderr[-3000:]
    results = read_json(tmp_path / "epochs" / "all_results.json")
    assert results["stop_reason"] == "num_train_epochs" and results["rows_read"] == 40
    assert results["train_target_tokens"] > 0 and 1 <= results["step"] < 40

    args = mt_args(shared_data, bpe_tokenizer_dir, tmp_path / "linear", steps=3)
    del args[args.index("--warmup_steps") : args.index("--warmup_steps") + 2]
    result = run(TRAIN_MT, *args, "--lr_scheduler_type", "linear", "--num_warmup_steps", 1, "--learning_rate", 1e-3)
    assert result.returncode == 0, result.stderr[-3000:]
    lrs = [r["learning_rate"] for r in read_json(tmp_path / "linear" / "log_history.json") if "learning_rate" in r]
    assert lrs == pytest.approx([1e-3, 5.5e-4, 1e-4])  # warmup to the peak, then straight down to peak / 10

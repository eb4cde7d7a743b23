"""End-to-end tests of `accelerate launch training/train_mt.py` on ../shared/data with a tiny translator.

One shared run (module fixture) trains on a JSONL made of Tatoeba pairs plus malformed rows; the other tests resume
from it, kill a run with SIGKILL and resume, run two CPU processes, and check the failure modes.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TRAIN_MT = str(REPO / "training" / "train_mt.py")
TINY = (
    "d_model=32,encoder_layers=1,decoder_layers=1,encoder_attention_heads=2,decoder_attention_heads=2,"
    "encoder_ffn_dim=64,decoder_ffn_dim=64"
)
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
MALFORMED = [
    "this line is not JSON",
    json.dumps({"translation": {"en": "Where is the cat?"}}),  # missing the target language
    json.dumps({"translation": {"en": "", "zh": "空的"}}),  # empty text
    json.dumps({"translation": {"en": 42, "zh": "四十二"}}),  # non-string text
    "",  # blank line
]


def launch_cmd(args: list[str], num_processes: int = 1, quiet: bool = False) -> list[str]:
    # `--cpu --num_processes N` starts ONE process (accelerate's simple launcher); several CPU processes need the
    # torchrun launcher (--multi_gpu) with ACCELERATE_USE_CPU=1 (set in `launch`), which uses gloo on the CPU.
    # `quiet`: `-q`, no CalledProcessError traceback of the launcher's own when the script fails (one process).
    device = ["--cpu"] if num_processes == 1 else ["--multi_gpu"]
    return [
        sys.executable, "-m", "accelerate.commands.launch", *(["-q"] if quiet else []), *device,
        "--num_processes", str(num_processes),
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", TRAIN_MT, *args,
    ]  # fmt: skip


def run_args(tokenizer_dir, train_file, valid_file, output_dir, **overrides) -> list[str]:
    flags = {
        "train_file": train_file,
        "validation_file": valid_file,
        "tokenizer_name": tokenizer_dir,
        "config_overrides": TINY,
        "max_source_length": 48,
        "max_target_length": 48,
        "max_tokens_per_batch": 768,
        "shuffle_buffer_size": 400,
        "warmup_steps": 10,
        "max_train_steps": 40,
        "eval_steps": 20,
        "checkpointing_steps": 20,
        "max_eval_samples": 40,
        "num_beams": 2,
        "logging_steps": 10,
        "output_dir": output_dir,
        **overrides,
    }
    return [item for key, value in flags.items() for item in (f"--{key}", str(value))]


def launch(args: list[str], num_processes: int = 1, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**ENV, "ACCELERATE_USE_CPU": "1"} if num_processes > 1 else ENV
    result = subprocess.run(launch_cmd(args, num_processes), env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result


def read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def data_files(shared_data, tmp_path_factory) -> dict:
    """3,000 Tatoeba training pairs with the malformed rows mixed in, and the Tatoeba validation file."""
    lines = (shared_data / "tatoeba-cmn-eng" / "train.jsonl").read_text(encoding="utf-8").splitlines()[:3000]
    for i, bad in enumerate(MALFORMED):
        lines.insert(100 + 500 * i, bad)
    train = tmp_path_factory.mktemp("mt_data") / "train_with_malformed.jsonl"
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"train": train, "valid": shared_data / "tatoeba-cmn-eng" / "valid.jsonl"}


@pytest.fixture(scope="module")
def trained(bpe_tokenizer_dir, data_files, tmp_path_factory) -> Path:
    """One tiny run of 40 steps (evaluations at 0, 20, 40; checkpoints at 20 and 40)."""
    out = tmp_path_factory.mktemp("mt_run")
    launch(run_args(bpe_tokenizer_dir, data_files["train"], data_files["valid"], out))
    return out


def test_output_folder_complete_and_loadable(trained):
    import nanoformer.modeling  # noqa: F401 - registers the translator
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    for name in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "training_curves.png"):
        assert (trained / name).is_file(), name
    assert sorted(p.name for p in trained.glob("step_*")) == ["step_20", "step_40"]
    results = read_json(trained / "all_results.json")
    for key in ("step", "eval_loss", "eval_bleu", "train_runtime", "train_tokens_per_second", "skipped_rows",
                "bleu_signature", "data_wait_fraction", "nonfinite_steps"):  # fmt: skip
        assert key in results, key
    assert results["step"] == 40 and results["train_tokens_per_second"] > 0
    assert "tok:zh" in results["bleu_signature"]
    assert read_json(trained / "config.json")["label_smoothing"] == 0.1  # what the model was trained with
    # The saved tokenizer's limit is the model's position table, not the tokenizer's default 1024.
    assert read_json(trained / "tokenizer_config.json")["model_max_length"] == 512
    assert read_json(trained / "config.json")["max_position_embeddings"] == 512

    model = AutoModelForSeq2SeqLM.from_pretrained(trained)
    tokenizer = AutoTokenizer.from_pretrained(trained)
    inputs = tokenizer(["How are you?"], return_tensors="pt")
    out = model.generate(**inputs, num_beams=2, max_new_tokens=5)
    assert out.shape[0] == 1 and out[0, 0].item() == model.config.decoder_start_token_id


def test_malformed_rows_skipped_and_counted(trained):
    results = read_json(trained / "all_results.json")
    assert results["skipped_rows"] == len(MALFORMED)
    assert results["malformed_rows"] == len(MALFORMED)
    assert sum(results["skipped_by_reason"].values()) == len(MALFORMED)
    assert len(results["skipped_by_reason"]) == 5  # not JSON, missing language, empty, non-string, blank line
    history = read_json(trained / "log_history.json")
    assert [r["skipped_rows"] for r in history if r["step"] == 40 and "eval_loss" in r] == [len(MALFORMED)]


def test_validation_loss_goes_down(trained):
    evals = [r for r in read_json(trained / "log_history.json") if "eval_loss" in r]
    assert evals[0]["step"] == 0 and evals[-1]["step"] == 40
    # A random model starts near ln(8000) ≈ 9; 40 tiny steps must take it clearly lower.
    assert evals[-1]["eval_loss"] < evals[0]["eval_loss"] - 1.0, evals


def test_resume_from_checkpoint_continues_exactly(trained, bpe_tokenizer_dir, data_files, tmp_path):
    args = run_args(bpe_tokenizer_dir, data_files["train"], data_files["valid"], tmp_path)
    result = launch([*args, "--resume_from_checkpoint", str(trained / "step_20")])
    assert "Resumed from" in result.stdout + result.stderr
    resumed, original = read_json(tmp_path / "all_results.json"), read_json(trained / "all_results.json")
    assert resumed["step"] == 40
    # Model, optimizer, scheduler, RNG and data position restored: the same batches and dropout masks follow, so
    # steps 21-40 reproduce the uninterrupted run.
    assert resumed["eval_loss"] == pytest.approx(original["eval_loss"], rel=1e-4)
    train_log = {r["step"]: r["loss"] for r in read_json(trained / "log_history.json") if "loss" in r}
    resumed_log = {r["step"]: r["loss"] for r in read_json(tmp_path / "log_history.json") if "loss" in r}
    assert resumed_log[10] == train_log[10]  # history carried over from the checkpoint
    assert resumed_log[30] == pytest.approx(train_log[30], rel=1e-4)
    assert resumed_log[40] == pytest.approx(train_log[40], rel=1e-4)


def test_kill_9_then_resume_latest(bpe_tokenizer_dir, data_files, tmp_path):
    args = run_args(
        bpe_tokenizer_dir, data_files["train"], data_files["valid"], tmp_path,
        max_train_steps=400, checkpointing_steps=5, eval_steps=1000, max_eval_samples=10,
    )  # fmt: skip
    proc = subprocess.Popen(
        launch_cmd(args), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 300
        while not (tmp_path / "step_10" / "meta.json").is_file():  # poll, don't sleep a fixed time
            assert proc.poll() is None, "training exited before its second checkpoint"
            assert time.monotonic() < deadline, "no checkpoint after 300 s"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its training process, mid-run
        proc.wait()
    assert not (tmp_path / "all_results.json").exists()
    steps = sorted(int(p.name.split("_")[1]) for p in tmp_path.glob("step_*") if (p / "meta.json").is_file())
    newest = steps[-1]
    assert newest < 400

    result = launch([*args, "--resume_from_checkpoint", "latest", "--max_train_steps", str(newest + 10)])
    assert f"Resumed from {tmp_path / f'step_{newest}'} at step {newest}" in result.stdout + result.stderr
    assert read_json(tmp_path / "all_results.json")["step"] == newest + 10


def test_two_cpu_processes(bpe_tokenizer_dir, data_files, tmp_path):
    args = run_args(
        bpe_tokenizer_dir, data_files["train"], data_files["valid"], tmp_path,
        max_train_steps=10, eval_steps=10, checkpointing_steps=10, max_eval_samples=16,
        shuffle_buffer_size=4000,  # each process reads its whole half of the file before its first batch
    )  # fmt: skip
    launch(args, num_processes=2)
    results = read_json(tmp_path / "all_results.json")
    assert results["num_processes"] == 2 and results["step"] == 10
    assert results["eval_bleu"] is not None and results["skipped_rows"] == len(MALFORMED)
    # Each process saved its own data position.
    assert {p.name for p in (tmp_path / "step_10").glob("data_state_*.json")} == {
        "data_state_0.json",
        "data_state_1.json",
    }


def test_missing_file_fails_clearly(bpe_tokenizer_dir, tmp_path):
    missing = tmp_path / "nope" / "train.jsonl"
    cmd = [sys.executable, TRAIN_MT, "--train_file", str(missing), "--tokenizer_name", str(bpe_tokenizer_dir),
           "--output_dir", str(tmp_path / "out")]  # fmt: skip
    result = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"train_mt.py: error: --train_file {missing}: file not found"]


def test_unreachable_hub_suggests_train_file(bpe_tokenizer_dir, tmp_path):
    cmd = [sys.executable, TRAIN_MT, "--tokenizer_name", str(bpe_tokenizer_dir), "--output_dir", str(tmp_path)]
    result = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)  # HF_HUB_OFFLINE=1
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "wmt/wmt19" in lines[0] and "--train_file" in lines[0], result.stderr


def test_score_mt_writes_bleu_chrf_and_hypotheses(trained, data_files, tmp_path):
    output = tmp_path / "valid.json"
    cmd = [sys.executable, "-m", "nanoformer.training.score_mt", "--model_dir", str(trained), "--test_file",
           str(data_files["valid"]), "--max_samples", "30", "--num_beams", "2", "--output_file", str(output)]  # fmt: skip
    result = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    scores = read_json(output)
    assert "tok:zh" in scores["bleu_signature"] and 0 <= scores["bleu"] <= 100 and 0 <= scores["chrf"] <= 100
    assert scores["num_samples"] == 30 and len(scores["hypotheses"]) == 30
    assert output.with_suffix(".hyp.txt").read_text(encoding="utf-8").splitlines() == scores["hypotheses"]

    # stdin → stdout, one output line per input line (blank lines stay blank).
    cmd = [sys.executable, "-m", "nanoformer.training.score_mt", "--model_dir", str(trained), "--num_beams", "1",
           "--batch_size", "2"]  # fmt: skip
    result = subprocess.run(cmd, env=ENV, input="Hello.\n\nHow are you?\n", capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""

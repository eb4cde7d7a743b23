"""End-to-end tests of `accelerate launch training/train_lm.py` and the sampling entry point on tiny Shakespeare.

One tiny run (100 steps, dropout on) is shared by the module; a second run resumes from its step-50 checkpoint
through `latest` and must finish with bit-identical weights.
"""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

REPO = Path(__file__).resolve().parents[1]
TRAIN_LM = REPO / "training" / "train_lm.py"
SAMPLE_LM = REPO / "training" / "sample_lm.py"
ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch"]

TINY = [
    "--config_overrides", "n_layer=2,n_head=2,n_embd=32,dropout=0.1",
    "--block_size", "32",
    "--per_device_train_batch_size", "12",
    "--learning_rate", "3e-3",
    "--min_learning_rate", "3e-4",
    "--warmup_steps", "10",
    "--max_train_steps", "100",
    "--eval_steps", "50",
    "--eval_iters", "10",
    "--checkpointing_steps", "50",
    "--sample_max_new_tokens", "40",
]  # fmt: skip


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def launch(*args, num_processes: int = 1, check: bool = True) -> subprocess.CompletedProcess:
    env = _env()
    if num_processes == 1:
        cmd = [*ACCELERATE, "--num_processes", "1", "--cpu"]
    else:
        # `--cpu --num_processes N` would start ONE process (accelerate's simple launcher); several CPU processes
        # need the torchrun launcher (--multi_gpu) with ACCELERATE_USE_CPU=1, which selects gloo on the CPU.
        cmd = [*ACCELERATE, "--multi_gpu", "--num_processes", str(num_processes)]
        env["ACCELERATE_USE_CPU"] = "1"
    cmd += [str(TRAIN_LM), *map(str, args)]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if check and result.returncode != 0:
        raise AssertionError(f"train_lm failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return result


@pytest.fixture(scope="module")
def text_file(shared_data) -> Path:
    return shared_data / "tinyshakespeare" / "input.txt"


@pytest.fixture(scope="module")
def lm_run(text_file, tmp_path_factory) -> Path:
    """A 100-step tiny run with checkpoints at steps 50 and 100."""
    out = tmp_path_factory.mktemp("lm_run")
    result = launch("--train_file", text_file, "--output_dir", out, *TINY)
    assert "--- final sample ---" in result.stdout
    return out


@pytest.fixture(scope="module")
def resumed_run(lm_run, text_file, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The same run resumed with `latest` from a folder holding step_50, an incomplete step_80 and a temp dir."""
    out = tmp_path_factory.mktemp("lm_resumed")
    shutil.copytree(lm_run / "step_50", out / "step_50")
    (out / "step_80").mkdir()  # no meta.json: never finished
    (out / "step_80" / "model.safetensors").write_bytes(b"partial")
    shutil.copytree(lm_run / "step_50", out / ".tmp-step_100")  # a save killed before its rename
    result = launch("--train_file", text_file, "--output_dir", out, *TINY, "--resume_from_checkpoint", "latest")
    return out, result


def test_loss_goes_down(lm_run):
    history = json.loads((lm_run / "log_history.json").read_text())
    evals = [r for r in history if "eval_loss" in r]
    assert evals[0]["step"] == 0 and evals[-1]["step"] == 100
    initial, final = evals[0]["eval_loss"], evals[-1]["eval_loss"]
    assert initial > math.log(60)  # an untrained model is close to uniform over the 67 tokens
    assert final < initial - 0.8, (initial, final)

    results = json.loads((lm_run / "all_results.json").read_text())
    assert results["step"] == 100
    assert results["eval_loss"] == final
    assert results["eval_loss_full"] < initial - 0.8
    assert results["train_loss"] < initial - 0.8
    assert results["train_tokens_per_second"] > 0 and results["train_runtime"] > 0
    assert (lm_run / "training_curves.png").stat().st_size > 1000


def test_output_folder_loads_with_auto_classes_and_samples(lm_run):
    import nanoformer.modeling  # noqa: F401  (registers NanoGPT with the Auto classes)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(lm_run)
    model = AutoModelForCausalLM.from_pretrained(lm_run).eval()
    assert model.config.block_size == 32 and model.config.n_layer == 2 and model.config.vocab_size == len(tokenizer)
    assert (lm_run / "generation_config.json").is_file()
    assert model.generation_config.do_sample and model.generation_config.top_k == 200

    ids = tokenizer("ROMEO:", return_tensors="pt").input_ids
    torch.manual_seed(0)
    out = model.generate(ids, max_new_tokens=20, min_new_tokens=20)
    assert out.shape == (1, ids.shape[1] + 20)
    assert len(tokenizer.decode(out[0, ids.shape[1] :])) == 20  # one character per token

    # The final weights are those of the last checkpoint (saved at the same step).
    final = load_file(lm_run / "model.safetensors")
    ckpt = load_file(lm_run / "step_100" / "model.safetensors")
    assert all(torch.equal(final[k], ckpt[k]) for k in final)


def test_resume_latest_skips_incomplete_and_continues_exactly(lm_run, resumed_run):
    out, result = resumed_run
    assert "Resumed from" in result.stderr and "step_50 at step 50" in result.stderr

    results = json.loads((out / "all_results.json").read_text())
    assert results["step"] == 100 and results["train_steps_this_run"] == 50
    history = json.loads((out / "log_history.json").read_text())
    steps = [r["step"] for r in history if "eval_loss" in r]
    assert steps == [0, 50, 100]  # the history of the first 50 steps came back with the checkpoint

    # Model, optimizer, scheduler, dropout RNG and data sampler all restored: identical weights.
    a = load_file(lm_run / "model.safetensors")
    b = load_file(out / "model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)

    # The stale temp dir was replaced by the complete step_100; nothing half-written is left.
    assert not list(out.glob(".tmp-*"))
    assert (out / "step_100" / "meta.json").is_file()


def test_missing_file_fails_clearly(tmp_path):
    result = launch("--train_file", tmp_path / "nope.txt", "--output_dir", tmp_path / "out", check=False)
    assert result.returncode != 0
    assert "--train_file not found" in result.stderr and "nope.txt" in result.stderr


def test_empty_file_fails_clearly(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    result = subprocess.run(
        [sys.executable, TRAIN_LM, "--train_file", empty, "--output_dir", tmp_path / "out"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == "train_lm.py: error: the training text is empty"


def test_unknown_config_override_names_the_key(text_file, tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            TRAIN_LM,
            "--train_file",
            text_file,
            "--output_dir",
            tmp_path,
            "--config_overrides",
            "n_layers=2",
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert result.returncode != 0
    assert "unknown key 'n_layers'" in result.stderr and "n_layer" in result.stderr


def test_sample_entry_point_generates_past_block_size(lm_run):
    result = subprocess.run(
        [sys.executable, SAMPLE_LM, "--model_dir", lm_run, "--prompt", "ROMEO:", "--max_new_tokens", "80",
         "--num_samples", "2", "--seed", "3"],
        capture_output=True, text=True, env=_env(), timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    samples = result.stdout.split("\n---------------\n")[:-1]
    assert len(samples) == 2
    for sample in samples:
        assert sample.startswith("ROMEO:")
        assert len(sample) == len("ROMEO:") + 80  # 80 characters, well past block_size 32
    assert samples[0] != samples[1]


def test_two_processes_train_and_checkpoint(text_file, tmp_path):
    out = tmp_path / "ddp"
    args = ["--train_file", text_file, "--output_dir", out, *TINY]
    args[args.index("--max_train_steps") + 1] = "20"
    args[args.index("--checkpointing_steps") + 1] = "10"
    launch(*args, "--checkpoints_total_limit", "1", num_processes=2)
    results = json.loads((out / "all_results.json").read_text())
    assert results["num_processes"] == 2 and results["step"] == 20 and math.isfinite(results["eval_loss_full"])
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("step_")) == ["step_20"]
    # each process saved its own sampler position
    states = [json.loads((out / "step_20" / f"data_state_{i}.json").read_text()) for i in (0, 1)]
    assert states[0]["batches_drawn"] == states[1]["batches_drawn"] == 20
    assert states[0]["bit_generator"] != states[1]["bit_generator"]


def test_push_to_hub_offline_fails_before_training(text_file, tmp_path):
    result = subprocess.run(
        [sys.executable, TRAIN_LM, "--train_file", text_file, "--output_dir", tmp_path, "--push_to_hub",
         "--hub_model_id", "me/tiny"],
        capture_output=True, text=True, env=_env(), timeout=300,
    )  # fmt: skip
    assert result.returncode != 0 and "HF_HUB_OFFLINE" in result.stderr
    assert not (tmp_path / "cache").exists()  # stopped before reading any data


def test_export_and_push_sends_a_loadable_export(lm_run, monkeypatch):
    """A simulated upload: the push itself is intercepted; the exported folder must be complete and loadable."""
    import argparse

    import nanoformer.hub
    from nanoformer.training.train_lm import push_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    pushed = []
    monkeypatch.setattr(nanoformer.hub, "push_to_hub", lambda folder, repo_id: pushed.append((folder, repo_id)))
    model = AutoModelForCausalLM.from_pretrained(lm_run)
    tokenizer = AutoTokenizer.from_pretrained(lm_run)
    args = argparse.Namespace(
        **json.loads((lm_run / "step_100" / "meta.json").read_text())["args"]
        | {"push_to_hub": True, "hub_model_id": "me/tiny-shakespeare"}
    )
    results = json.loads((lm_run / "all_results.json").read_text())
    folder = push_model(model, tokenizer, args)  # the card comes from the run folder (args.output_dir)
    assert pushed == [(folder, "me/tiny-shakespeare")]
    card = (folder / "README.md").read_text()
    assert f"{results['eval_loss_full']:.3f}"[:4] in card and "me/tiny-shakespeare" in card
    assert (folder / "figures" / "training_curves.png").is_file()
    reloaded = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
    ids = tokenizer("ROMEO:", return_tensors="pt").input_ids
    assert torch.allclose(reloaded(ids).logits, model(ids).logits)

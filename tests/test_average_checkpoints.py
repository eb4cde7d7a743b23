"""Checkpoint averaging (`python -m nanoformer.training.average_checkpoints`) on real train_mt.py checkpoints.

One tiny run of 12 steps (checkpoints step_4, step_8, step_12 and the final model) is shared by the module; the CLI
is run once as a real process, the error cases in-process through `main`.
"""

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from nanoformer.modeling import NanoGPTConfig, NanoGPTForCausalLM
from nanoformer.training.average_checkpoints import average_checkpoints, main, select_checkpoints
from safetensors.torch import load_file, save_file
from test_train_mt import ENV, launch, run_args
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

AVERAGE = [sys.executable, "-m", "nanoformer.training.average_checkpoints"]


def manual_mean(*folders: Path) -> dict[str, torch.Tensor]:
    """The element-wise mean of the folders' model.safetensors, computed independently of the module."""
    weights = [load_file(folder / "model.safetensors") for folder in folders]
    return {name: torch.stack([w[name].double() for w in weights]).mean(0).float() for name in weights[0]}


@pytest.fixture(scope="module")
def run(shared_data, bpe_tokenizer_dir, tmp_path_factory) -> Path:
    """A finished 12-step train_mt.py run with checkpoints at steps 4, 8 and 12."""
    lines = (shared_data / "tatoeba-cmn-eng" / "train.jsonl").read_text(encoding="utf-8").splitlines()[:2000]
    train = tmp_path_factory.mktemp("avg_data") / "train.jsonl"
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path_factory.mktemp("avg_run")
    valid = shared_data / "tatoeba-cmn-eng" / "valid.jsonl"
    args = run_args(bpe_tokenizer_dir, train, valid, out, max_train_steps=12, checkpointing_steps=4, eval_steps=1000,
                    max_eval_samples=4, num_beams=1, warmup_steps=4)  # fmt: skip
    launch(args)
    assert sorted(p.name for p in out.glob("step_*")) == ["step_12", "step_4", "step_8"]
    return out


@pytest.fixture(scope="module")
def averaged(run, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The CLI, as a user runs it: the last 2 checkpoints of `run`."""
    out = tmp_path_factory.mktemp("avg_out") / "avg2"
    result = subprocess.run([*AVERAGE, "--last", "2", str(run), "--output", str(out)], env=ENV,
                            capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return out, result


def test_average_is_the_elementwise_mean(run):
    folders = [run / "step_4", run / "step_8", run / "step_12"]
    average = average_checkpoints(folders)
    expected = manual_mean(*folders)
    assert average.keys() == expected.keys()
    for name, tensor in average.items():
        assert tensor.dtype == torch.float32
        torch.testing.assert_close(tensor, expected[name], rtol=0, atol=1e-7, msg=name)
    first = load_file(folders[0] / "model.safetensors")
    assert any(not torch.equal(average[name], first[name]) for name in average)  # training moved the weights


def test_cli_writes_a_loadable_folder_with_tied_weights(run, averaged):
    out, result = averaged
    assert "Averaged 2 checkpoints (steps 8, 12)" in result.stderr
    for name in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json",
                 "tokenizer_config.json", "modeling_translator.py", "configuration_translator.py"):  # fmt: skip
        assert (out / name).is_file(), name
    record = json.loads((out / "averaged_checkpoints.json").read_text(encoding="utf-8"))
    assert record["steps"] == [8, 12] and record["config_from"] == str(run)
    # The shared embedding is stored once, as the run's own checkpoints and save_pretrained store it.
    assert load_file(out / "model.safetensors").keys() == load_file(run / "step_8" / "model.safetensors").keys()

    model = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    embedding = model.model.encoder.embed_tokens.weight
    assert model.lm_head.weight.data_ptr() == embedding.data_ptr() == model.model.decoder.embed_tokens.weight.data_ptr()
    assert model.generation_config.to_dict() == AutoModelForSeq2SeqLM.from_pretrained(run).generation_config.to_dict()

    # Same logits as the run's architecture holding the manually averaged weights.
    reference = AutoModelForSeq2SeqLM.from_pretrained(run).eval()
    missing, unexpected = reference.load_state_dict(manual_mean(run / "step_8", run / "step_12"), strict=False)
    assert not unexpected and set(missing) == {"lm_head.weight", "model.decoder.embed_tokens.weight"}
    ids = torch.tensor([[5, 17, 230, 3], [9, 48, 3, 0]])
    decoder_ids = torch.tensor([[2, 11, 40], [2, 7, 7]])
    with torch.no_grad():
        logits = model(input_ids=ids, decoder_input_ids=decoder_ids).logits
        assert torch.equal(logits, reference(input_ids=ids, decoder_input_ids=decoder_ids).logits)


def test_saved_tokenizer_carries_the_models_position_limit(run, bpe_tokenizer_dir, tmp_path):
    from nanoformer.training.average_checkpoints import save_averaged_model

    def saved_limit(folder: Path) -> int:
        return json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))["model_max_length"]

    assert saved_limit(bpe_tokenizer_dir) == 1024  # a freshly trained tokenizer's default
    out = save_averaged_model([run / "step_8", run / "step_12"], tmp_path / "avg", tokenizer_dir=bpe_tokenizer_dir)
    assert saved_limit(out) == json.loads((out / "config.json").read_text())["max_position_embeddings"] == 512
    assert saved_limit(run) == 512  # train_mt's final save too


REMOTE_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.modules["nanoformer"] = None  # the folder must stand alone
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForSeq2SeqLM
    model = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
    assert model.lm_head.weight.data_ptr() == model.model.encoder.embed_tokens.weight.data_ptr()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[5, 17, 230, 3]]), decoder_input_ids=torch.tensor([[2, 11]])).logits
    save_file({"logits": logits.contiguous()}, sys.argv[2])
    """
)


def test_output_loads_with_remote_code_without_nanoformer(averaged, tmp_path):
    out, _ = averaged
    env = {**ENV, "HF_MODULES_CACHE": str(tmp_path / "modules"), "PYTHONPATH": ""}
    result = subprocess.run([sys.executable, "-c", REMOTE_SCRIPT, str(out), str(tmp_path / "logits.safetensors")],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    model = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    with torch.no_grad():
        expected = model(input_ids=torch.tensor([[5, 17, 230, 3]]), decoder_input_ids=torch.tensor([[2, 11]])).logits
    assert torch.equal(load_file(tmp_path / "logits.safetensors")["logits"], expected)


def test_last_n_picks_the_newest_complete_checkpoints(run, tmp_path):
    assert [step for step, _ in select_checkpoints(run, 2)] == [8, 12]
    assert [step for step, _ in select_checkpoints(run, 3)] == [4, 8, 12]
    assert [step for step, _ in select_checkpoints(run, 2, every=8)] == [4, 12]  # spaced back from the newest
    # A half-written checkpoint (no meta.json, or still under its temporary name) is never picked.
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("*.bin", "*.pkl"))
    shutil.copytree(copy / "step_12", copy / "step_16")
    (copy / "step_16" / "meta.json").unlink()
    shutil.copytree(copy / "step_12", copy / ".tmp-step_20")
    assert [step for step, _ in select_checkpoints(copy, 2)] == [8, 12]


def save_nanogpt(folder: Path, tokenizer, seed: int, n_embd: int = 32) -> NanoGPTForCausalLM:
    torch.manual_seed(seed)
    config = NanoGPTConfig(vocab_size=len(tokenizer), block_size=16, n_layer=1, n_head=2, n_embd=n_embd)
    model = NanoGPTForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


def test_inputs_of_saved_nanogpt_models(char_tokenizer, tmp_path):
    a = save_nanogpt(tmp_path / "a", char_tokenizer, seed=0)
    b = save_nanogpt(tmp_path / "b", char_tokenizer, seed=1)
    assert main(["--inputs", str(tmp_path / "a"), str(tmp_path / "b"), "--output", str(tmp_path / "avg")]) == 0
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "avg")
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
    b_state = b.state_dict()
    for name, tensor in a.state_dict().items():
        mean = ((tensor.double() + b_state[name].double()) / 2).float()
        torch.testing.assert_close(model.state_dict()[name], mean, rtol=0, atol=1e-7, msg=name)
    assert (tmp_path / "avg" / "tokenizer_config.json").is_file()


def test_mismatched_shapes_name_the_tensor(char_tokenizer, tmp_path):
    save_nanogpt(tmp_path / "a", char_tokenizer, seed=0, n_embd=32)
    save_nanogpt(tmp_path / "b", char_tokenizer, seed=0, n_embd=64)
    with pytest.raises(ValueError, match=r"tensor 'transformer\.\S+' has shape \(.*\) in .*a but \(.*\) in .*b"):
        average_checkpoints([tmp_path / "a", tmp_path / "b"])
    weights = load_file(tmp_path / "a" / "model.safetensors")
    del weights["transformer.wpe.weight"]
    save_file(weights, tmp_path / "fewer.safetensors")
    with pytest.raises(ValueError, match=r"tensor 'transformer\.wpe\.weight' is in .*a but not in .*fewer"):
        average_checkpoints([tmp_path / "a", tmp_path / "fewer.safetensors"])


def error_cases(run: Path, tmp: Path, char_tokenizer) -> dict[str, tuple[list[str], str]]:
    """Argument lists and the substring of the one error line each must print."""
    (tmp / "empty").mkdir()
    (tmp / "a_file").write_text("not a folder", encoding="utf-8")
    save_nanogpt(tmp / "gpt", char_tokenizer, seed=0)
    unfinished = tmp / "unfinished"  # a run killed before writing its final model: checkpoints, no config.json
    shutil.copytree(run / "step_4", unfinished / "step_4", ignore=shutil.ignore_patterns("*.bin", "*.pkl"))
    out = ["--output", str(tmp / "out")]
    return {
        "missing folder": (["--last", "2", str(tmp / "nope"), *out], f"run folder not found: {tmp / 'nope'}"),
        "missing input": (["--inputs", str(tmp / "nope"), *out], f"checkpoint not found: {tmp / 'nope'}"),
        "no checkpoints": (["--last", "1", str(tmp / "empty"), *out], "no complete checkpoints"),
        "N too large": (["--last", "4", str(run), *out], "--last 4: " + f"{run} has only 3 complete checkpoints"),
        "N not a number": (["--last", "two", str(run), *out], "N must be an integer"),
        "different models": (["--inputs", str(run / "step_4"), str(tmp / "gpt"), *out], "(different models?)"),
        "unwritable output": (["--last", "1", str(run), "--output", str(tmp / "a_file" / "out")], "is not a folder"),
        "no config": (["--last", "1", str(unfinished), *out], "pass --config_dir"),
        "bad config_dir": (["--last", "1", str(run), "--config_dir", str(tmp / "empty"), *out], "no config.json"),
    }


def test_errors_are_one_line_with_exit_2(run, char_tokenizer, tmp_path, capsys):
    for case, (argv, message) in error_cases(run, tmp_path, char_tokenizer).items():
        capsys.readouterr()
        assert main(argv) == 2, case
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], (case, lines)
    assert not (tmp_path / "out").exists()  # nothing written by a failed run

    # As a real process: exit status 2, the one line, no traceback.
    result = subprocess.run([*AVERAGE, "--last", "9", str(run), "--output", str(tmp_path / "out")], env=ENV,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: --last 9: {run} has only 3 complete checkpoints (steps 4, 8, 12)"
    ]


def test_unfinished_run_with_config_dir(run, tmp_path):
    unfinished = tmp_path / "unfinished"
    for step in ("step_8", "step_12"):
        shutil.copytree(run / step, unfinished / step, ignore=shutil.ignore_patterns("*.bin", "*.pkl"))
    out = tmp_path / "avg"
    # The architecture from the finished run's folder; the tokenizer is found there too.
    assert main(["--last", "2", str(unfinished), "--config_dir", str(run), "--output", str(out)]) == 0
    averaged = load_file(out / "model.safetensors")
    expected = manual_mean(run / "step_8", run / "step_12")
    for name, tensor in averaged.items():
        torch.testing.assert_close(tensor, expected[name], rtol=0, atol=1e-7, msg=name)

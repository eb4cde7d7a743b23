"""Which model `train_mt.py` leaves in output_dir: the last step's, the best evaluated one, or an average of the last
checkpoints (the paper's "single model obtained by averaging the last 5 checkpoints").

Each run is a real `accelerate launch` of a tiny translator on Tatoeba pairs; the weights in output_dir are compared
tensor by tensor with the step_N checkpoints the same run wrote.
"""

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from test_train_mt import ENV, REPO, launch, read_json, run_args

TRAIN_MT = str(REPO / "training" / "train_mt.py")


@pytest.fixture(scope="module")
def data(shared_data, tmp_path_factory):
    lines = (shared_data / "tatoeba-cmn-eng" / "train.jsonl").read_text(encoding="utf-8").splitlines()[:1500]
    train = tmp_path_factory.mktemp("final_model_data") / "train.jsonl"
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return train, shared_data / "tatoeba-cmn-eng" / "valid.jsonl"


def weights(folder):
    return load_file(str(folder / "model.safetensors"))


def test_average_last_checkpoints_is_the_final_model(bpe_tokenizer_dir, data, tmp_path):
    train, valid = data
    out = tmp_path / "run"
    launch(run_args(bpe_tokenizer_dir, train, valid, out, max_train_steps=12, checkpointing_steps=4, eval_steps=12,
                    max_eval_samples=16) + ["--average_last_checkpoints", "2"])  # fmt: skip
    results = read_json(out / "all_results.json")
    assert results["final_model"] == "average" and results["final_model_steps"] == [8, 12]
    # Both models were scored: the average (eval_*) and the last checkpoint (last_step_*), and they differ.
    assert results["eval_bleu"] is not None and results["last_step_eval_bleu"] is not None
    assert results["eval_loss"] != results["last_step_eval_loss"]

    step_8, step_12, final = weights(out / "step_8"), weights(out / "step_12"), weights(out)
    assert final.keys() == step_12.keys()
    for name, tensor in final.items():
        torch.testing.assert_close(tensor, (step_8[name].double() + step_12[name].double()).div(2).to(tensor.dtype))
    assert any(not torch.equal(final[n], step_12[n]) for n in final)  # not simply the last checkpoint

    # The folder is a normal model: it loads through the Auto classes with the embedding still tied to the output.
    import nanoformer.modeling  # noqa: F401 - registers the translator, so the folder's copy of the code is not run
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(out, trust_remote_code=False)
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    torch.testing.assert_close(model.lm_head.weight, final["model.encoder.embed_tokens.weight"])


def test_load_best_model_at_end_keeps_the_best_step(bpe_tokenizer_dir, data, tmp_path):
    train, valid = data
    out = tmp_path / "run"
    # A constant learning rate far too high for Adam: the loss gets worse after the first evaluations, so the best
    # evaluated step is not the last one.
    flags = run_args(bpe_tokenizer_dir, train, valid, out, max_train_steps=12, checkpointing_steps=2, eval_steps=2,
                     max_eval_samples=16, warmup_steps=1, learning_rate=0.3, num_beams=1)  # fmt: skip
    flags += ["--lr_scheduler_type", "constant_with_warmup", "--load_best_model_at_end", "--metric_for_best_model",
              "loss"]  # fmt: skip
    launch(flags)
    results = read_json(out / "all_results.json")
    evals = {r["step"]: r["eval_loss"] for r in read_json(out / "log_history.json") if "eval_loss" in r and r["step"]}
    best_step = min(evals, key=evals.get)
    assert best_step < 12, evals  # the premise of the test
    assert results["final_model"] == "best" and results["best_step"] == results["final_model_steps"][0] == best_step
    assert results["eval_loss"] == evals[best_step] < results["last_step_eval_loss"] == evals[12]
    best, final, last = weights(out / f"step_{best_step}"), weights(out), weights(out / "step_12")
    assert all(torch.equal(final[n], best[n]) for n in final)
    assert any(not torch.equal(final[n], last[n]) for n in final)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--average_last_checkpoints", "2", "--load_best_model_at_end"], "each choose the final model"),
        (["--average_last_checkpoints", "2", "--early_stopping_patience", "3"], "each choose the final model"),
        (["--average_last_checkpoints", "1"], "at least 2"),
        (["--average_last_checkpoints", "3", "--checkpoints_total_limit", "2"], "keeps fewer checkpoints"),
        (["--average_last_checkpoints", "5", "--max_train_steps", "40", "--checkpointing_steps", "20"], "leaves fewer"),
        (["--metric_for_best_model", "chrf"], "invalid choice"),
    ],
)
def test_final_model_flag_errors_are_one_line(bpe_tokenizer_dir, data, tmp_path, flags, message):
    train, valid = data
    cmd = [sys.executable, TRAIN_MT, *run_args(bpe_tokenizer_dir, train, valid, tmp_path / "run"), *flags]
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()


def test_early_stopping_restores_the_best_model(bpe_tokenizer_dir, data, tmp_path):
    from nanoformer.training.train_mt import parse_args

    train, valid = data
    args = parse_args(run_args(bpe_tokenizer_dir, train, valid, tmp_path / "run") + ["--early_stopping_patience", "2"])
    assert args.load_best_model_at_end and args.metric_for_best_model == "bleu"
    # The old flag name still selects the metric.
    args = parse_args(run_args(bpe_tokenizer_dir, train, valid, tmp_path / "run") + ["--early_stopping_metric", "loss"])
    assert args.metric_for_best_model == "loss" and not args.load_best_model_at_end
    assert json.dumps(vars(args), default=str)  # every parsed value is recordable in a checkpoint's meta.json

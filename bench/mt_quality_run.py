"""Quality run: our translator vs a same-size MarianMTModel, same trainer, same data, same time budget.

Both models are trained side by side by `training/train_mt.py` (one thread each, started together) for the same
budget of training-step time (``--max_train_minutes``; evaluation excluded) on Tatoeba train, with one shared BPE
(vocab 8000) and the same size (d_model 256, 4 heads, ffn 1024, 3+3 layers, tied embeddings). Then each is scored on
Tatoeba valid with `score_mt` (greedy and beam 4), against the raw references and against script-normalised ones
(hypotheses and references converted to Simplified Chinese with OpenCC t2s).

- Marian uses the paper's recipe as in the issue: label smoothing 0.1, Adam(0.9, 0.98, 1e-9), Noam warmup 400 with
  a peak lr of 1e-3 (noam_scale 0.32 at d_model 256), ~4k-token batches.
- Ours (post-LN default, N(0, 0.02) init) uses the same trainer and loss with its own recipe (``OURS_RECIPE``: the
  winner of ``bench/mt_recipe_sweep.py``, including its checkpoint averaging); ``--runs ours_preln`` trains the
  pre-LN variant (`norm_first=True`) with it.

    nohup .venv/bin/python bench/mt_quality_run.py --output_dir bench/results/mt_quality > mt_quality.log 2>&1 &

Results: ``OUTPUT_DIR/summary.json`` and a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIZE = (
    "d_model=256,encoder_layers=3,decoder_layers=3,encoder_attention_heads=4,decoder_attention_heads=4,"
    "encoder_ffn_dim=1024,decoder_ffn_dim=1024"
)
# Tatoeba train is sorted by sentence length: a buffer holding the whole file (29k pairs) shuffles it fully; the
# default 10k buffer would feed the shortest sentences first.
COMMON = [
    "--max_source_length",
    "128",
    "--max_target_length",
    "128",
    "--label_smoothing",
    "0.1",
    "--shuffle_buffer_size",
    "30000",
]
# The paper's recipe at this size, as the issue specifies for the Marian reference (no checkpoint averaging).
MARIAN_RECIPE = ["--max_tokens_per_batch", "4096", "--warmup_steps", "400", "--noam_scale", "0.32"]
# Ours: the winner of bench/mt_recipe_sweep.py (table in bench/mt_recipe_sweep.md) at the same size, batches and
# vocabulary: no dropout, twice the paper's peak lr (2e-3 after the same 400 warmup steps), and the final model the
# average of the last 4 checkpoints 25 updates apart.
OURS_CONFIG = ",dropout=0.0"
OURS_RECIPE = [
    "--max_tokens_per_batch", "4096", "--warmup_steps", "400", "--noam_scale", "0.64",
    "--checkpointing_steps", "25", "--average_last_checkpoints", "4",
]  # fmt: skip


def save_marian_reference(tokenizer, folder: Path, seed: int) -> Path:
    """A fresh same-size MarianMTModel saved to `folder`, trained by train_mt.py via --model_name_or_path.

    The paper's architecture in Marian's terms: one shared, scaled embedding, ReLU, post-LN (Marian's only); the
    translator's generation settings (beam 4, forced </s>).
    """
    import torch
    from nanoformer.training.arguments import parse_config_overrides
    from transformers import MarianConfig, MarianMTModel

    base = {
        "vocab_size": len(tokenizer), "decoder_vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
        "decoder_start_token_id": tokenizer.bos_token_id, "forced_eos_token_id": tokenizer.eos_token_id,
        "share_encoder_decoder_embeddings": True, "scale_embedding": True, "activation_function": "relu",
    }  # fmt: skip
    torch.manual_seed(seed)
    model = MarianMTModel(MarianConfig(**{**base, **parse_config_overrides(SIZE, MarianConfig(**base))}))
    model.generation_config.update(
        num_beams=4, bad_words_ids=None, max_length=None, decoder_start_token_id=tokenizer.bos_token_id,
        forced_eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    model.save_pretrained(folder)
    return folder


def run(cmd: list[str], log: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, cwd=REPO)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--data_dir", default=str(REPO.parent / "shared" / "data" / "tatoeba-cmn-eng"), help="Tatoeba folder."
    )
    p.add_argument(
        "--output_dir", default=str(REPO / "bench" / "results" / "mt_quality"), help="Where runs and summary go."
    )
    p.add_argument("--minutes", type=float, default=15.0, help="Training-step time budget per model.")
    p.add_argument("--ours_extra", default="", help="Extra train_mt.py flags for ours (space-separated).")
    p.add_argument("--runs", default="ours,marian", help="Comma-separated runs: ours, ours_preln, marian.")
    p.add_argument("--seed", type=int, default=42, help="Seed of every run (init, dropout, data order), for replicates.")
    p.add_argument("--skip_train", action="store_true", help="Only score existing runs.")
    args = p.parse_args()

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    train_file, valid_file = Path(args.data_dir) / "train.jsonl", Path(args.data_dir) / "valid.jsonl"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    py = sys.executable
    tok_dir = out / "tokenizer"
    runs = {
        "ours": ["--config_overrides", SIZE + OURS_CONFIG, *OURS_RECIPE, *args.ours_extra.split()],
        "ours_preln": [
            "--config_overrides", SIZE + OURS_CONFIG + ",norm_first=true", *OURS_RECIPE, *args.ours_extra.split(),
        ],
        "marian": ["--model_name_or_path", str(out / "marian_init"), *MARIAN_RECIPE],
    }  # fmt: skip
    runs = {name: runs[name] for name in args.runs.split(",")}

    if not args.skip_train:
        sys.path.insert(0, str(REPO))
        from nanoformer.tokenization import train_bpe_tokenizer
        from nanoformer.tokenization.corpus import read_translation_pairs

        def texts():
            for source, target in read_translation_pairs(train_file, "en", "zh"):
                yield source
                yield target

        start = time.perf_counter()
        tokenizer = train_bpe_tokenizer(texts(), vocab_size=8000)
        tokenizer.save_pretrained(tok_dir)
        print(f"tokenizer: {time.perf_counter() - start:.1f}s", flush=True)
        if "marian" in runs:
            save_marian_reference(tokenizer, out / "marian_init", args.seed)
        procs = {}
        for name, flags in runs.items():
            cmd = [
                py, str(REPO / "training" / "train_mt.py"), "--train_file", str(train_file),
                "--validation_file", str(valid_file), "--tokenizer_name", str(tok_dir), *COMMON,
                "--max_train_minutes", str(args.minutes), "--eval_steps", "1000000", "--checkpointing_steps", "1000000",
                "--max_eval_samples", "100", "--num_beams", "1", "--logging_steps", "20", "--seed", str(args.seed),
                "--output_dir", str(out / name), "--overwrite_output_dir", *flags,  # last: a run's flags win
            ]  # fmt: skip
            print(" ".join(cmd), flush=True)
            procs[name] = run(cmd, out / f"{name}.train.log", env)
        # The machine is shared: record its load while the runs train (both see the same contention).
        loads = []
        while any(proc.poll() is None for proc in procs.values()):
            loads.append(os.getloadavg()[0])
            time.sleep(30)
        (out / "load_average.json").write_text(json.dumps(loads))
        for name, proc in procs.items():
            if proc.wait() != 0:
                raise SystemExit(f"{name} training failed, see {out / f'{name}.train.log'}")

    # Score: both models at once (one thread each), greedy then beam 4.
    for beams in (1, 4):
        procs = {}
        for name in runs:
            cmd = [
                py, "-m", "nanoformer.training.score_mt", "--model_dir", str(out / name), "--test_file", str(valid_file),
                "--num_beams", str(beams), "--output_file", str(out / f"{name}.beam{beams}.json"), "--device", "cpu",
            ]  # fmt: skip
            procs[name] = run(cmd, out / f"{name}.score{beams}.log", env)
        for name, proc in procs.items():
            if proc.wait() != 0:
                raise SystemExit(f"{name} scoring failed, see {out / f'{name}.score{beams}.log'}")

    summary = summarize(out, runs, valid_file)
    if (out / "load_average.json").is_file():
        loads = json.loads((out / "load_average.json").read_text())
        summary["machine"] = {"cpus": os.cpu_count(), "load_average_1min_mean": sum(loads) / max(1, len(loads))}
    (out / "summary.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    print(table(summary))


def summarize(out: Path, runs: dict, valid_file: Path) -> dict:
    import opencc
    from nanoformer.training.mt_evaluation import compute_bleu

    t2s = opencc.OpenCC("t2s").convert
    refs = [
        json.loads(line)["translation"]["zh"]
        for line in valid_file.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    summary = {}
    for name in runs:
        train = json.loads((out / name / "all_results.json").read_text())
        row = {
            "steps": train["step"],
            "train_step_seconds": train["train_step_seconds"],
            "train_tokens_per_second": train["train_tokens_per_second"],
            "data_wait_fraction": train["data_wait_fraction"],
            "data_wait_seconds": train["data_wait_seconds"],
            "compute_seconds": train["compute_seconds"],
            "train_target_tokens": train["train_target_tokens"],
            "recipe": " ".join(runs[name]),
            "final_model": train.get("final_model", "last"),
            "final_model_steps": train.get("final_model_steps"),
        }
        for beams in (1, 4):
            scored = json.loads((out / f"{name}.beam{beams}.json").read_text())
            hyps = scored["hypotheses"]
            row[f"bleu_beam{beams}_raw"] = scored["bleu"]
            row[f"chrf_beam{beams}_raw"] = scored["chrf"]
            row[f"bleu_beam{beams}_simplified"] = compute_bleu(
                [t2s(h) for h in hyps], [t2s(r) for r in refs[: len(hyps)]]
            )["score"]
            row[f"decode_beam{beams}_seconds"] = scored["translate_seconds"]
            row["bleu_signature"] = scored["bleu_signature"]
        summary[name] = row
    return summary


def table(summary: dict) -> str:
    cols = [
        ("steps", "{:.0f}"), ("train_tokens_per_second", "{:.0f}"), ("data_wait_fraction", "{:.2%}"),
        ("bleu_beam1_raw", "{:.2f}"), ("bleu_beam4_raw", "{:.2f}"),
        ("bleu_beam1_simplified", "{:.2f}"), ("bleu_beam4_simplified", "{:.2f}"), ("chrf_beam4_raw", "{:.2f}"),
    ]  # fmt: skip
    lines = ["| model | " + " | ".join(c for c, _ in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, row in summary.items():
        if name == "machine":
            continue
        lines.append(f"| {name} | " + " | ".join(fmt.format(row[c]) for c, fmt in cols) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

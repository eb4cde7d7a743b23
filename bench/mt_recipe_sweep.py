"""Recipe sweep for the small CPU translator at a fixed compute budget (issue: translation quality per compute).

Every run trains `TranslatorForConditionalGeneration` at the same size (d_model 256, 4 heads, ffn 1024, 3+3 layers)
with the same shared 8k BPE (trained once on Tatoeba train) for the same number of updates of the same token
batches (``--max_train_steps``, default 600, ``--max_tokens_per_batch 4096``) with ``training/train_mt.py``; only
the recipe differs (schedule, peak lr, warmup, dropout, label smoothing, pre/post-LN). Each final model is then
scored with ``score_mt`` on all 1000 Tatoeba-valid pairs (beam 4, raw references), and averages of the last N
checkpoints (spaced ``--checkpointing_steps`` apart) are scored too. Compute is counted in updates, not seconds, so
runs may share the machine; speed figures come from ``bench/mt_quality_run.py``, not from here.

    python bench/mt_recipe_sweep.py --runs paper,paper_dropout0 --output_dir bench/results/mt_sweep

Results: ``OUTPUT_DIR/RUN/sweep_result.json`` per run and a Markdown table on stdout (``--table`` prints it
for the runs already done).
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
# The paper's recipe at this size (peak lr 1e-3 = noam_scale 0.32 at warmup 400, d_model 256).
PAPER = ["--lr_scheduler_type", "noam", "--warmup_steps", "400", "--noam_scale", "0.32", "--label_smoothing", "0.1"]


def cosine(peak: float, warmup: int) -> list[str]:
    """Warmup to `peak`, cosine decay to peak/10 at the last update (nanoGPT's schedule)."""
    return ["--lr_scheduler_type", "cosine", "--learning_rate", str(peak), "--warmup_steps", str(warmup)]


def noam(warmup: int, scale: float, label_smoothing: float = 0.1) -> list[str]:
    """The paper's schedule; peak lr = scale * (256 * warmup)^-0.5 (0.32 at warmup 400 = 1e-3)."""
    return ["--lr_scheduler_type", "noam", "--warmup_steps", str(warmup), "--noam_scale", str(scale),
            "--label_smoothing", str(label_smoothing)]  # fmt: skip


# name -> (config overrides added to SIZE, trainer flags). Recipe knobs only: size, vocab and batches stay fixed.
RUNS: dict[str, tuple[str, list[str]]] = {
    "paper": ("", PAPER),
    "paper_dropout0": ("dropout=0.0", PAPER),
    "noam_w200_dropout0": ("dropout=0.0", noam(200, 0.32)),
    "noam_w400_peak2e-3_dropout0": ("dropout=0.0", noam(400, 0.64)),
    "noam_w400_peak2e-3_dropout0_preln": ("dropout=0.0,norm_first=true", noam(400, 0.64)),
    "noam_w400_peak3e-3_dropout0": ("dropout=0.0", noam(400, 0.96)),
    "noam_w400_peak2e-3_dropout0_ls0": ("dropout=0.0", noam(400, 0.64, label_smoothing=0.0)),
    "noam_w400_peak2e-3_dropout0.1": ("dropout=0.1", noam(400, 0.64)),
    "cos1e-3_w100_dropout0": ("dropout=0.0", [*cosine(1e-3, 100), "--label_smoothing", "0.1"]),
    "cos2e-3_w100_dropout0": ("dropout=0.0", [*cosine(2e-3, 100), "--label_smoothing", "0.1"]),
    "cos2e-3_w100_dropout0_preln": ("dropout=0.0,norm_first=true", [*cosine(2e-3, 100), "--label_smoothing", "0.1"]),
    "cos1e-3_w100_dropout0.05": ("dropout=0.05", [*cosine(1e-3, 100), "--label_smoothing", "0.1"]),
    "cos1e-3_w100_dropout0_ls0": ("dropout=0.0", [*cosine(1e-3, 100), "--label_smoothing", "0.0"]),
}


def train_command(name: str, args: argparse.Namespace, tok_dir: Path, out: Path) -> list[str]:
    overrides, flags = RUNS[name]
    config = SIZE + ("," + overrides if overrides else "")
    data = Path(args.data_dir)
    return [
        sys.executable, str(REPO / "training" / "train_mt.py"),
        "--train_file", str(data / "train.jsonl"), "--validation_file", str(data / "valid.jsonl"),
        "--tokenizer_name", str(tok_dir), "--config_overrides", config, *flags,
        "--max_source_length", "128", "--max_target_length", "128", "--shuffle_buffer_size", "30000",
        "--max_tokens_per_batch", "4096", "--max_train_steps", str(args.max_train_steps),
        "--checkpointing_steps", str(args.checkpointing_steps), "--eval_steps", "1000000",
        "--max_eval_samples", "100", "--num_beams", "1", "--logging_steps", "50", "--seed", str(args.seed),
        "--output_dir", str(out / name),
    ]  # fmt: skip


def score(model_dir: Path, valid_file: Path, output_file: Path, env: dict) -> dict:
    cmd = [
        sys.executable, "-m", "nanoformer.training.score_mt", "--model_dir", str(model_dir),
        "--test_file", str(valid_file), "--num_beams", "4", "--output_file", str(output_file), "--device", "cpu",
    ]  # fmt: skip
    subprocess.run(cmd, check=True, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    scored = json.loads(output_file.read_text())
    return {"bleu": scored["bleu"], "chrf": scored["chrf"], "signature": scored["bleu_signature"]}


def averaged_scores(run_dir: Path, valid_file: Path, env: dict, specs: list[str]) -> dict:
    """BLEU of the average of the last N checkpoints spaced K updates apart, for each "N@K" in `specs` (plain "N":
    every checkpoint); an error line instead when the run has too few checkpoints."""
    results = {}
    for spec in specs:
        n, _, every = spec.partition("@")
        folder = run_dir / (f"average_last_{n}" + (f"_every_{every}" if every else ""))
        cmd = [
            sys.executable, "-m", "nanoformer.training.average_checkpoints", "--last", n, str(run_dir),
            "--output", str(folder), *(["--every", every] if every else []),
        ]  # fmt: skip
        done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
        if done.returncode != 0:
            results[spec] = {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
            continue
        results[spec] = score(folder, valid_file, folder.with_name(folder.name + ".beam4.json"), env)
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data_dir", default=str(REPO.parent / "shared" / "data" / "tatoeba-cmn-eng"))
    p.add_argument("--output_dir", default=str(REPO / "bench" / "results" / "mt_sweep"))
    p.add_argument("--runs", default=",".join(RUNS), help=f"Comma-separated runs among: {', '.join(RUNS)}.")
    p.add_argument("--max_train_steps", type=int, default=600)
    p.add_argument("--checkpointing_steps", type=int, default=50, help="Spacing of the checkpoints averaged.")
    p.add_argument(
        "--averages",
        default="2,3,5",
        help="Averages scored, as N (the last N checkpoints) or N@K (the last N spaced K updates apart), comma-separated.",
    )
    p.add_argument("--rescore", action="store_true", help="Score --averages again for finished runs (no training).")
    p.add_argument("--parallel", type=int, default=2, help="Runs trained at once (one thread each).")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--table", action="store_true", help="Only print the table of the finished runs.")
    args = p.parse_args()

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = [n for n in args.runs.split(",") if n]
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        raise SystemExit(f"unknown runs: {', '.join(unknown)} (known: {', '.join(RUNS)})")
    if args.table:
        print(table(out, names))
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env["TOKENIZERS_PARALLELISM"] = "false"
    valid_file = Path(args.data_dir) / "valid.jsonl"
    tok_dir = out / "tokenizer"
    if not (tok_dir / "tokenizer.json").is_file():
        subprocess.run(
            [sys.executable, "-m", "nanoformer.tokenization", "train", "--train_file",
             str(Path(args.data_dir) / "train.jsonl"), "--vocab_size", "8000", "--output_dir", str(tok_dir)],
            check=True, env=env, cwd=REPO,
        )  # fmt: skip
    if args.rescore:
        for name in names:
            path = out / name / "sweep_result.json"
            if path.is_file():
                result = json.loads(path.read_text())
                result["averaged"].update(averaged_scores(out / name, valid_file, env, args.averages.split(",")))
                path.write_text(json.dumps(result, indent=1) + "\n")
        print(table(out, names))
        return
    pending = [n for n in names if not (out / n / "sweep_result.json").is_file()]
    running: dict[str, tuple[subprocess.Popen, float]] = {}
    while pending or running:
        while pending and len(running) < args.parallel:
            name = pending.pop(0)
            cmd = train_command(name, args, tok_dir, out)
            print(" ".join(cmd), flush=True)
            log = (out / f"{name}.train.log").open("w")
            running[name] = (
                subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO),
                time.time(),
            )
        time.sleep(10)
        for name, (proc, started) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[name]
            if proc.returncode != 0:
                print(f"{name}: training failed, see {out / f'{name}.train.log'}", flush=True)
                continue
            run_dir = out / name
            result = {
                "command": " ".join(train_command(name, args, tok_dir, out)),
                "train_wall_seconds": time.time() - started,
                "all_results": json.loads((run_dir / "all_results.json").read_text()),
                "final": score(run_dir, valid_file, run_dir / "final.beam4.json", env),
            }
            result["averaged"] = averaged_scores(run_dir, valid_file, env, args.averages.split(","))
            (run_dir / "sweep_result.json").write_text(json.dumps(result, indent=1) + "\n")
            print(f"{name}: final beam-4 BLEU {result['final']['bleu']:.2f}", flush=True)
    print(table(out, names))


def table(out: Path, names: list[str]) -> str:
    results = {
        n: json.loads((out / n / "sweep_result.json").read_text())
        for n in names
        if (out / n / "sweep_result.json").is_file()
    }
    specs = sorted(
        {spec for r in results.values() for spec in r["averaged"]},
        key=lambda s: (s.partition("@")[2], int(s.partition("@")[0])),
    )
    heads = [f"avg last {s.replace('@', ' every ')}" for s in specs]
    lines = ["| run | updates | valid NLL (100 pairs) | beam-4 BLEU final | " + " | ".join(heads) + " | recipe |"]
    lines.append("|---" * (5 + len(specs)) + "|")
    for name, r in results.items():
        cells = [r["averaged"].get(s, {}).get("bleu") for s in specs]
        cells = [f"{c:.2f}" if c is not None else "-" for c in cells]
        overrides, flags = RUNS[name]
        lines.append(
            f"| {name} | {r['all_results']['step']} | {r['all_results'].get('eval_loss', float('nan')):.3f} | "
            f"{r['final']['bleu']:.2f} | {' | '.join(cells)} | `{overrides} {' '.join(flags)}` |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()

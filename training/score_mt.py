"""Score a saved translation model on a test set, or translate stdin to stdout (fairseq-generate / -interactive).

Test set → sacreBLEU (``zh`` tokenizer, with signature), chrF and the hypotheses::

    python -m nanoformer.training.score_mt --model_dir out/tatoeba \\
        --test_file ../shared/data/tatoeba-cmn-eng/valid.jsonl --num_beams 4 --output_file out/tatoeba/valid.json

writes the scores and hypotheses to ``--output_file`` (JSON) and the hypotheses, one per line, to
``--hypotheses_file`` (default: the output file with ``.hyp.txt``). ``--zh_script simplified|traditional`` converts
hypotheses *and* references to one Chinese script before scoring (OpenCC), so script mismatches are not counted as
translation errors.

Raw text → translations, in batches, as lines arrive::

    echo "The weather is nice today." | python -m nanoformer.training.score_mt --model_dir out/tatoeba

Defaults come from the model folder's run when it recorded them (``all_results.json`` of train_mt.py, or of the run
an averaged folder was made from): ``--zh_script`` and ``--num_beams``; otherwise ``as-is`` and the model's
``generation_config.json``. The command line wins. No line loses the run: sources longer than the model's position
table (or ``--max_source_length``) are truncated, counted and reported, and decoding stops where the table ends
(the translator's length rule, `nanoformer.modeling.encode_sources` / `decoding_budget`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import torch
from nanoformer.training.arguments import CliParser, UsageError, positive_int, run_cli
from nanoformer.training.common import missing_model_folder
from nanoformer.training.data import DataSourceError, malformed_count, open_translation_source, read_pairs
from nanoformer.training.mt_evaluation import (
    ZH_SCRIPTS,
    compute_bleu,
    position_limit,
    translate,
    zh_script_converter,
)
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = CliParser(
        prog="score_mt",  # as run_cli names it: every error line starts the same way
        description="Score a saved translation model on a test set, or translate stdin to stdout.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--model_dir", required=True, help="A folder written by train_mt.py (model + tokenizer).")
    p.add_argument("--test_file", default=None, help="Test pairs (.jsonl/.tsv/.csv). Without it, translate stdin.")
    p.add_argument("--source_lang", default="en", help="Source language key in the test file.")
    p.add_argument("--target_lang", default="zh", help="Target language key in the test file.")
    p.add_argument(
        "--num_beams",
        type=positive_int,
        default=None,
        help="Beam size (1 = greedy); None = the run's (all_results.json), else the model's generation config.",
    )
    p.add_argument("--batch_size", type=positive_int, default=64, help="Sentences translated per batch.")
    p.add_argument("--max_samples", type=positive_int, default=None, help="Score only the first N test pairs.")
    p.add_argument(
        "--max_source_length",
        type=positive_int,
        default=None,
        help="Truncate sources to N tokens; None = the model's max_position_embeddings.",
    )
    p.add_argument(
        "--zh_script",
        default=None,
        choices=ZH_SCRIPTS,
        help="Convert hypotheses and references to one Chinese script before scoring; None = the run's "
        "(all_results.json), else as-is.",
    )
    p.add_argument(
        "--output_file",
        default=None,
        help="JSON file for scores and hypotheses; None = MODEL_DIR/score_<test name>_beam<N>.json.",
    )
    p.add_argument(
        "--hypotheses_file", default=None, help="Hypotheses, one per line; None = the output file with .hyp.txt."
    )
    p.add_argument("--device", default=None, help="torch device; None = cuda if available, else cpu.")
    args = p.parse_args(argv)
    if missing_model_folder(args.model_dir):
        p.error(f"--model_dir {args.model_dir}: folder not found")
    if args.test_file and not Path(args.test_file).is_file():
        p.error(f"--test_file {args.test_file}: file not found")
    for flag in ("output_file", "hypotheses_file"):
        path = getattr(args, flag)
        probe = next((d for d in Path(path).resolve().parents if d.exists()), None) if path else None
        if probe is not None and not os.access(probe, os.W_OK):
            p.error(f"--{flag} {path}: {probe} is not writable")
    return args


def load(model_dir: str, device: str | None):
    """The model (eval mode, on `device`: default cuda if available) and tokenizer of `model_dir`; a folder or Hub
    id that does not hold a translation model is a one-line `UsageError`."""
    import nanoformer.modeling  # noqa: F401 - registers the translator with the Auto classes

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    where = "" if Path(model_dir).expanduser().is_dir() else " (no such folder; tried it as a Hub id)"
    try:
        model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).to(device).eval()
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except (OSError, ValueError, KeyError, ImportError) as error:  # what HF raises for something that is no model
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UsageError(f"--model_dir {model_dir}: cannot load a translation model{where}: {first}") from None
    return model, tokenizer, device


def run_record(model_dir: str) -> dict:
    """What the model folder's training run recorded (``all_results.json``), or {}.

    An averaged folder (average_checkpoints) has none of its own: the run it came from is the one named as
    ``config_from`` in its ``averaged_checkpoints.json``.
    """
    folder = Path(model_dir).expanduser()
    candidates = [folder / "all_results.json"]
    try:
        averaged = json.loads((folder / "averaged_checkpoints.json").read_text(encoding="utf-8"))
        candidates.append(Path(averaged["config_from"]) / "all_results.json")
    except (OSError, ValueError, KeyError, TypeError):
        pass
    for path in candidates:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict):
            return record
    return {}


def resolve_defaults(args: argparse.Namespace) -> dict[str, str]:
    """Fill `--zh_script` and `--num_beams` left unset from the run's record; returns where each value came from
    ("command line", "run" or "default"). `num_beams` may stay None: the model's generation config decides."""
    record = run_record(args.model_dir)
    sources = {}
    for flag, default in (("zh_script", "as-is"), ("num_beams", None)):
        recorded = record.get(flag)
        valid = recorded in ZH_SCRIPTS if flag == "zh_script" else isinstance(recorded, int) and recorded > 0
        if getattr(args, flag) is not None:
            sources[flag] = "command line"
        elif valid:
            setattr(args, flag, recorded)
            sources[flag] = "run"
        else:
            setattr(args, flag, default)
            sources[flag] = "default"
    return sources


def _max_source_length(args, model) -> int | None:
    """--max_source_length, never more than the position table; None: the position table."""
    limits = [n for n in (args.max_source_length, position_limit(model)) if n is not None]
    return min(limits) if limits else None


def _report_truncated(counters: Counter, limit: int | None) -> None:
    if counters["truncated_sources"]:
        print(
            f"score_mt: {counters['truncated_sources']} source line(s) longer than {limit} tokens were truncated "
            "to fit the model",
            file=sys.stderr,
        )


def score(args: argparse.Namespace) -> dict:
    """Translate the test set and write scores + hypotheses; returns the scores."""
    counters: Counter = Counter()
    dataset, parser = open_translation_source(
        data_file=args.test_file,
        dataset_name=None,
        dataset_config_name=None,
        split="test",
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        flag="--test_file",
    )
    pairs = read_pairs(dataset, parser, args.max_samples, counters)
    if not pairs:
        raise DataSourceError(f"--test_file {args.test_file}: no usable pairs")
    model, tokenizer, device = load(args.model_dir, args.device)
    defaults = resolve_defaults(args)
    num_beams = args.num_beams or model.generation_config.num_beams or 1
    max_source_length = _max_source_length(args, model)
    cut: Counter = Counter()
    start = time.perf_counter()
    hypotheses = translate(
        model,
        tokenizer,
        [s for s, _ in pairs],
        num_beams=num_beams,
        batch_size=args.batch_size,
        max_source_length=max_source_length,
        device=device,
        counters=cut,
    )
    seconds = time.perf_counter() - start
    _report_truncated(cut, max_source_length)
    convert = zh_script_converter(args.zh_script)
    scored_hyps = [convert(h) for h in hypotheses] if convert else hypotheses
    references = [convert(t) for _, t in pairs] if convert else [t for _, t in pairs]
    metrics = compute_bleu(scored_hyps, references, chrf=True)
    result = {
        "bleu": metrics["score"],
        "bleu_signature": metrics["signature"],
        "chrf": metrics["chrf"],
        "chrf_signature": metrics["chrf_signature"],
        "model_dir": str(args.model_dir),
        "test_file": str(args.test_file),
        "num_samples": len(pairs),
        "skipped_rows": malformed_count({f"malformed: {k}": v for k, v in counters.items()}),
        "num_beams": num_beams,
        "zh_script": args.zh_script,
        "defaults_from": defaults,
        "max_source_length": max_source_length,
        "truncated_sources": cut["truncated_sources"],
        "translate_seconds": seconds,
        "sentences_per_second": len(pairs) / max(seconds, 1e-9),
        "hypotheses": scored_hyps,
    }
    output = Path(args.output_file or Path(args.model_dir) / f"score_{Path(args.test_file).stem}_beam{num_beams}.json")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    hyp_file = Path(args.hypotheses_file or output.with_suffix(".hyp.txt"))
    hyp_file.write_text("".join(h.replace("\n", " ") + "\n" for h in scored_hyps), encoding="utf-8")
    print(
        f"BLEU = {result['bleu']:.2f} ({result['bleu_signature']}) chrF = {result['chrf']:.2f} "
        f"on {len(pairs)} pairs, beam {num_beams}, zh_script {args.zh_script} ({defaults['zh_script']}), "
        f"{cut['truncated_sources']} source(s) truncated → {output}",
        file=sys.stderr,
    )
    return result


def interactive(args: argparse.Namespace) -> None:
    """Translate stdin to stdout, `--batch_size` lines at a time (flushed after each batch), like fairseq-interactive."""
    model, tokenizer, device = load(args.model_dir, args.device)
    resolve_defaults(args)
    max_len = _max_source_length(args, model)
    cut: Counter = Counter()

    def flush(lines: list[str]) -> None:
        # Blank lines stay blank (and keep line alignment); the rest is translated together.
        texts = [line for line in lines if line.strip()]
        outputs = iter(
            translate(
                model,
                tokenizer,
                texts,
                num_beams=args.num_beams,
                batch_size=args.batch_size,
                max_source_length=max_len,
                device=device,
                counters=cut,
            )
        )
        sys.stdout.write("".join((next(outputs) if line.strip() else "") + "\n" for line in lines))
        sys.stdout.flush()

    buffer: list[str] = []
    for line in sys.stdin:
        buffer.append(line.rstrip("\r\n"))
        if len(buffer) >= args.batch_size:
            flush(buffer)
            buffer = []
    if buffer:
        flush(buffer)
    _report_truncated(cut, max_len)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)

    def run() -> None:
        if args.test_file:
            score(args)
        else:
            interactive(args)

    run_cli(run, "score_mt")


if __name__ == "__main__":
    main()

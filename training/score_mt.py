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
from nanoformer.training.common import looks_local
from nanoformer.training.data import DataSourceError, malformed_count, open_translation_source, read_pairs
from nanoformer.training.mt_evaluation import ZH_SCRIPTS, compute_bleu, translate, zh_script_converter
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = CliParser(
        description="Score a saved translation model on a test set, or translate stdin to stdout.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--model_dir", required=True, help="A folder written by train_mt.py (model + tokenizer).")
    p.add_argument("--test_file", default=None, help="Test pairs (.jsonl/.tsv/.csv). Without it, translate stdin.")
    p.add_argument("--source_lang", default="en", help="Source language key in the test file.")
    p.add_argument("--target_lang", default="zh", help="Target language key in the test file.")
    p.add_argument("--num_beams", type=positive_int, default=4, help="Beam size (1 = greedy).")
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
        default="as-is",
        choices=ZH_SCRIPTS,
        help="Convert hypotheses and references to one Chinese script before scoring.",
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
    if looks_local(args.model_dir) and not Path(args.model_dir).is_dir():
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
    import nanoformer.modeling  # noqa: F401 - registers the translator with the Auto classes

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).to(device).eval()
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except (OSError, ValueError) as error:
        raise UsageError(f"--model_dir {model_dir}: cannot load a translation model: {str(error).strip().splitlines()[0]}") from None
    return model, tokenizer, device


def _max_source_length(args, model) -> int:
    return args.max_source_length or getattr(model.config, "max_position_embeddings", 1024)


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
    start = time.perf_counter()
    hypotheses = translate(
        model,
        tokenizer,
        [s for s, _ in pairs],
        num_beams=args.num_beams,
        batch_size=args.batch_size,
        max_source_length=_max_source_length(args, model),
        device=device,
    )
    seconds = time.perf_counter() - start
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
        "num_beams": args.num_beams,
        "zh_script": args.zh_script,
        "translate_seconds": seconds,
        "sentences_per_second": len(pairs) / max(seconds, 1e-9),
        "hypotheses": scored_hyps,
    }
    output = Path(
        args.output_file or Path(args.model_dir) / f"score_{Path(args.test_file).stem}_beam{args.num_beams}.json"
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    hyp_file = Path(args.hypotheses_file or output.with_suffix(".hyp.txt"))
    hyp_file.write_text("".join(h.replace("\n", " ") + "\n" for h in scored_hyps), encoding="utf-8")
    print(
        f"BLEU = {result['bleu']:.2f} ({result['bleu_signature']}) chrF = {result['chrf']:.2f} "
        f"on {len(pairs)} pairs, beam {args.num_beams}, zh_script {args.zh_script} → {output}",
        file=sys.stderr,
    )
    return result


def interactive(args: argparse.Namespace) -> None:
    """Translate stdin to stdout, `--batch_size` lines at a time (flushed after each batch), like fairseq-interactive."""
    model, tokenizer, device = load(args.model_dir, args.device)
    max_len = _max_source_length(args, model)

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

"""Train and save a tokenizer from the command line.

    # shared EN–ZH BPE from local files (JSONL {"translation": {"en": ..., "zh": ...}}, TSV/CSV, or plain .txt lines)
    python -m nanoformer.tokenization train --train_file ../shared/data/tatoeba-cmn-eng/train.jsonl \\
        --vocab_size 8000 --output_dir tok-8k
    # ... or streamed from the Hub
    python -m nanoformer.tokenization train --dataset_name wmt/wmt19 --dataset_config_name zh-en \\
        --max_train_samples 2000000 --vocab_size 37000 --output_dir tok-37k
    # character tokenizer (nanoGPT shakespeare_char)
    python -m nanoformer.tokenization char --train_file ../shared/data/tinyshakespeare/input.txt --output_dir tok-char

The output folder loads with `AutoTokenizer.from_pretrained(output_dir)`.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

from nanoformer.training.arguments import CliParser, positive_int, run_cli
from tqdm.auto import tqdm

from .bpe import train_bpe_tokenizer
from .char import build_char_tokenizer
from .corpus import (
    DELIMITED_SUFFIXES,
    JSON_SUFFIXES,
    CorpusStats,
    read_hub_translation_pairs,
    read_text,
    read_text_lines,
    read_translation_pairs,
)

logger = logging.getLogger("nanoformer.tokenization")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = CliParser(prog="python -m nanoformer.tokenization", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train the shared byte-level BPE on both sides of a parallel corpus")
    data = train.add_mutually_exclusive_group(required=True)
    data.add_argument("--train_file", nargs="+", help="local .jsonl/.json, .tsv/.csv (pairs) or other (text lines)")
    data.add_argument("--dataset_name", help="a Hub dataset with a 'translation' column, streamed (e.g. wmt/wmt19)")
    train.add_argument("--dataset_config_name", help="the Hub dataset config (e.g. zh-en)")
    train.add_argument("--dataset_split", default="train")
    train.add_argument("--source_lang", default="en")
    train.add_argument("--target_lang", default="zh")
    train.add_argument("--vocab_size", type=positive_int, default=37000, help="exact size, 4 specials included (default: 37000)")
    train.add_argument("--max_train_samples", type=positive_int, help="read at most this many pairs (or lines)")
    train.add_argument("--seed", type=int, default=42, help="a Hub split's Parquet files are read in an order drawn from "
                       "it, the one train_mt.py --seed starts with (default: 42, train_mt's)")
    train.add_argument("--no_shuffle_shards", dest="shuffle_shards", action="store_false",
                       help="read a Hub split's files in file order")
    train.add_argument("--model_max_length", type=positive_int, default=1024, help="length truncation=True cuts to")
    train.add_argument("--output_dir", required=True)

    char = commands.add_parser("char", help="build a character tokenizer from a text file (one id per character)")
    char.add_argument("--train_file", required=True)
    char.add_argument("--model_max_length", type=positive_int, default=1024, help="the model's block size")
    char.add_argument("--output_dir", required=True)
    args = parser.parse_args(argv)
    out = Path(args.output_dir).resolve()
    probe = next((d for d in [out, *out.parents] if d.exists()), None)
    if probe is not None and (not probe.is_dir() or not os.access(probe, os.W_OK)):  # before any training
        parser.error(f"--output_dir {args.output_dir}: {probe} is not a writable folder")
    return args


def _training_texts(args: argparse.Namespace, stats: CorpusStats) -> Iterator[str]:
    """Both sides of every pair (or every line of a text file), as one stream; errors surface before training."""
    if args.dataset_name:
        sources = [
            read_hub_translation_pairs(
                args.dataset_name,
                args.dataset_config_name,
                args.source_lang,
                args.target_lang,
                split=args.dataset_split,
                stats=stats,
                shard_seed=args.seed if args.shuffle_shards else None,
            )
        ]
    else:
        sources = []
        for path in args.train_file:  # open every file now, so a missing one fails before training starts
            is_pairs = Path(path).suffix.lower() in JSON_SUFFIXES or Path(path).suffix.lower() in DELIMITED_SUFFIXES
            if is_pairs:
                sources.append(read_translation_pairs(path, args.source_lang, args.target_lang, stats=stats))
            else:
                sources.append((line,) for line in read_text_lines(path, stats=stats))
    rows = itertools.islice(itertools.chain.from_iterable(sources), args.max_train_samples)
    try:
        for row in tqdm(rows, desc="reading", unit=" rows", total=args.max_train_samples):
            yield from row
    finally:  # a source stopped midway (--max_train_samples) closes its reader now, not at interpreter exit
        for source in sources:
            getattr(source, "close", lambda: None)()


def run(args: argparse.Namespace) -> None:
    if args.command == "train":
        stats = CorpusStats()
        texts = _training_texts(args, stats)
        start = time.perf_counter()
        tokenizer = train_bpe_tokenizer(texts, args.vocab_size, model_max_length=args.model_max_length)
        elapsed = time.perf_counter() - start
        # Malformed rows are skipped, never silently: the count (by reason) is a warning.
        logger.log(logging.WARNING if stats.num_skipped else logging.INFO, "read %s", stats)
        logger.info("trained a %d-token BPE in %.1fs", len(tokenizer), elapsed)
    else:
        stats = CorpusStats()
        text = read_text(args.train_file, stats=stats)
        if stats.num_skipped:
            logger.warning("skipped %d lines that are not valid UTF-8", stats.num_skipped)
        tokenizer = build_char_tokenizer(text, model_max_length=args.model_max_length)
        logger.info("built a character tokenizer: %d characters + 2 specials", len(tokenizer) - 2)
    tokenizer.save_pretrained(args.output_dir)
    logger.info("saved to %s", args.output_dir)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    # One line and exit status 2 for a missing file, a corpus too small for the vocabulary, an unreachable Hub.
    run_cli(lambda: run(args), "python -m nanoformer.tokenization", errors=(FileNotFoundError, ValueError, ConnectionError))


if __name__ == "__main__":
    main()

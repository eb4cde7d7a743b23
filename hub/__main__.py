"""Command line: `python -m nanoformer.hub {export,push} ...` (see `--help`)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from nanoformer.training.arguments import CliParser, cli_status


def _metric(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    try:
        if not sep or not name:
            raise ValueError
        return name, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=NUMBER, got {text!r}") from None


def _export(args: argparse.Namespace) -> None:
    from .export import check_output_dir, export_run

    check_output_dir(args.output_dir, args.overwrite, overwrite_hint="--overwrite")  # first, naming our own flag
    folder = export_run(
        args.checkpoint, args.output_dir, tokenizer_dir=args.tokenizer, metrics=dict(args.metric),
        datasets=args.dataset or None, sacrebleu_signature=args.sacrebleu_signature, figures=args.figure,
        repo_id=args.repo_id, overwrite=args.overwrite,
    )  # fmt: skip
    print(f"exported {args.checkpoint} to {folder}")


def _push(args: argparse.Namespace) -> None:
    from .push import push_to_hub

    commit = push_to_hub(args.folder, args.repo_id, private=args.private, token=args.token,
                         commit_message=args.commit_message)
    print(f"pushed {args.folder} to {args.repo_id}: {commit.commit_url}")


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m nanoformer.hub", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    export = sub.add_parser(
        "export", help="write a trained model as a self-contained Hub model repo, its card built from the run",
        description="Export a saved nanoformer model. When CHECKPOINT is a trainer's --output_dir (or an "
        "average_checkpoints output), the model card is built from what the run recorded: all_results.json (BLEU "
        "and its sacreBLEU signature, eval loss, perplexity, steps, speed), training_args.json (the recipe) and "
        "training_curves.png. --metric, --sacrebleu_signature, --dataset and --figure add to it or override it.",
    )  # fmt: skip
    export.add_argument("checkpoint", type=Path, help="a trainer's output folder, or any save_pretrained folder")
    export.add_argument("output_dir", type=Path)
    export.add_argument("--tokenizer", type=Path, help="tokenizer folder (default: the checkpoint)")
    export.add_argument("--metric", type=_metric, action="append", default=[], metavar="NAME=NUMBER",
                        help="add or override an evaluation result of the card (repeatable), e.g. bleu=21.3 for a "
                        "score measured after training")
    export.add_argument("--sacrebleu_signature", help="the sacreBLEU signature of the BLEU score (default: the run's)")
    export.add_argument("--dataset", action="append", help="Hub id of a training dataset (repeatable)")
    export.add_argument("--figure", type=Path, action="append", help="an image to show in the card (repeatable)")
    export.add_argument("--repo_id", help="Hub id for the card's usage snippet")
    export.add_argument("--overwrite", action="store_true", help="replace a previous export in OUTPUT_DIR")
    export.set_defaults(run=_export)

    push = sub.add_parser("push", help="upload an exported folder (HF_ENDPOINT, HF_TOKEN are honoured)")
    push.add_argument("folder", type=Path)
    push.add_argument("repo_id", help="e.g. your-username/nanoformer-en-zh")
    push.add_argument("--private", action="store_true")
    push.add_argument("--token", help="a Hugging Face token (default: HF_TOKEN or `hf auth login`)")
    push.add_argument("--commit_message", default="Upload nanoformer model")
    push.set_defaults(run=_push)

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for flag in ("checkpoint", "tokenizer", "folder"):
        path = getattr(args, flag, None)
        if path is not None and not path.is_dir():
            parser.error(f"{flag} {path}: folder not found")
    from .push import HubPushError

    # One line and exit status 2 for a bad folder, an existing export, a failed upload.
    return cli_status(lambda: args.run(args), parser.prog, errors=(HubPushError, OSError, ValueError))


if __name__ == "__main__":
    sys.exit(main())

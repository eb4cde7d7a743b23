"""What `train_mt.py` reads before it trains: the training source, the tokenizer (loaded, or trained on the first
training pairs), the validation set and the resumable, prefetched batch iterator of this process."""

from __future__ import annotations

from collections import Counter
from itertools import chain, islice
from pathlib import Path

import torch
from accelerate.logging import get_logger
from nanoformer.tokenization.corpus import RowParser, SplitFiles, closing_rows
from nanoformer.training.common import LoopState, resume
from nanoformer.training.data import (
    DataSourceError,
    PrefetchIterator,
    TranslationBatchStream,
    bucket_into_batches,
    malformed_count,
    open_translation_source,
    open_translation_split,
    pad_batch,
    read_pairs,
    shard_order,
)
from nanoformer.training.mt_evaluation import zh_script_converter
from transformers import AutoTokenizer

logger = get_logger(__name__)  # logs on the main process only
PREFETCH_BATCHES = 256


def open_train_source(args) -> tuple[SplitFiles, RowParser]:
    return open_translation_split(
        data_file=args.train_file,
        dataset_name=args.dataset_name,
        dataset_config_name=args.dataset_config_name,
        split="train",
        source_lang=args.source_lang,
        target_lang=args.target_lang,
    )


def load_or_train_tokenizer(args, accelerator, resuming: bool):
    """--tokenizer_name, else the model's, else one trained on the first training pairs of epoch 0's file order (saved
    in output_dir)."""
    name = args.tokenizer_name or args.model_name_or_path
    if name:
        try:
            return AutoTokenizer.from_pretrained(name, trust_remote_code=args.trust_remote_code)
        except (OSError, ValueError) as error:
            raise DataSourceError(
                f"cannot load the tokenizer of {name}: {str(error).strip().splitlines()[0]}"
            ) from None
    saved = Path(args.output_dir) / "tokenizer"
    if resuming and (saved / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(saved)  # the tokenizer the checkpoint was trained with
    if args.vocab_size is None:
        raise DataSourceError("no tokenizer: pass --tokenizer_name (a saved tokenizer) or --vocab_size (train one)")
    if accelerator.is_main_process:
        from nanoformer.tokenization import train_bpe_tokenizer

        train_files, parser = open_train_source(args)
        dataset = train_files.stream(epoch_shard_order(args, train_files, 0))  # the pairs epoch 0 starts with
        to_script = zh_script_converter(args.zh_script)

        def texts():
            with closing_rows(dataset) as rows:  # the reader is closed once enough pairs are read
                pairs = (p for p in map(parser, rows) if not isinstance(p, str))
                for source, target in islice(pairs, args.tokenizer_train_samples):
                    yield source
                    yield to_script(target) if to_script else target

        logger.info(f"Training a BPE tokenizer (vocab {args.vocab_size}) on up to {args.tokenizer_train_samples} pairs")
        train_bpe_tokenizer(texts(), vocab_size=args.vocab_size).save_pretrained(saved)
    accelerator.wait_for_everyone()
    return AutoTokenizer.from_pretrained(saved)


def load_validation(args, tokenizer, to_script) -> tuple[list[tuple[str, str]], list[dict[str, torch.Tensor]]]:
    """Up to --max_eval_samples validation pairs (targets in the --zh_script) and their loss batches; ([], [])
    when there is no validation set."""
    if args.validation_file:
        source = {"data_file": args.validation_file, "dataset_name": None}
    elif not args.train_file:
        source = {"data_file": None, "dataset_name": args.dataset_name}
    else:
        logger.warning("No validation data (pass --validation_file): no evaluation, no early stopping")
        return [], []
    dataset, parser = open_translation_source(
        **source,
        dataset_config_name=args.dataset_config_name,
        split="validation" if args.validation_file else args.validation_split_name,
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        flag="--validation_file",
    )
    counters: Counter = Counter()
    try:
        pairs = read_pairs(dataset, parser, args.max_eval_samples, counters)
    except Exception as error:
        raise DataSourceError(f"cannot read validation data: {str(error).splitlines()[0]}") from error
    if malformed_count({f"malformed: {k}": v for k, v in counters.items()}):
        logger.warning(f"validation data: skipped malformed rows {dict(counters)}")
    pairs = [(s, to_script(t) if to_script else t) for s, t in pairs]
    if not pairs:
        return [], []
    # Truncation by the tokenizer keeps </s> on overlong pairs (and spares the "longer than the model" warning).
    enc = tokenizer(
        [s for s, _ in pairs],
        text_target=[t for _, t in pairs],
        truncation=True,
        max_length=args.max_source_length,
        max_target_length=args.max_target_length,
    )
    ids = list(zip(enc["input_ids"], enc["labels"]))
    batches = [pad_batch(b, tokenizer.pad_token_id) for b in bucket_into_batches(ids, args.max_tokens_per_batch)]
    return pairs, batches


def epoch_shard_order(args, train_files: SplitFiles, epoch: int) -> list[int] | None:
    """The file order of `epoch` (`shard_order` of --seed; with --max_train_samples every epoch reads the first
    epoch's rows), or None (file order): --no_shuffle_shards, one file, or files that are not Parquet."""
    if not args.shuffle_shards or train_files.num_files < 2 or not train_files.reorderable:
        return None
    return shard_order(train_files.num_files, args.seed, 0 if args.max_train_samples else epoch)


def train_rows(args, train_files: SplitFiles, epoch: int):
    """The training rows of `epoch`, all processes together: the files in `epoch_shard_order`, --max_train_samples."""
    dataset = train_files.stream(epoch_shard_order(args, train_files, epoch))
    if args.max_train_samples:
        dataset = dataset.take(args.max_train_samples)  # rows of the file or Hub split (malformed ones included)
    return dataset


def process_rows(args, train_files: SplitFiles, epoch: int, rank: int, world_size: int):
    """The rows process `rank` of `world_size` streams in `epoch`: its part (``split_dataset_by_node``) of
    `train_rows`, whose file order is the same on every process, so the parts are disjoint and cover the epoch."""
    dataset = train_rows(args, train_files, epoch)
    order = epoch_shard_order(args, train_files, epoch)
    if order is not None and (epoch == 0 or not args.max_train_samples):
        every = " (every epoch: --max_train_samples)" if args.max_train_samples else ""
        logger.info(f"epoch {epoch}{every} reads the {len(order)} training files in the order {order}, drawn from "
                    f"--seed {args.seed} (--no_shuffle_shards: file order)")  # fmt: skip
    if world_size == 1:
        return dataset
    from datasets.distributed import split_dataset_by_node

    shards = dataset.num_shards
    dataset = split_dataset_by_node(dataset, rank=rank, world_size=world_size)
    if epoch == 0:
        if shards % world_size == 0:
            how = f"its own {dataset.num_shards} of the {shards} shards"
        else:  # datasets then reads every shard and keeps every world_size-th row
            how = f"every {world_size}th row of all {shards} shards (not divisible by the processes)"
        logger.info(f"process {rank} of {world_size} streams {how}", main_process_only=False)
    return dataset


def training_batches(args, accelerator, train_files: SplitFiles, parser, tokenizer, to_script, state: LoopState,
                     checkpoint):  # fmt: skip
    """The resumable batch stream of this process, restored from `checkpoint`, read ahead in a thread.

    Each epoch streams the training files in its `epoch_shard_order` (logged), this process's part of them. Returns
    the prefetching iterator (for its wait time and `close`) and an iterator of ``(batch, stream state)`` starting
    with the first batch: a source that fails on first read (offline Hub...) is a one-line error here.
    """
    if train_files.num_files > 1 and not train_files.reorderable and args.shuffle_shards:
        logger.warning(f"the {train_files.num_files} training files are not Parquet: read in file order every epoch")

    def rows_of_epoch(epoch: int):
        return process_rows(args, train_files, epoch, accelerator.process_index, accelerator.num_processes)

    stream = TranslationBatchStream(
        rows_of_epoch,
        parser,
        tokenizer,
        max_tokens=args.max_tokens_per_batch,
        max_source_length=args.max_source_length,
        max_target_length=args.max_target_length,
        overlong=args.overlong_pairs,
        shuffle_buffer_size=args.shuffle_buffer_size,
        seed=args.seed + accelerator.process_index,
        target_transform=to_script,
        epoch_order=lambda epoch: epoch_shard_order(args, train_files, epoch),
    )
    saved = resume(accelerator, checkpoint, state, stream)
    # The stream cuts half its shuffle buffer into batches at once, then refills that half (5,000 pairs by default,
    # ~2 s of tokenizing on one CPU thread) before it cuts again: a queue of 256 batches (~12 MB at 4096 tokens)
    # spans a refill at GPU step times. Measured with 20 ms steps on news pairs: 9.5% data wait with 8, 0.1% with 256.
    prefetch = PrefetchIterator(iter(stream), depth=PREFETCH_BATCHES)
    try:
        first = next(prefetch)
    except DataSourceError:
        raise
    except Exception as error:
        raise DataSourceError(
            f"cannot read training data from {args.train_file or args.dataset_name}: "
            f"{str(error).splitlines()[0] if str(error) else type(error).__name__} — pass local files with --train_file"
        ) from error
    return prefetch, chain([first], prefetch), saved

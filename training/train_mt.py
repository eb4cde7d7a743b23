"""Train the English→Chinese translator ("Attention Is All You Need") with 🤗 Accelerate on streaming data.

    accelerate launch training/train_mt.py --output_dir out/wmt19-en-zh --vocab_size 37000

streams WMT19 zh-en from the Hub and trains Transformer-base with the paper's recipe (Noam schedule, Adam
0.9/0.98/1e-9, label smoothing 0.1, ~4k-token batches). Offline, with local files and a small CPU config:

    accelerate launch --cpu training/train_mt.py \\
        --train_file ../shared/data/tatoeba-cmn-eng/train.jsonl \\
        --validation_file ../shared/data/tatoeba-cmn-eng/valid.jsonl \\
        --vocab_size 8000 --config_overrides "d_model=256,encoder_layers=3,decoder_layers=3,encoder_attention_heads=4,decoder_attention_heads=4,encoder_ffn_dim=1024,decoder_ffn_dim=1024" \\
        --warmup_steps 400 --max_train_minutes 15 --eval_steps 500 --output_dir out/tatoeba

Flags follow transformers' `run_translation_no_trainer.py`; precision and the number of processes come from
`accelerate launch` / `accelerate config`. Data pipeline and exact-resume semantics: see `mt_data.py`.
Checkpoints: `checkpointing.py` (``output_dir/step_N``, written atomically, ``--resume_from_checkpoint latest``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.logging import get_logger
from accelerate.utils import set_seed
from nanoformer.training.arguments import parse_config_overrides, positive_int
from nanoformer.training.checkpointing import load_checkpoint, resolve_checkpoint, save_checkpoint
from nanoformer.training.mt_data import (
    DataSourceError,
    PrefetchIterator,
    TranslationBatchStream,
    bucket_into_batches,
    malformed_count,
    open_translation_source,
    pad_batch,
    read_pairs,
)
from nanoformer.training.mt_evaluation import (
    ZH_SCRIPTS,
    compute_bleu,
    nll_sums,
    perplexity,
    translate,
    zh_script_converter,
)
from nanoformer.training.reporting import (
    accelerator_tracking_kwargs,
    plot_curves,
    tracker_config,
    write_all_results,
)
from nanoformer.training.schedules import get_cosine_with_warmup_schedule, get_noam_schedule
from tqdm.auto import tqdm
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

logger = get_logger(__name__)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    data = p.add_argument_group("data")
    data.add_argument(
        "--dataset_name", default="wmt/wmt19", help="Hub dataset id, streamed (ignored when --train_file is given)."
    )
    data.add_argument("--dataset_config_name", default="zh-en", help="Configuration of --dataset_name.")
    data.add_argument(
        "--train_file",
        default=None,
        help='Local training pairs: .jsonl ({"translation": {"en": ..., "zh": ...}} per line), .tsv or .csv. Takes precedence over --dataset_name.',
    )
    data.add_argument(
        "--validation_file",
        default=None,
        help="Local validation pairs (same formats). Default: the Hub dataset's validation split, or none when --train_file is given.",
    )
    data.add_argument(
        "--validation_split_name", default="validation", help="Split of --dataset_name used for validation."
    )
    data.add_argument("--source_lang", default="en", help="Source language key.")
    data.add_argument("--target_lang", default="zh", help="Target language key.")
    data.add_argument(
        "--zh_script",
        default="as-is",
        choices=ZH_SCRIPTS,
        help="Convert Chinese targets and references to one script with OpenCC (t2s/s2t) before training and scoring.",
    )
    data.add_argument(
        "--max_source_length",
        type=positive_int,
        default=256,
        help="Maximum source tokens (incl. </s>); longer pairs are handled by --overlong_pairs.",
    )
    data.add_argument(
        "--max_target_length",
        type=positive_int,
        default=256,
        help="Maximum target tokens (incl. </s>); also caps decoding length at evaluation.",
    )
    data.add_argument(
        "--overlong_pairs",
        default="truncate",
        choices=("truncate", "drop"),
        help="What to do with pairs longer than the maximum lengths (counted either way).",
    )
    data.add_argument(
        "--max_tokens_per_batch",
        type=positive_int,
        default=4096,
        help="Padded source + target tokens per batch and process (like fairseq --max-tokens); pairs of similar length are batched together.",
    )
    data.add_argument(
        "--shuffle_buffer_size",
        type=positive_int,
        default=10000,
        help="Pairs held in the shuffle/bucketing buffer. A local file sorted by length (e.g. Tatoeba) needs a buffer as large as the file to be shuffled fully.",
    )

    model = p.add_argument_group("model and tokenizer")
    model.add_argument(
        "--model_name_or_path", default=None, help="Start from a saved model folder instead of a fresh one."
    )
    model.add_argument(
        "--model_type",
        default="translator",
        choices=("translator", "marian"),
        help="Architecture of a fresh model (marian = transformers' MarianMTModel, as a reference).",
    )
    model.add_argument(
        "--config_overrides",
        default=None,
        help='Comma-separated config fields for a fresh model, e.g. "d_model=256,encoder_layers=3,decoder_layers=3".',
    )
    model.add_argument("--tokenizer_name", default=None, help="A saved tokenizer folder to reuse.")
    model.add_argument(
        "--vocab_size",
        type=positive_int,
        default=None,
        help="Train a shared BPE tokenizer of this size from the first --tokenizer_train_samples training pairs.",
    )
    model.add_argument(
        "--tokenizer_train_samples",
        type=positive_int,
        default=1_000_000,
        help="Training pairs streamed to train the tokenizer with --vocab_size.",
    )

    optim = p.add_argument_group("optimisation")
    optim.add_argument(
        "--lr_scheduler_type",
        default="noam",
        choices=("noam", "cosine"),
        help="noam: the paper's scale·d_model^-0.5·min(step^-0.5, step·warmup^-1.5); cosine: warmup to --learning_rate then cosine decay over --max_train_steps.",
    )
    optim.add_argument(
        "--noam_scale",
        type=float,
        default=1.0,
        help="Scale factor of the Noam schedule (peak lr = scale·(d_model·warmup_steps)^-0.5).",
    )
    optim.add_argument(
        "--learning_rate",
        type=float,
        default=5e-4,
        help="Peak learning rate of the cosine schedule (the Noam schedule sets its own).",
    )
    optim.add_argument("--warmup_steps", type=int, default=4000, help="Linear warmup steps.")
    optim.add_argument(
        "--label_smoothing",
        type=float,
        default=0.1,
        help="Label smoothing of the training loss (evaluation loss is plain NLL).",
    )
    optim.add_argument("--adam_beta1", type=float, default=0.9, help="Adam beta1.")
    optim.add_argument("--adam_beta2", type=float, default=0.98, help="Adam beta2.")
    optim.add_argument("--adam_epsilon", type=float, default=1e-9, help="Adam epsilon.")
    optim.add_argument("--weight_decay", type=float, default=0.0, help="Decoupled weight decay (AdamW when > 0).")
    optim.add_argument("--max_grad_norm", type=float, default=1.0, help="Gradient clipping norm (0 = no clipping).")
    optim.add_argument(
        "--gradient_accumulation_steps", type=positive_int, default=1, help="Batches accumulated per optimizer step."
    )
    optim.add_argument(
        "--max_train_steps",
        type=positive_int,
        default=100_000,
        help="Optimizer steps to train for (the stream repeats over epochs).",
    )
    optim.add_argument(
        "--max_train_minutes",
        type=float,
        default=None,
        help="Training-step time budget in minutes (evaluation and checkpoint saving excluded; like fairseq --stop-time-hours): stop cleanly, evaluate, save.",
    )
    optim.add_argument("--seed", type=int, default=42, help="Random seed (model init, data order, dropout).")

    ev = p.add_argument_group("evaluation")
    ev.add_argument("--eval_steps", type=positive_int, default=1000, help="Evaluate every N steps (and at the end).")
    ev.add_argument("--max_eval_samples", type=positive_int, default=500, help="Validation pairs for loss and BLEU.")
    ev.add_argument("--num_beams", type=positive_int, default=4, help="Beam size for BLEU decoding (1 = greedy).")
    ev.add_argument("--per_device_eval_batch_size", type=positive_int, default=64, help="Sentences per decoding batch.")
    ev.add_argument(
        "--num_sample_translations", type=int, default=3, help="Sample translations logged at each evaluation."
    )
    ev.add_argument(
        "--early_stopping_patience",
        type=positive_int,
        default=None,
        help="Stop after this many evaluations without improvement of --early_stopping_metric.",
    )
    ev.add_argument(
        "--early_stopping_metric",
        default="bleu",
        choices=("bleu", "loss"),
        help="Validation metric watched by early stopping.",
    )

    out = p.add_argument_group("output, checkpoints and logging")
    out.add_argument(
        "--output_dir", required=True, help="Where the final model, tokenizer, results, curves and checkpoints go."
    )
    out.add_argument(
        "--checkpointing_steps",
        type=positive_int,
        default=1000,
        help="Save a resumable checkpoint (output_dir/step_N) every N steps and at the end.",
    )
    out.add_argument(
        "--checkpoints_total_limit",
        type=positive_int,
        default=None,
        help="Keep only the newest N checkpoints (default: keep all).",
    )
    out.add_argument(
        "--resume_from_checkpoint",
        default=None,
        help="A step_N folder, or 'latest' for the newest complete one in --output_dir.",
    )
    out.add_argument(
        "--logging_steps", type=positive_int, default=50, help="Log training loss, lr and speed every N steps."
    )
    out.add_argument(
        "--with_tracking",
        action="store_true",
        help="Log to the trackers of --report_to (written under output_dir/runs).",
    )
    out.add_argument("--report_to", default="tensorboard", help="tensorboard, trackio (offline) or all.")
    out.add_argument(
        "--push_to_hub",
        action="store_true",
        help="Export the final model as a Hub repo (output_dir/hub) and upload it.",
    )
    out.add_argument("--hub_model_id", default=None, help="Hub repo id for --push_to_hub (e.g. you/nanoformer-en-zh).")
    args = p.parse_args(argv)
    if args.push_to_hub and not args.hub_model_id:
        p.error("--push_to_hub needs --hub_model_id")
    if args.max_train_minutes is not None and args.max_train_minutes <= 0:
        p.error("--max_train_minutes must be > 0")
    return args


# --------------------------------------------------------------------------------------------------------------------
# Set-up
# --------------------------------------------------------------------------------------------------------------------


def open_train_source(args):
    return open_translation_source(
        data_file=args.train_file,
        dataset_name=args.dataset_name,
        dataset_config_name=args.dataset_config_name,
        split="train",
        source_lang=args.source_lang,
        target_lang=args.target_lang,
    )


def load_or_train_tokenizer(args, accelerator: Accelerator, resuming: bool):
    """--tokenizer_name, else the model's, else one trained on the first training pairs (saved in output_dir)."""
    name = args.tokenizer_name or args.model_name_or_path
    if name:
        return AutoTokenizer.from_pretrained(name)
    saved = Path(args.output_dir) / "tokenizer"
    if resuming and (saved / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(saved)  # the tokenizer the checkpoint was trained with
    if args.vocab_size is None:
        raise DataSourceError("no tokenizer: pass --tokenizer_name (a saved tokenizer) or --vocab_size (train one)")
    if accelerator.is_main_process:
        from itertools import islice

        from nanoformer.tokenization import train_bpe_tokenizer

        dataset, parser = open_train_source(args)
        to_script = zh_script_converter(args.zh_script)

        def texts():
            pairs = (parser(row) for row in dataset)
            for pair in islice((p for p in pairs if not isinstance(p, str)), args.tokenizer_train_samples):
                yield pair[0]
                yield to_script(pair[1]) if to_script else pair[1]

        logger.info(f"Training a BPE tokenizer (vocab {args.vocab_size}) on up to {args.tokenizer_train_samples} pairs")
        train_bpe_tokenizer(texts(), vocab_size=args.vocab_size).save_pretrained(saved)
    accelerator.wait_for_everyone()
    return AutoTokenizer.from_pretrained(saved)


def build_model(args, tokenizer):
    """A fresh model of --model_type sized by --config_overrides, or the saved --model_name_or_path."""
    if args.model_name_or_path:
        return AutoModelForSeq2SeqLM.from_pretrained(args.model_name_or_path)
    ids = {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "decoder_start_token_id": tokenizer.bos_token_id,
    }
    if args.model_type == "translator":
        from nanoformer.modeling import TranslatorConfig, TranslatorForConditionalGeneration

        config_cls, model_cls, base = TranslatorConfig, TranslatorForConditionalGeneration, ids
    else:
        from transformers import MarianConfig, MarianMTModel

        # The paper's architecture in Marian's terms: one shared, scaled embedding, ReLU, post-LN (Marian's only).
        base = {
            **ids,
            "decoder_vocab_size": len(tokenizer),
            "share_encoder_decoder_embeddings": True,
            "scale_embedding": True,
            "activation_function": "relu",
            "forced_eos_token_id": tokenizer.eos_token_id,
        }
        config_cls, model_cls = MarianConfig, MarianMTModel
    overrides = parse_config_overrides(args.config_overrides, config_cls(**base))
    config = config_cls(**{**base, **overrides})
    model = model_cls(config)
    if args.model_type == "marian":
        model.generation_config.update(
            num_beams=4,
            bad_words_ids=None,
            max_length=None,
            decoder_start_token_id=tokenizer.bos_token_id,
            forced_eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    limit = getattr(config, "max_position_embeddings", None)
    if limit is not None and max(args.max_source_length, args.max_target_length + 1) > limit:
        raise ValueError(
            f"--max_source_length/--max_target_length ({args.max_source_length}/{args.max_target_length}) exceed the "
            f"model's max_position_embeddings ({limit})"
        )
    return model


def load_validation(args, to_script, counters: Counter) -> list[tuple[str, str]]:
    """Up to --max_eval_samples validation pairs (targets in the --zh_script), or [] when there is no validation set."""
    if args.validation_file:
        source = {"data_file": args.validation_file, "dataset_name": None}
    elif not args.train_file:
        source = {"data_file": None, "dataset_name": args.dataset_name}
    else:
        return []
    dataset, parser = open_translation_source(
        **source,
        dataset_config_name=args.dataset_config_name,
        split="validation" if args.validation_file else args.validation_split_name,
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        flag="--validation_file",
    )
    try:
        pairs = read_pairs(dataset, parser, args.max_eval_samples, counters)
    except Exception as error:
        raise DataSourceError(f"cannot read validation data: {str(error).splitlines()[0]}") from error
    return [(s, to_script(t) if to_script else t) for s, t in pairs]


# --------------------------------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------------------------------


def evaluate_model(args, accelerator, model, tokenizer, eval_pairs, eval_batches, *, with_bleu: bool) -> dict:
    """Validation loss/perplexity (plain NLL) and, with `with_bleu`, sacreBLEU over all processes."""
    unwrapped = accelerator.unwrap_model(model)
    model.eval()
    rank, world = accelerator.process_index, accelerator.num_processes
    monitor = hasattr(unwrapped, "set_attention_logit_monitor")
    if monitor:
        unwrapped.set_attention_logit_monitor(True)
    loss_sum, n_tokens = 0.0, 0
    for batch in eval_batches[rank::world]:
        with accelerator.autocast():
            s, n = nll_sums(unwrapped, {k: v.to(accelerator.device) for k, v in batch.items()})
        loss_sum, n_tokens = loss_sum + s, n_tokens + n
    results = {}
    if monitor:
        stats = unwrapped.attention_logit_stats()
        unwrapped.set_attention_logit_monitor(False)
        if stats:
            results["attn_logit_max"] = max(float(v.max()) for v in stats.values())
            results["attn_logit_max_per_layer"] = {k: round(float(v.max()), 2) for k, v in stats.items()}
    totals = accelerator.reduce(torch.tensor([loss_sum, n_tokens], dtype=torch.float64, device=accelerator.device))
    results["eval_loss"] = float(totals[0] / totals[1]) if totals[1] > 0 else float("nan")
    results["eval_ppl"] = perplexity(results["eval_loss"])
    if with_bleu:
        mine = list(range(rank, len(eval_pairs), world))
        with accelerator.autocast():
            hyps = translate(
                unwrapped,
                tokenizer,
                [eval_pairs[i][0] for i in mine],
                num_beams=args.num_beams,
                batch_size=args.per_device_eval_batch_size,
                max_source_length=args.max_source_length,
                max_target_length=args.max_target_length,
            )
        gathered = _gather_objects(accelerator, list(zip(mine, hyps)))
        hypotheses = [h for _, h in sorted(gathered)]
        bleu = compute_bleu(hypotheses, [t for _, t in eval_pairs])
        results["eval_bleu"] = bleu["score"]
        results["bleu_signature"] = bleu["signature"]
        results["samples"] = [
            {"source": eval_pairs[i][0], "reference": eval_pairs[i][1], "hypothesis": hypotheses[i]}
            for i in range(min(args.num_sample_translations, len(eval_pairs)))
        ]
    model.train()
    return results


def _gather_objects(accelerator, items: list) -> list:
    if accelerator.num_processes == 1:
        return items
    from accelerate.utils import gather_object

    return gather_object(items)


def tokenized_eval_batches(eval_pairs, tokenizer, args) -> list[dict[str, torch.Tensor]]:
    if not eval_pairs:
        return []
    enc = tokenizer([s for s, _ in eval_pairs], text_target=[t for _, t in eval_pairs])
    pairs = [
        (src[: args.max_source_length], tgt[: args.max_target_length])
        for src, tgt in zip(enc["input_ids"], enc["labels"])
    ]
    return [pad_batch(b, tokenizer.pad_token_id) for b in bucket_into_batches(pairs, args.max_tokens_per_batch)]


def skipped_rows(counters: Counter | dict) -> int:
    return malformed_count(counters) + int(counters.get("dropped_overlong", 0))


# --------------------------------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------------------------------


def train(args: argparse.Namespace) -> dict:
    run_start = time.perf_counter()
    accelerator = Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        **accelerator_tracking_kwargs(args.with_tracking, args.report_to, args.output_dir),
    )
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    for noisy in ("datasets", "httpx", "huggingface_hub", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    os.makedirs(args.output_dir, exist_ok=True)
    checkpoint = resolve_checkpoint(args.resume_from_checkpoint, args.output_dir)
    set_seed(args.seed)

    to_script = zh_script_converter(args.zh_script)
    dataset, parser = open_train_source(args)  # first, so a missing file or unreachable Hub fails before anything else
    tokenizer = load_or_train_tokenizer(args, accelerator, resuming=checkpoint is not None)
    model = build_model(args, tokenizer)
    n_params = sum(p.numel() for p in model.parameters())
    logger.info(f"Model {type(model).__name__}: {n_params / 1e6:.2f}M parameters; {model.config.to_diff_dict()}")

    eval_counters: Counter = Counter()
    eval_pairs = load_validation(args, to_script, eval_counters)
    if malformed_count({f"malformed: {k}": v for k, v in eval_counters.items()}):
        logger.warning(f"validation data: skipped malformed rows {dict(eval_counters)}")
    eval_batches = tokenized_eval_batches(eval_pairs, tokenizer, args)
    if not eval_pairs:
        logger.warning("No validation data (pass --validation_file): no evaluation, no early stopping")

    if accelerator.num_processes > 1:
        from datasets.distributed import split_dataset_by_node

        dataset = split_dataset_by_node(dataset, rank=accelerator.process_index, world_size=accelerator.num_processes)
    stream = TranslationBatchStream(
        dataset,
        parser,
        tokenizer,
        max_tokens=args.max_tokens_per_batch,
        max_source_length=args.max_source_length,
        max_target_length=args.max_target_length,
        overlong=args.overlong_pairs,
        shuffle_buffer_size=args.shuffle_buffer_size,
        seed=args.seed + accelerator.process_index,
        target_transform=to_script,
    )

    adam = torch.optim.AdamW if args.weight_decay > 0 else torch.optim.Adam
    optimizer = adam(
        model.parameters(),
        lr=args.learning_rate,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
        weight_decay=args.weight_decay,
    )
    if args.lr_scheduler_type == "noam":
        scheduler = get_noam_schedule(
            optimizer, d_model=model.config.d_model, warmup_steps=args.warmup_steps, scale=args.noam_scale
        )
    else:
        scheduler = get_cosine_with_warmup_schedule(
            optimizer, warmup_steps=args.warmup_steps, decay_steps=args.max_train_steps, min_lr=args.learning_rate / 10
        )
    # The scheduler is stepped by hand once per optimizer update (accelerate's wrapper would step it once per
    # process); registering it puts it in every checkpoint.
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(scheduler)

    # Restore.
    step, extra, restored_data_state = 0, {}, None
    if checkpoint is not None:
        state = load_checkpoint(accelerator, checkpoint)
        step, extra = state.step, state.extra
        if state.data_state is not None:
            stream.load_state_dict(state.data_state)
            restored_data_state = state.data_state
        logger.info(f"Resumed from {checkpoint} at step {step}")
    history: list[dict] = extra.get("history", [])
    best = extra.get("best")  # {"step", "metric", "value"}
    bad_evals = extra.get("bad_evals", 0)
    step_seconds = extra.get("step_seconds", 0.0)
    data_wait_seconds = extra.get("data_wait_seconds", 0.0)
    target_tokens = extra.get("target_tokens", 0)
    nonfinite_steps = extra.get("nonfinite_steps", 0)
    runtime_before = extra.get("train_runtime", 0.0)

    if args.with_tracking:
        accelerator.init_trackers("train_mt", tracker_config(args))
    # The stream state right after the last batch consumed (it travels with each batch; the prefetch thread runs ahead).
    data_state: dict | None = restored_data_state

    def log_eval(results: dict) -> None:
        counters = _reduced_counters(accelerator, data_state["counters"] if data_state else {})
        record = {"step": step, **{k: v for k, v in results.items() if isinstance(v, float | int)}}
        record["skipped_rows"] = skipped_rows(counters)
        history.append(record)
        msg = f"eval step {step}: loss {results['eval_loss']:.4f} ppl {results['eval_ppl']:.2f}"
        if "eval_bleu" in results:
            msg += f" BLEU {results['eval_bleu']:.2f} ({results['bleu_signature']}, {len(eval_pairs)} pairs)"
        msg += f"; data: {_describe_counters(counters)}"
        logger.info(msg)
        if "attn_logit_max_per_layer" in results:
            logger.info(f"attention logit max |QK^T/sqrt(d)| per module: {results['attn_logit_max_per_layer']}")
        for sample in results.get("samples", []):
            logger.info(f"  src: {sample['source']}\n  ref: {sample['reference']}\n  hyp: {sample['hypothesis']}")
        if args.with_tracking:
            accelerator.log({f"eval/{k}": v for k, v in record.items() if k != "step"}, step=step)

    if checkpoint is None and eval_batches:
        log_eval(evaluate_model(args, accelerator, model, tokenizer, eval_pairs, eval_batches, with_bleu=False))

    batches = PrefetchIterator(iter(stream))
    try:
        first = next(batches)
    except DataSourceError:
        raise
    except Exception as error:  # a Hub stream that fails on first read (offline, no such split...)
        raise DataSourceError(
            f"cannot read training data from {args.train_file or args.dataset_name}: "
            f"{str(error).splitlines()[0] if str(error) else type(error).__name__} — pass local files with --train_file"
        ) from error
    pushed_back = [first]

    def next_batch():
        return pushed_back.pop() if pushed_back else next(batches)

    progress = tqdm(
        total=args.max_train_steps,
        initial=step,
        disable=not accelerator.is_local_main_process,
        desc="train",
        dynamic_ncols=True,
    )
    model.train()
    budget = args.max_train_minutes * 60 if args.max_train_minutes else None
    interval = {"loss": 0.0, "n": 0, "tokens": 0, "seconds": 0.0, "wait": 0.0}
    last_results: dict = {}
    stop_reason = "max_train_steps"
    early_stopped = False

    def save(at_step: int) -> None:
        save_checkpoint(
            accelerator,
            args.output_dir,
            at_step,
            args=args,
            data_state=data_state,
            extra={
                "history": history,
                "best": best,
                "bad_evals": bad_evals,
                "step_seconds": step_seconds,
                "data_wait_seconds": data_wait_seconds,
                "target_tokens": target_tokens,
                "nonfinite_steps": nonfinite_steps,
                "train_runtime": runtime_before + time.perf_counter() - run_start,
            },
            total_limit=args.checkpoints_total_limit,
        )

    while step < args.max_train_steps:
        t_start = time.perf_counter()
        wait_before = batches.wait_seconds
        step_loss, step_tokens = 0.0, 0
        for _ in range(args.gradient_accumulation_steps):
            batch, data_state = next_batch()
            batch = {k: v.to(accelerator.device, non_blocking=True) for k, v in batch.items()}
            with accelerator.accumulate(model):
                labels = batch["labels"]
                decoder_input_ids = accelerator.unwrap_model(model).prepare_decoder_input_ids_from_labels(labels)
                logits = model(
                    input_ids=batch["input_ids"],
                    attention_mask=batch["attention_mask"],
                    decoder_input_ids=decoder_input_ids,
                ).logits
                loss = F.cross_entropy(
                    logits.flatten(0, 1).float(),
                    labels.flatten(),
                    ignore_index=-100,
                    label_smoothing=args.label_smoothing,
                )
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    # The all-reduced gradient norm is the same on every process, so all of them skip a
                    # non-finite update together (a per-process loss check could deadlock DDP).
                    norm = accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm or float("inf"))
                    if torch.isfinite(torch.as_tensor(norm)):
                        optimizer.step()
                        scheduler.step()
                    else:
                        nonfinite_steps += 1
                        logger.warning(f"step {step + 1}: non-finite gradients (loss {loss.item()}); update skipped")
                    optimizer.zero_grad(set_to_none=True)
            step_loss += loss.detach()
            step_tokens += int(labels.ne(-100).sum())
        step += 1
        elapsed = time.perf_counter() - t_start
        step_seconds += elapsed
        waited = batches.wait_seconds - wait_before
        data_wait_seconds += waited
        target_tokens += step_tokens
        interval["loss"] += float(step_loss) / args.gradient_accumulation_steps
        interval["n"] += 1
        interval["tokens"] += step_tokens
        interval["seconds"] += elapsed
        interval["wait"] += waited
        progress.update(1)

        if step % args.logging_steps == 0 or step == args.max_train_steps:
            stats = accelerator.reduce(
                torch.tensor([interval["loss"] / interval["n"], interval["tokens"]], device=accelerator.device),
                reduction="sum",
            )
            train_loss = float(stats[0]) / accelerator.num_processes
            tok_s = float(stats[1]) / max(interval["seconds"], 1e-9)
            lr = scheduler.get_last_lr()[0]
            record = {
                "step": step,
                "train_loss": train_loss,
                "lr": lr,
                "target_tokens_per_second": tok_s,
                "data_wait_fraction": interval["wait"] / max(interval["seconds"], 1e-9),
            }
            history.append(record)
            progress.set_postfix(loss=f"{train_loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{tok_s:,.0f}")
            if args.with_tracking:
                accelerator.log({f"train/{k}": v for k, v in record.items() if k != "step"}, step=step)
            interval = {"loss": 0.0, "n": 0, "tokens": 0, "seconds": 0.0, "wait": 0.0}

        out_of_time = budget is not None and step_seconds >= budget
        if accelerator.num_processes > 1 and budget is not None:  # every process must stop at the same step
            out_of_time = bool(accelerator.reduce(torch.tensor(float(out_of_time), device=accelerator.device), "max"))
        last = step >= args.max_train_steps or out_of_time
        if out_of_time:
            stop_reason = "max_train_minutes"

        if eval_pairs and (step % args.eval_steps == 0 or last):
            last_results = evaluate_model(args, accelerator, model, tokenizer, eval_pairs, eval_batches, with_bleu=True)
            log_eval(last_results)
            key = "eval_bleu" if args.early_stopping_metric == "bleu" else "eval_loss"
            value = last_results[key]
            better = best is None or (value > best["value"] if key == "eval_bleu" else value < best["value"])
            if better:
                best, bad_evals = {"step": step, "metric": key, "value": value}, 0
            else:
                bad_evals += 1
            if args.early_stopping_patience is not None and bad_evals >= args.early_stopping_patience:
                logger.info(f"Early stopping at step {step}: {key} has not improved for {bad_evals} evaluations")
                stop_reason, early_stopped, last = "early_stopping", True, True
        if step % args.checkpointing_steps == 0 or last:
            save(step)
        if last:
            break
    progress.close()
    batches.close()

    # Final model, tokenizer, results, curves.
    counters = _reduced_counters(accelerator, data_state["counters"])
    unwrapped = accelerator.unwrap_model(model)
    accelerator.wait_for_everyone()
    results = {
        "step": step,
        "stop_reason": stop_reason,
        "eval_loss": last_results.get("eval_loss"),
        "eval_ppl": last_results.get("eval_ppl"),
        "eval_bleu": last_results.get("eval_bleu"),
        "bleu_signature": last_results.get("bleu_signature"),
        "eval_samples": len(eval_pairs),
        "num_beams": args.num_beams,
        "best_step": best["step"] if best else None,
        "best_metric": best["metric"] if best else None,
        "best_metric_value": best["value"] if best else None,
        "early_stopped": early_stopped,
        "train_runtime": runtime_before + time.perf_counter() - run_start,
        "train_step_seconds": step_seconds,
        "data_wait_seconds": data_wait_seconds,
        "data_wait_fraction": data_wait_seconds / max(step_seconds, 1e-9),
        "compute_seconds": step_seconds - data_wait_seconds,
        "nonfinite_steps": nonfinite_steps,
        "skipped_rows": skipped_rows(counters),
        "malformed_rows": malformed_count(counters),
        "truncated_pairs": int(counters.get("truncated_overlong", 0)),
        "dropped_overlong_pairs": int(counters.get("dropped_overlong", 0)),
        "rows_read": int(counters.get("rows", 0)),
        "skipped_by_reason": {
            k.removeprefix("malformed: "): v for k, v in counters.items() if k.startswith("malformed: ")
        },
        "num_processes": accelerator.num_processes,
        "num_parameters": n_params,
        "zh_script": args.zh_script,
    }
    total_tokens = float(accelerator.reduce(torch.tensor(float(target_tokens), device=accelerator.device), "sum"))
    results["train_target_tokens"] = int(total_tokens)
    results["train_tokens_per_second"] = total_tokens / max(step_seconds, 1e-9)
    if accelerator.is_main_process:
        unwrapped.save_pretrained(args.output_dir)
        tokenizer.save_pretrained(args.output_dir)
        write_all_results(args.output_dir, results)
        with open(Path(args.output_dir) / "log_history.json", "w", encoding="utf-8") as f:
            json.dump(history, f, indent=1)
        plot_curves(
            history,
            [["train_loss", "eval_loss"], "eval_bleu"],
            Path(args.output_dir) / "training_curves.png",
            title=f"{type(unwrapped).__name__} {args.source_lang}→{args.target_lang}",
        )
        logger.info(
            f"Done at step {step} ({stop_reason}): BLEU {results['eval_bleu']}, loss {results['eval_loss']}, "
            f"{results['train_tokens_per_second']:.0f} target tok/s, data wait {100 * results['data_wait_fraction']:.1f}% "
            f"of step time; data: {_describe_counters(counters)}"
        )
    if args.with_tracking:
        accelerator.end_training()
    accelerator.wait_for_everyone()
    if args.push_to_hub and accelerator.is_main_process:  # after the last barrier: a failed upload hangs no one
        push(args, unwrapped, tokenizer, results)
    return results


def _reduced_counters(accelerator, counters: Counter) -> Counter:
    """Data counters summed over processes (each process reads its own part of the stream)."""
    if accelerator.num_processes == 1:
        return Counter(counters)
    from accelerate.utils import gather_object

    total: Counter = Counter()
    for part in gather_object([dict(counters)]):
        total.update(part)
    return total


def _describe_counters(counters: Counter | dict) -> str:
    reasons = {k.removeprefix("malformed: "): v for k, v in counters.items() if k.startswith("malformed: ")}
    text = f"{counters.get('rows', 0)} rows read, {sum(reasons.values())} malformed"
    if reasons:
        text += " (" + ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda kv: -kv[1])) + ")"
    text += f", {counters.get('truncated_overlong', 0)} truncated, {counters.get('dropped_overlong', 0)} dropped as too long"
    return text


def push(args, model, tokenizer, results: dict) -> None:
    from nanoformer.hub import HubPushError, export_for_hub, push_to_hub

    metrics = {k: results[k] for k in ("eval_bleu", "eval_loss") if results.get(k) is not None}
    folder = export_for_hub(
        model,
        tokenizer,
        Path(args.output_dir) / "hub",
        metrics=metrics,
        sacrebleu_signature=results.get("bleu_signature"),
        training_args=tracker_config(args),
        figures=[p for p in [Path(args.output_dir) / "training_curves.png"] if p.is_file()],
        repo_id=args.hub_model_id,
        overwrite=True,
    )
    try:
        push_to_hub(folder, args.hub_model_id)
    except HubPushError as error:  # one line and a non-zero exit; the trained model stays in output_dir
        raise SystemExit(f"error: --push_to_hub: {error} (the model is saved in {args.output_dir})") from error
    logger.info(f"Pushed {folder} to {args.hub_model_id}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        train(args)
    except DataSourceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
`accelerate launch` / `accelerate config`. Data pipeline and exact-resume semantics: see `data/stream.py`.
Checkpoints: `checkpointing.py` (``output_dir/step_N``, written atomically, ``--resume_from_checkpoint latest``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from accelerate.logging import get_logger
from accelerate.utils import set_seed
from nanoformer.modeling import TranslatorConfig, TranslatorForConditionalGeneration  # registers the Auto classes
from nanoformer.tokenization import match_model_max_length
from nanoformer.training import common
from nanoformer.training.arguments import (
    UsageError,
    non_negative_int,
    parse_config_overrides,
    positive_float,
    positive_int,
    unit_interval,
)
from nanoformer.training.data import (
    DataSourceError,
    describe_counters,
    malformed_count,
    reduce_counters,
    skipped_rows,
)
from nanoformer.training.data.source import LOCAL_SUFFIXES
from nanoformer.training.final_model import choose_final_model, save_best_model
from nanoformer.training.mt_evaluation import ZH_SCRIPTS, make_evaluate, zh_script_converter
from nanoformer.training.mt_setup import load_or_train_tokenizer, load_validation, open_train_source, training_batches
from nanoformer.training.schedules import get_schedule
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoModelForSeq2SeqLM

logger = get_logger(__name__)
TRAINER = "train_mt"
# The paper's recipe: defaults of the shared flags (training/common.py) for this trainer.
RECIPE = {
    "learning_rate": 5e-4,
    "warmup_steps": 4000,
    "adam_beta2": 0.98,
    "adam_epsilon": 1e-9,
    "eval_steps": 1000,
    "logging_steps": 50,
    "checkpointing_steps": 1000,
    "per_device_eval_batch_size": 64,
    "seed": 42,
}
DEFAULT_MAX_TRAIN_STEPS = 100_000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = common.CliParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    common.add_common_arguments(p, scheduler_choices=("noam", *common.SCHEDULER_CHOICES))
    data = p.add_argument_group("data")
    data.add_argument("--dataset_name", default="wmt/wmt19", help="Hub dataset id, streamed (unless --train_file).")
    data.add_argument("--dataset_config_name", default="zh-en", help="Configuration of --dataset_name.")
    data.add_argument(
        "--train_file",
        default=None,
        help='Local training pairs: .jsonl ({"translation": {"en": ..., "zh": ...}} per line), .tsv or .csv.',
    )
    data.add_argument(
        "--validation_file",
        default=None,
        help="Local validation pairs. Default: the Hub dataset's validation split, or none with --train_file.",
    )
    data.add_argument("--validation_split_name", default="validation", help="Validation split of --dataset_name.")
    data.add_argument("--source_lang", default="en", help="Source language key.")
    data.add_argument("--target_lang", default="zh", help="Target language key.")
    data.add_argument(
        "--zh_script",
        default="as-is",
        choices=ZH_SCRIPTS,
        help="Convert Chinese targets and references to one script with OpenCC before training and scoring.",
    )
    data.add_argument("--max_source_length", type=positive_int, default=256, help="Maximum source tokens (with </s>).")
    data.add_argument(
        "--max_target_length", type=positive_int, default=256, help="Maximum target tokens; also caps decoding."
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
        help="Padded source + target tokens per batch and process (fairseq --max-tokens); similar lengths batched.",
    )
    data.add_argument(
        "--shuffle_buffer_size",
        type=positive_int,
        default=10000,
        help="Pairs in the shuffle/bucketing buffer (a file sorted by length needs one as large as the file).",
    )
    data.add_argument(
        "--shuffle_shards",
        action="store_true",
        default=True,
        help="Read the Parquet files of a Hub split in an order drawn from --seed, another each epoch (with "
        "--max_train_samples: the first epoch's, every epoch).",
    )
    data.add_argument(
        "--no_shuffle_shards",
        dest="shuffle_shards",
        action="store_false",
        default=argparse.SUPPRESS,
        help="Read the files of the split in file order, every epoch.",
    )
    data.add_argument(
        "--vocab_size",
        type=positive_int,
        default=None,
        help="Train a shared BPE tokenizer of this size from the first --tokenizer_train_samples training pairs.",
    )
    data.add_argument(
        "--tokenizer_train_samples", type=positive_int, default=1_000_000, help="Pairs to train the tokenizer on."
    )
    # Old command lines passed the architecture; the translator is the only one (bench/ builds its Marian peer).
    data.add_argument("--model_type", default="translator", choices=("translator",), help=argparse.SUPPRESS)

    mt = p.add_argument_group("translation recipe")
    mt.add_argument(
        "--noam_scale",
        type=positive_float,
        default=1.0,
        help="Scale of the Noam schedule (peak lr = scale·(d_model·warmup_steps)^-0.5); --learning_rate is for cosine.",
    )
    mt.add_argument(
        "--label_smoothing",
        type=unit_interval,
        default=None,
        help="Label smoothing of the training loss, stored as the model's config.label_smoothing (default: 0.1 for "
        "a fresh model, the saved value for --model_name_or_path). Evaluation loss is plain NLL.",
    )
    mt.add_argument(
        "--max_train_minutes",
        type=positive_float,
        default=None,
        help="Training-step time budget (evaluation and saving excluded): stop cleanly, evaluate, save.",
    )
    mt.add_argument("--max_eval_samples", type=positive_int, default=500, help="Validation pairs for loss and BLEU.")
    mt.add_argument("--num_beams", type=positive_int, default=4, help="Beam size for BLEU decoding (1 = greedy).")
    mt.add_argument(
        "--num_sample_translations", type=non_negative_int, default=3, help="Sample translations logged per eval."
    )
    final = p.add_argument_group("the final model: best, or an average of the last checkpoints")
    final.add_argument(
        "--metric_for_best_model",
        "--early_stopping_metric",
        default="bleu",
        choices=("bleu", "loss"),
        help="Validation metric that decides the best model and early stopping.",
    )
    final.add_argument(
        "--load_best_model_at_end",
        action="store_true",
        help="Make the final model the best evaluated one (its weights are kept in output_dir/best_model while "
        "training); all_results.json says which step it came from.",
    )
    final.add_argument(
        "--early_stopping_patience",
        type=positive_int,
        default=None,
        help="Stop after this many evaluations without improvement of --metric_for_best_model; implies "
        "--load_best_model_at_end.",
    )
    final.add_argument(
        "--average_last_checkpoints",
        type=positive_int,
        default=None,
        help="Make the final model the average of the last N checkpoints, spaced --checkpointing_steps apart (the "
        "paper's 'average of the last 5 checkpoints'); it is evaluated next to the last checkpoint's model.",
    )
    p.set_defaults(**RECIPE)
    args = p.parse_args(argv)
    common.check_common_arguments(args, p, TRAINER)
    check_arguments(args, p)
    return args


def check_arguments(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    """This trainer's own checks, at parse time: data files, model and tokenizer, lengths, schedule and epochs."""
    for flag in ("train_file", "validation_file"):  # before a tokenizer is trained on the first million pairs
        path = getattr(args, flag)
        if path and not Path(path).is_file():
            p.error(f"--{flag} {path}: file not found")
        if path and Path(path).suffix.lower() not in LOCAL_SUFFIXES:
            p.error(f"--{flag} {path}: unsupported file type {Path(path).suffix!r} (use .jsonl, .tsv or .csv)")
    config = common.check_model_arguments(args, p, TranslatorConfig)
    smoothing = parse_config_overrides(args.config_overrides, config).get("label_smoothing", args.label_smoothing)
    if args.label_smoothing is not None and smoothing != args.label_smoothing:
        p.error("--label_smoothing and --config_overrides label_smoothing=... disagree; give one")
    saved_tokenizer = args.checkpoint is not None and (Path(args.output_dir) / "tokenizer" / "tokenizer.json").is_file()
    if not (args.tokenizer_name or args.model_name_or_path or args.vocab_size or saved_tokenizer):
        p.error("no tokenizer: pass --tokenizer_name (a saved tokenizer) or --vocab_size (train one)")
    if args.max_tokens_per_batch < args.max_source_length + args.max_target_length:
        p.error(
            f"--max_tokens_per_batch ({args.max_tokens_per_batch}) must be at least --max_source_length + "
            f"--max_target_length ({args.max_source_length} + {args.max_target_length}) so that every pair fits"
        )
    if args.lr_scheduler_type == "noam" and args.warmup_steps == 0:
        p.error("--lr_scheduler_type noam needs --warmup_steps > 0")
    if args.num_train_epochs and not args.max_train_steps and args.lr_scheduler_type != "noam":
        p.error(f"--lr_scheduler_type {args.lr_scheduler_type} with --num_train_epochs needs --max_train_steps "
                "(the length of a streamed corpus is not known in advance)")  # fmt: skip
    if args.num_train_epochs and args.num_train_epochs != int(args.num_train_epochs):
        p.error("--num_train_epochs: the translator trainer counts whole passes over its stream; give an integer")
    if not args.max_train_steps:
        args.max_train_steps = 10**9 if args.num_train_epochs else DEFAULT_MAX_TRAIN_STEPS
    if args.early_stopping_patience is not None:
        args.load_best_model_at_end = True  # as HF's EarlyStoppingCallback: stopping late must not cost the best model
    n_average = args.average_last_checkpoints
    if n_average is not None and args.load_best_model_at_end:
        p.error("--average_last_checkpoints and --load_best_model_at_end/--early_stopping_patience each choose the "
                "final model; give one")  # fmt: skip
    if n_average is not None and n_average < 2:
        p.error("--average_last_checkpoints must be at least 2 (1 is the last checkpoint itself)")
    if n_average is not None and args.checkpoints_total_limit is not None and args.checkpoints_total_limit < n_average:
        p.error(f"--checkpoints_total_limit {args.checkpoints_total_limit} keeps fewer checkpoints than "
                f"--average_last_checkpoints {n_average} averages")  # fmt: skip
    if n_average is not None and n_average * args.checkpointing_steps > args.max_train_steps + args.checkpointing_steps:
        p.error(f"--average_last_checkpoints {n_average}: --max_train_steps {args.max_train_steps} leaves fewer "
                f"checkpoints {args.checkpointing_steps} steps apart; lower N or --checkpointing_steps")  # fmt: skip


# --------------------------------------------------------------------------------------------------------------------
# Set-up: data, tokenizer, model, optimizer
# --------------------------------------------------------------------------------------------------------------------


def build_model(args, tokenizer):
    """The saved --model_name_or_path or a fresh translator sized by --config_overrides; --label_smoothing goes into
    its config, so the saved config.json says what the model was trained with."""
    if args.model_name_or_path:
        remote = {"trust_remote_code": args.trust_remote_code}
        config = AutoConfig.from_pretrained(args.model_name_or_path, **remote)
    else:
        config = TranslatorConfig(
            vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.bos_token_id,
        )  # fmt: skip
    overrides = parse_config_overrides(args.config_overrides, config)
    if hasattr(config, "label_smoothing"):
        if args.label_smoothing is not None:
            overrides["label_smoothing"] = args.label_smoothing
        elif not args.model_name_or_path:
            overrides.setdefault("label_smoothing", 0.1)  # the paper's
    if args.model_name_or_path:
        model = AutoModelForSeq2SeqLM.from_pretrained(args.model_name_or_path, **remote, **overrides)
    else:
        model = TranslatorForConditionalGeneration(TranslatorConfig(**{**config.to_dict(), **overrides}))
    # A model without the field (bench/'s MarianMTModel reference) gets the same smoothed loss from the trainer.
    args.label_smoothing = getattr(
        model.config, "label_smoothing", 0.1 if args.label_smoothing is None else args.label_smoothing
    )
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and max(args.max_source_length, args.max_target_length + 1) > limit:
        raise ValueError(
            f"--max_source_length/--max_target_length ({args.max_source_length}/{args.max_target_length}) exceed the "
            f"model's max_position_embeddings ({limit})"
        )
    return model


def make_optimizer(args, model):
    """Adam(W) with the paper's betas/epsilon, and the Noam or cosine schedule (stepped by hand once per update)."""
    adam = torch.optim.AdamW if args.weight_decay > 0 else torch.optim.Adam
    optimizer = adam(
        model.parameters(),
        lr=args.learning_rate,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
        weight_decay=args.weight_decay,
    )
    scheduler = get_schedule(
        args.lr_scheduler_type, optimizer, warmup_steps=args.warmup_steps, decay_steps=args.max_train_steps,
        min_lr=args.learning_rate / 10, d_model=model.config.d_model, noam_scale=args.noam_scale,
    )  # fmt: skip
    return optimizer, scheduler


# --------------------------------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------------------------------


def train(args: argparse.Namespace) -> dict:
    run_start = time.perf_counter()
    fresh_output_dir = not Path(args.output_dir).exists()
    accelerator = common.make_accelerator(args)
    try:
        return _train(args, accelerator, run_start)
    except UsageError:  # e.g. an unreachable Hub: no empty --output_dir is left behind
        if fresh_output_dir and accelerator.is_main_process:
            common.remove_if_empty(args.output_dir)
        raise


def _train(args: argparse.Namespace, accelerator, run_start: float) -> dict:
    set_seed(args.seed)
    to_script = zh_script_converter(args.zh_script)
    train_files, parser = open_train_source(args)  # first, so a missing file or unreachable Hub fails before the rest
    tokenizer = load_or_train_tokenizer(args, accelerator, resuming=args.checkpoint is not None)
    try:
        model = build_model(args, tokenizer)
    except (OSError, RuntimeError, ValueError) as error:  # e.g. --config_overrides that do not fit the saved weights
        raise DataSourceError(str(error).strip().splitlines()[0]) from error
    match_model_max_length(tokenizer, model.config)  # what the model takes (512), not the tokenizer's default 1024
    n_params = sum(p.numel() for p in model.parameters())
    logger.info(f"Model {type(model).__name__}: {n_params / 1e6:.2f}M parameters; {model.config.to_diff_dict()}")
    eval_pairs, eval_batches = load_validation(args, tokenizer, to_script)

    optimizer, scheduler = make_optimizer(args, model)
    # The scheduler is stepped by hand once per optimizer update (accelerate's wrapper would step it once per
    # process); registering it puts it in every checkpoint.
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(scheduler)
    state = common.LoopState()
    prefetch, batches, saved = training_batches(
        args, accelerator, train_files, parser, tokenizer, to_script, state, args.checkpoint
    )
    first_batch_seconds = time.perf_counter() - run_start  # start-up: data source, tokenizer, model, first batch
    logger.info(f"First training batch ready {first_batch_seconds:.1f}s after start")
    common.init_trackers(accelerator, args, TRAINER)
    evaluate = make_evaluate(args, accelerator, tokenizer, eval_pairs, eval_batches, state) if eval_pairs else None
    if saved is None and evaluate is not None:
        evaluate(model, 0, with_bleu=False)

    data_state = saved.data_state if saved else None
    stop_reason, last_results, data_state = train_loop(
        args, accelerator, model, optimizer, scheduler, prefetch, batches, state, evaluate, data_state, run_start
    )
    prefetch.close()
    last_results = choose_final_model(args, accelerator, model, state, evaluate, last_results, data_state)
    return finish(args, accelerator, model, tokenizer, state, stop_reason, last_results, data_state, run_start, {
        "eval_samples": len(eval_pairs), "num_parameters": n_params, "first_batch_seconds": first_batch_seconds,
    })  # fmt: skip


def train_loop(args, accelerator, model, optimizer, scheduler, prefetch, batches, state, evaluate, data_state, t0):
    """nanoGPT's loop: accumulate, clip, step; log, evaluate, checkpoint. Returns (stop reason, last eval, data)."""
    stop = common.StopOnSignal()  # SIGTERM/SIGINT from here on: finish the update, checkpoint, exit
    progress = tqdm(total=args.max_train_steps, initial=state.step, disable=not accelerator.is_local_main_process,
                    desc="train", dynamic_ncols=True)  # fmt: skip
    model.train()
    budget = args.max_train_minutes * 60 if args.max_train_minutes else None
    interval = {"loss": 0.0, "n": 0, "tokens": 0, "seconds": 0.0, "wait": 0.0}
    last_results, stop_reason = {}, "max_train_steps"
    while state.step < args.max_train_steps:
        t_start, wait_before = time.perf_counter(), prefetch.wait_seconds
        micro_batches = [next(batches) for _ in range(args.gradient_accumulation_steps)]
        data_state = micro_batches[-1][1]
        step_loss, step_tokens = accumulate_gradients(accelerator, model, [b for b, _ in micro_batches], args)
        if accelerator.sync_gradients:
            # The all-reduced gradient norm is the same on every process, so all of them skip a non-finite update
            # together (a per-process loss check could deadlock DDP).
            norm = accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm or float("inf"))
            if torch.isfinite(torch.as_tensor(norm)):
                optimizer.step()
                scheduler.step()
            else:
                state.nonfinite_steps += 1
                logger.warning(f"step {state.step + 1}: non-finite gradients (loss {float(step_loss)}); skipped")
            optimizer.zero_grad(set_to_none=True)
        state.step += 1
        elapsed, waited = time.perf_counter() - t_start, prefetch.wait_seconds - wait_before
        state.train_seconds += elapsed
        state.data_wait_seconds += waited
        state.train_tokens += step_tokens
        for key, value in (("loss", float(step_loss)), ("n", 1),
                           ("tokens", step_tokens), ("seconds", elapsed), ("wait", waited)):  # fmt: skip
            interval[key] += value
        progress.update(1)
        if state.step % args.logging_steps == 0 or state.step == args.max_train_steps:
            log_train(args, accelerator, state, scheduler, interval, progress)
            interval = dict.fromkeys(interval, 0)

        out_of_time = budget is not None and state.train_seconds >= budget
        # Every pass over the data is done when the stream has started the next one and holds none of the last.
        epochs_done = data_state["epoch"] - bool(data_state["pending"] or data_state["buffer"])
        out_of_data = args.num_train_epochs is not None and epochs_done >= args.num_train_epochs
        if accelerator.num_processes > 1 and (budget or args.num_train_epochs):  # all processes stop at one step
            flags = torch.tensor([float(out_of_time), float(out_of_data)], device=accelerator.device)
            out_of_time, out_of_data = map(bool, accelerator.reduce(flags, "max").tolist())
        last = state.step >= args.max_train_steps or out_of_time or out_of_data
        if out_of_time or out_of_data:
            stop_reason = "max_train_minutes" if out_of_time else "num_train_epochs"
        if evaluate is not None and (state.step % args.eval_steps == 0 or last):
            last_results = evaluate(model, state.step, data_state["counters"])
            key = f"eval_{args.metric_for_best_model}"
            improved = state.record_eval(last_results[key], higher_is_better=key == "eval_bleu")
            if improved and args.load_best_model_at_end:
                save_best_model(accelerator, model, args.output_dir)
            if args.early_stopping_patience is not None and state.bad_evals >= args.early_stopping_patience:
                logger.info(f"Early stopping at step {state.step}: {key} has not improved for {state.bad_evals} evals")
                stop_reason, last = "early_stopping", True
        if state.step % args.checkpointing_steps == 0 or last:
            common.save(accelerator, args, state, TRAINER, data_state=data_state, runtime=time.perf_counter() - t0)
        if last:
            break
        if stop.requested(accelerator):
            prefetch.close()
            stop.exit(
                accelerator,
                common.save(accelerator, args, state, TRAINER, data_state=data_state, runtime=time.perf_counter() - t0),
            )
    progress.close()
    return stop_reason, last_results, data_state


def accumulate_gradients(accelerator, model, batches: list[dict], args) -> tuple[torch.Tensor, int]:
    """Forward and backward over one update's micro-batches; returns this process's share of the update's loss and
    its target tokens.

    The loss is the exact token mean over every micro-batch on every process (HF Trainer's ``num_items_in_batch``):
    each micro-batch's summed token loss is divided by the target tokens of them all. Accelerate divides the loss by
    the accumulation steps and DDP averages gradients over processes, so both factors are multiplied back.
    """
    device = accelerator.device
    local_tokens = sum(int(b["labels"].ne(-100).sum()) for b in batches)
    num_items = (
        accelerator.reduce(torch.tensor(local_tokens, device=device), "sum")
        if accelerator.num_processes > 1
        else local_tokens
    )
    unwrapped = accelerator.unwrap_model(model)
    model_loss = hasattr(unwrapped.config, "label_smoothing")  # the translator's loss follows its config
    share = 0.0
    for batch in batches:
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        with accelerator.accumulate(model):
            if model_loss:
                loss = model(**batch, num_items_in_batch=num_items).loss
            else:
                labels = batch.pop("labels")
                decoder_input_ids = unwrapped.prepare_decoder_input_ids_from_labels(labels)
                logits = model(**batch, decoder_input_ids=decoder_input_ids).logits
                loss = F.cross_entropy(
                    logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100,
                    label_smoothing=args.label_smoothing, reduction="sum",
                ) / num_items  # fmt: skip
            accelerator.backward(loss * args.gradient_accumulation_steps * accelerator.num_processes)
        share += loss.detach()
    return share, local_tokens


def log_train(args, accelerator, state: common.LoopState, scheduler, interval: dict, progress) -> None:
    """Mean training loss (over processes), lr and target tokens/s of the last logging interval."""
    stats = accelerator.reduce(
        torch.tensor([interval["loss"] / interval["n"], interval["tokens"]], device=accelerator.device), reduction="sum"
    )
    train_loss = float(stats[0])  # each process holds its share of the token mean
    tok_s = float(stats[1]) / max(interval["seconds"], 1e-9)
    lr = scheduler.get_last_lr()[0]
    record = {
        "step": state.step,
        "loss": train_loss,
        "learning_rate": lr,
        "target_tokens_per_second": tok_s,
        "data_wait_fraction": interval["wait"] / max(interval["seconds"], 1e-9),
    }
    state.history.append(record)
    progress.set_postfix(loss=f"{train_loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{tok_s:,.0f}")
    if args.with_tracking:
        accelerator.log({f"train/{k}": v for k, v in record.items() if k != "step"}, step=state.step)


def finish(args, accelerator, model, tokenizer, state, stop_reason, last, data_state, t0, info) -> dict:
    """Results, the final model and files in output_dir, the trackers closed, then the optional push."""
    counters = reduce_counters(accelerator, data_state["counters"])
    unwrapped = accelerator.unwrap_model(model)
    tokens = int(accelerator.reduce(torch.tensor(float(state.train_tokens), device=accelerator.device), "sum"))
    results = {
        "step": state.step,
        "stop_reason": stop_reason,
        **{k: last.get(k) for k in ("eval_loss", "eval_ppl", "eval_bleu", "bleu_signature")},
        **{k: last[k] for k in ("final_model", "final_model_steps")},
        **{k: v for k, v in last.items() if k.startswith("last_step_")},
        "eval_samples": info["eval_samples"],
        "num_beams": args.num_beams,
        "best_step": state.best_step,
        "best_metric": None if state.best_step is None else f"eval_{args.metric_for_best_model}",
        "best_metric_value": state.best_metric,
        "early_stopped": stop_reason == "early_stopping",
        "train_runtime": state.runtime_before + time.perf_counter() - t0,
        "first_batch_seconds": info["first_batch_seconds"],  # of this launch (a resumed one: since its start)
        "train_step_seconds": state.train_seconds,
        "data_wait_seconds": state.data_wait_seconds,
        "data_wait_fraction": state.data_wait_seconds / max(state.train_seconds, 1e-9),
        "compute_seconds": state.train_seconds - state.data_wait_seconds,
        "nonfinite_steps": state.nonfinite_steps,
        "skipped_rows": skipped_rows(counters),
        "malformed_rows": malformed_count(counters),
        "truncated_pairs": int(counters.get("truncated_overlong", 0)),
        "dropped_overlong_pairs": int(counters.get("dropped_overlong", 0)),
        "rows_read": int(counters.get("rows", 0)),
        "skipped_by_reason": {
            k.removeprefix("malformed: "): v for k, v in counters.items() if k.startswith("malformed: ")
        },
        "num_processes": accelerator.num_processes,
        "num_parameters": info["num_parameters"],
        "zh_script": args.zh_script,
        "train_target_tokens": tokens,
        "train_tokens_per_second": tokens / max(state.train_seconds, 1e-9),
    }
    common.save_final(accelerator, unwrapped, tokenizer, args.output_dir, results, state.history,
               curves=[["loss", "eval_loss"], "eval_bleu"],
               title=f"{type(unwrapped).__name__} {args.source_lang}→{args.target_lang}", args=args, trainer=TRAINER)  # fmt: skip
    logger.info(
        f"Done at step {state.step} ({stop_reason}): BLEU {results['eval_bleu']}, loss {results['eval_loss']}, "
        f"{results['train_tokens_per_second']:.0f} target tok/s, data wait {100 * results['data_wait_fraction']:.1f}% "
        f"of step time; data: {describe_counters(counters)}",
        main_process_only=True,
    )
    # All processes tear the process group down together (trackers finish too); one that exits while another still
    # holds the group can leave that one hanging in gloo's destructor.
    accelerator.wait_for_everyone()
    accelerator.end_training()
    if args.push_to_hub and accelerator.is_main_process:  # after the last barrier: a failed upload hangs no one
        common.export_and_push(unwrapped, tokenizer, args)  # the card comes from output_dir's results and arguments
    return results


def main(argv: list[str] | None = None) -> None:
    train(parse_args(argv))


if __name__ == "__main__":
    common.run_cli(main, "train_mt.py")

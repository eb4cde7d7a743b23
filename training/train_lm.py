"""Train a NanoGPT causal language model on plain text with Accelerate, the nanoGPT way.

    accelerate launch training/train_lm.py --train_file ../shared/data/tinyshakespeare/input.txt --output_dir out

The defaults are nanoGPT's CPU recipe for tiny Shakespeare (character tokens; 4 layers, 4 heads, 128 wide, block 64,
batch 12, 2000 steps, AdamW lr 1e-3 with 100 warmup steps and cosine decay to 1e-4, betas (0.9, 0.99), weight decay
0.1 on 2-D weights only, gradient clipping at 1.0, no dropout). Data: the token ids of the whole text in one compact
array (memory-mapped from ``output_dir/cache``), the first 90% for training and the last 10% for validation, batches
of random windows. Every ``--eval_steps`` the train/validation losses are estimated on ``--eval_iters`` batches (as
nanoGPT's ``estimate_loss``) and a sample is printed; at the end the whole validation split is scored in
non-overlapping ``block_size`` windows (``eval_loss_full``). Checkpoints (``output_dir/step_N``) restore model,
optimizer, scheduler, RNG and the data sampler, so a resumed run continues exactly. The output folder loads with
``AutoModelForCausalLM`` / ``AutoTokenizer``; sample from it with ``python training/sample_lm.py --model_dir out``.
Precision and processes come from ``accelerate launch`` (``--mixed_precision bf16``, ``--num_processes 2``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
from accelerate.logging import get_logger
from accelerate.utils import set_seed
from nanoformer.modeling import NanoGPTConfig, NanoGPTForCausalLM
from nanoformer.tokenization import build_char_tokenizer
from nanoformer.training import common
from nanoformer.training.arguments import (
    UsageError,
    non_negative_float,
    non_negative_int,
    parse_config_overrides,
    percentage,
    positive_int,
)
from nanoformer.training.checkpointing import read_meta
from nanoformer.training.lm_data import (
    RandomWindowSampler,
    collect_characters,
    encode_to_file,
    read_text_chunks,
    split_train_val,
    tokenizer_fingerprint,
)
from nanoformer.training.lm_evaluation import full_split_loss, lm_loss, make_evaluate, sample_text
from nanoformer.training.schedules import get_schedule
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

logger = get_logger(__name__, log_level="INFO")
TRAINER = "train_lm"
# nanoGPT's shakespeare_char recipe: defaults of the shared flags (training/common.py) for this trainer.
RECIPE = {
    "learning_rate": 1e-3,
    "warmup_steps": 100,
    "weight_decay": 0.1,
    "adam_beta2": 0.99,
    "seed": 1337,
    "eval_steps": 250,
    "logging_steps": 10,
}

# Settings that define the model or the data: a resumed run warns when they differ from the checkpoint's.
RESUME_MUST_MATCH = (
    "train_file",
    "dataset_name",
    "tokenizer_name",
    "config_overrides",
    "block_size",
    "validation_split_percentage",
)
# nanoGPT's CPU recipe for tiny Shakespeare (its README), before any --config_overrides.
DEFAULT_MODEL = {"n_layer": 4, "n_head": 4, "n_embd": 128, "dropout": 0.0, "bias": False}
DEFAULT_MAX_TRAIN_STEPS = 2000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = common.CliParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    common.add_common_arguments(p)
    data = p.add_argument_group("data")
    data.add_argument("--train_file", type=str, default=None, help="A UTF-8 plain-text file to train on.")
    data.add_argument("--dataset_name", type=str, default=None, help="A Hub dataset to train on instead (train split).")
    data.add_argument("--dataset_config_name", type=str, default=None, help="The configuration of --dataset_name.")
    data.add_argument("--text_column", type=str, default="text", help="The column of --dataset_name holding the text.")
    data.add_argument(
        "--validation_split_percentage",
        type=percentage,
        default=10.0,
        help="The last this-many percent of the token ids are the validation split (nanoGPT: 10).",
    )
    lm = p.add_argument_group("language model")
    lm.add_argument(
        "--block_size",
        type=positive_int,
        default=None,
        help="Context length of the training windows and of a fresh model (default: 64, or the saved model's).",
    )
    lm.add_argument("--torch_compile", action="store_true", help="Compile the model with torch.compile (inductor).")
    lm.add_argument("--per_device_train_batch_size", type=positive_int, default=12, help="Windows per batch.")
    lm.add_argument("--min_learning_rate", type=non_negative_float, default=1e-4, help="Learning rate after decay.")
    lm.add_argument("--eval_iters", type=positive_int, default=20, help="Batches per split in each loss estimate.")
    lm.add_argument(
        "--sample_max_new_tokens", type=non_negative_int, default=200, help="Length of the sample printed per eval."
    )
    p.set_defaults(**RECIPE)
    args = p.parse_args(argv)
    if bool(args.train_file) == bool(args.dataset_name):
        p.error("give exactly one of --train_file or --dataset_name")
    if args.train_file and not Path(args.train_file).is_file():
        p.error(f"--train_file not found: {args.train_file}")
    if args.min_learning_rate > args.learning_rate:
        p.error(f"--min_learning_rate ({args.min_learning_rate}) is above --learning_rate ({args.learning_rate})")
    common.check_common_arguments(args, p, TRAINER)
    config = common.check_model_arguments(args, p, lambda: NanoGPTConfig(**DEFAULT_MODEL))
    if args.model_name_or_path:
        args.tokenizer_name = args.tokenizer_name or args.model_name_or_path
        if args.block_size is not None and args.block_size > config.block_size:
            p.error(f"--block_size {args.block_size} exceeds the block_size ({config.block_size}) of the saved model")
        args.block_size = args.block_size or config.block_size
    args.block_size = args.block_size or 64
    args.per_device_eval_batch_size = args.per_device_eval_batch_size or args.per_device_train_batch_size
    return args


def load_tokenizer_and_ids(args: argparse.Namespace):
    """The tokenizer (char tokenizer of the text unless --tokenizer_name) and the memory-mapped token ids."""

    def chunks():
        return read_text_chunks(args.train_file, args.dataset_name, args.dataset_config_name, args.text_column)

    if args.tokenizer_name:
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_name, trust_remote_code=args.trust_remote_code)
    else:
        tokenizer = build_char_tokenizer(collect_characters(chunks()))
    tokenizer.model_max_length = args.block_size

    if args.train_file:
        stat = Path(args.train_file).stat()
        source = {"file": str(Path(args.train_file).resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    else:
        source = {"dataset": args.dataset_name, "config": args.dataset_config_name, "column": args.text_column}
    ids = encode_to_file(chunks(), tokenizer, Path(args.output_dir) / "cache" / "token_ids.bin", source)
    return tokenizer, ids


def build_model(args: argparse.Namespace, tokenizer) -> NanoGPTForCausalLM:
    """The saved --model_name_or_path, or a fresh NanoGPT: nanoGPT's recipe size, the tokenizer's vocabulary,
    --block_size, then --config_overrides."""
    if args.model_name_or_path:
        remote = {"trust_remote_code": args.trust_remote_code}
        config = AutoConfig.from_pretrained(args.model_name_or_path, **remote)
        overrides = parse_config_overrides(args.config_overrides, config)
        model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path, **remote, **overrides)
        if len(tokenizer) > model.config.vocab_size:
            raise ValueError(f"the tokenizer has {len(tokenizer)} tokens, the model only {model.config.vocab_size}")
        return model
    overrides = parse_config_overrides(args.config_overrides, NanoGPTConfig)
    if "block_size" in overrides and overrides["block_size"] != args.block_size:
        raise ValueError("set the context length with --block_size, not --config_overrides block_size=...")
    if "vocab_size" in overrides and overrides["vocab_size"] < len(tokenizer):
        raise ValueError(
            f"--config_overrides vocab_size={overrides['vocab_size']} is below the tokenizer's {len(tokenizer)}"
        )
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}
    config = NanoGPTConfig(
        **{
            "vocab_size": len(tokenizer),
            "block_size": args.block_size,
            **ids,
            "pad_token_id": tokenizer.pad_token_id,
            **DEFAULT_MODEL,
            **overrides,
        }  # fmt: skip
    )
    model = NanoGPTForCausalLM(config)
    model.generation_config = GenerationConfig(
        do_sample=True, temperature=0.8, top_k=200, max_new_tokens=500, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    return model


def configure_optimizer(model: torch.nn.Module, args: argparse.Namespace) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices and embeddings (dim >= 2) only, never on biases and norm gains (nanoGPT)."""
    params = [p for p in model.parameters() if p.requires_grad]  # tied weights appear once
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    betas = (args.adam_beta1, args.adam_beta2)
    return torch.optim.AdamW(groups, lr=args.learning_rate, betas=betas, eps=args.adam_epsilon)


def push_model(model, tokenizer, args: argparse.Namespace) -> Path:
    """Export the model with a card built from the run folder (its data, whole-split validation loss, recipe and
    curves; see nanoformer.hub.run_card) and upload it."""
    return common.export_and_push(model, tokenizer, args)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    accelerator = common.make_accelerator(
        args,
        step_scheduler_with_optimizer=False,  # one scheduler step per optimizer step, whatever the process count
        **({"dynamo_backend": "inductor"} if args.torch_compile else {}),
    )
    set_seed(args.seed)
    try:  # bad input (file, text, config, checkpoint) ends here with one clear line and exit status 2
        with accelerator.main_process_first():  # the main process encodes and caches the ids; the others reuse them
            tokenizer, ids = load_tokenizer_and_ids(args)
        train_ids, val_ids = split_train_val(ids, args.validation_split_percentage)
        if args.max_train_samples:  # the first N block_size windows, as run_clm's samples
            train_ids = train_ids[: args.max_train_samples * args.block_size + 1]
        model = build_model(args, tokenizer)
        saved_tokenizer = read_meta(args.checkpoint).get("extra", {}).get("tokenizer") if args.checkpoint else None
        if saved_tokenizer not in (None, tokenizer_fingerprint(tokenizer)):
            raise ValueError(f"{args.checkpoint} was trained with a different tokenizer/vocabulary than this run's")
        sampler = RandomWindowSampler(
            train_ids, args.block_size, args.per_device_train_batch_size, [args.seed, accelerator.process_index]
        )
    except (OSError, RuntimeError, ValueError) as err:  # RuntimeError: --config_overrides that do not fit the weights
        raise UsageError(str(err).strip().splitlines()[0]) from None
    n_params = sum(p.numel() for p in model.parameters())
    logger.info(
        f"{len(ids):,} tokens (train {len(train_ids):,}, validation {len(val_ids):,}, vocabulary {len(tokenizer)}); "
        f"model {n_params / 1e6:.2f}M parameters"
    )
    tokens_per_step = args.per_device_train_batch_size * args.block_size * args.gradient_accumulation_steps
    tokens_per_step *= accelerator.num_processes
    if args.num_train_epochs and not args.max_train_steps:  # an epoch: as many tokens as the training split holds
        args.max_train_steps = max(1, math.ceil(args.num_train_epochs * len(train_ids) / tokens_per_step))
    args.max_train_steps = args.max_train_steps or DEFAULT_MAX_TRAIN_STEPS
    optimizer = configure_optimizer(model, args)
    scheduler = get_schedule(
        args.lr_scheduler_type, optimizer, warmup_steps=args.warmup_steps, decay_steps=args.max_train_steps,
        min_lr=args.min_learning_rate,
    )  # fmt: skip
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    state = common.LoopState()
    saved = common.resume(accelerator, args.checkpoint, state, sampler)
    if saved is not None:
        changed = {k: (saved.args.get(k), v) for k, v in vars(args).items() if k in RESUME_MUST_MATCH}
        changed = {k: pair for k, pair in changed.items() if pair[0] != pair[1]}
        if changed:
            logger.warning(f"Resuming with settings that differ from the checkpoint's (saved, now): {changed}")
    common.init_trackers(accelerator, args, TRAINER)

    logger.info(
        f"Training to step {args.max_train_steps} from step {state.step}: {tokens_per_step:,} tokens per step "
        f"({accelerator.num_processes} process(es), mixed precision {accelerator.mixed_precision})"
    )
    evaluate = make_evaluate(args, accelerator, tokenizer, train_ids, val_ids, state)
    if saved is None:
        evaluate(model, 0)
    start_step, start_time = state.step, time.perf_counter()
    train_loop(args, accelerator, model, optimizer, scheduler, sampler, state, evaluate, tokens_per_step, tokenizer)
    finish(args, accelerator, model, tokenizer, state, evaluate, val_ids, start_step, start_time, n_params)


def train_loop(args, accelerator, model, optimizer, scheduler, sampler, state, evaluate, tokens_per_step, tokenizer):
    """nanoGPT's loop: accumulate, clip, step; log the running loss, evaluate, checkpoint."""
    running_loss, running_n = 0.0, 0
    stop = common.StopOnSignal()  # SIGTERM/SIGINT from here on: finish the update, checkpoint, exit
    progress = tqdm(
        total=args.max_train_steps, initial=state.step, disable=not accelerator.is_local_main_process, desc="train",
        mininterval=0.1 if sys.stderr.isatty() else 30.0,  # a log file gets a line every 30 s, not every step
    )  # fmt: skip
    model.train()
    while state.step < args.max_train_steps:
        t0 = time.perf_counter()
        for _ in range(args.gradient_accumulation_steps):
            inputs, targets = sampler.next_batch()
            with accelerator.accumulate(model):
                loss = lm_loss(model, inputs.to(accelerator.device), targets.to(accelerator.device))
                accelerator.backward(loss)
                if accelerator.sync_gradients and args.max_grad_norm > 0:
                    accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            running_loss += loss.detach()
            running_n += 1
        lr = scheduler.get_last_lr()[0]
        scheduler.step()
        state.step += 1
        state.train_tokens += tokens_per_step

        if state.step % args.logging_steps == 0 or state.step == args.max_train_steps:
            mean_loss = (running_loss / running_n).item()  # .item() syncs the device, so the timing below is honest
            running_loss, running_n = 0.0, 0
            state.train_seconds += time.perf_counter() - t0
            tok_s = state.train_tokens / state.train_seconds
            state.history.append({"step": state.step, "loss": mean_loss, "learning_rate": lr})
            progress.set_postfix(loss=f"{mean_loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{tok_s:,.0f}", refresh=False)
            if args.with_tracking:
                accelerator.log({"train/loss": mean_loss, "train/learning_rate": lr}, step=state.step)
        else:
            state.train_seconds += time.perf_counter() - t0
        progress.update(1)

        last = state.step == args.max_train_steps
        if state.step % args.eval_steps == 0 or last:
            evaluate(model, state.step)
        extra = {"tokenizer": tokenizer_fingerprint(tokenizer)}
        if args.checkpointing_steps and (state.step % args.checkpointing_steps == 0 or last):
            common.save(accelerator, args, state, TRAINER, data_state=sampler.state_dict(), extra=extra)
        if stop.requested(accelerator):
            stop.exit(
                accelerator,
                common.save(accelerator, args, state, TRAINER, data_state=sampler.state_dict(), extra=extra),
            )
    progress.close()


def finish(args, accelerator, model, tokenizer, state, evaluate, val_ids, start_step, start_time, n_params) -> None:
    """The whole-split validation loss, the final model, results and curves, a last sample, the optional push."""
    final = next((r for r in reversed(state.history) if "eval_loss" in r), None)
    if final is None or final["step"] != state.step:
        final = evaluate(model, state.step)
    eval_loss_full = full_split_loss(accelerator.unwrap_model(model), accelerator, val_ids, args)
    accelerator.print(
        f"validation loss over the whole split ({len(val_ids):,} tokens, block_size windows): {eval_loss_full:.4f}"
    )
    results = {
        "step": final["step"],
        "eval_loss": final["eval_loss"],
        "eval_loss_full": eval_loss_full,
        "perplexity": math.exp(eval_loss_full),
        "train_loss": final["train_loss"],
        "train_runtime": time.perf_counter() - start_time,
        "train_tokens_per_second": state.train_tokens / max(state.train_seconds, 1e-9),
        "train_steps_this_run": state.step - start_step,
        "num_parameters": n_params,
        "num_processes": accelerator.num_processes,
    }
    unwrapped = accelerator.unwrap_model(model, keep_torch_compile=False)
    common.save_final(
        accelerator, unwrapped, tokenizer, args.output_dir, results, state.history,
        curves=[["loss", "train_loss", "eval_loss"]],
        title=f"NanoGPT ({n_params / 1e6:.2f}M parameters), block {args.block_size}",
        labels={"loss": "training batches (running mean)", "train_loss": f"train split ({args.eval_iters} batches)",
                "eval_loss": f"validation split ({args.eval_iters} batches)"},
        args=args, trainer=TRAINER,
    )  # fmt: skip
    if accelerator.is_main_process:
        logger.info(f"Saved the model, tokenizer and results to {args.output_dir}: {json.dumps(results)}")
        if args.sample_max_new_tokens > 0:
            text = sample_text(unwrapped, tokenizer, args, args.sample_max_new_tokens)
            accelerator.print(f"--- final sample ---\n{text}\n---")
    # Every process reaches this barrier before the process group is torn down: a process that left early while
    # the main one was still sampling made the main one hang in gloo's destructor at exit.
    accelerator.wait_for_everyone()
    accelerator.end_training()
    if args.push_to_hub and accelerator.is_main_process:
        push_model(unwrapped, tokenizer, args)


if __name__ == "__main__":
    common.run_cli(main, "train_lm.py")

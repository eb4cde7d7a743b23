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
import logging
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.logging import get_logger
from accelerate.utils import set_seed
from nanoformer.hub import HubPushError
from nanoformer.modeling import NanoGPTConfig, NanoGPTForCausalLM
from nanoformer.tokenization import build_char_tokenizer
from nanoformer.training.arguments import parse_config_overrides, positive_int
from nanoformer.training.checkpointing import load_checkpoint, read_meta, resolve_checkpoint, save_checkpoint
from nanoformer.training.lm_data import (
    RandomWindowSampler,
    collect_characters,
    encode_to_file,
    full_split_windows,
    read_text_chunks,
    split_train_val,
    tokenizer_fingerprint,
)
from nanoformer.training.reporting import accelerator_tracking_kwargs, plot_curves, tracker_config, write_all_results
from nanoformer.training.schedules import get_cosine_with_warmup_schedule
from tqdm.auto import tqdm
from transformers import AutoTokenizer, GenerationConfig

logger = get_logger(__name__, log_level="INFO")

# nanoGPT's CPU recipe for tiny Shakespeare (its README), before any --config_overrides.
# Settings that define the model or the data: a resumed run warns when they differ from the checkpoint's.
RESUME_MUST_MATCH = (
    "train_file",
    "dataset_name",
    "tokenizer_name",
    "config_overrides",
    "block_size",
    "validation_split_percentage",
)
DEFAULT_MODEL = {"n_layer": 4, "n_head": 4, "n_embd": 128, "dropout": 0.0, "bias": False}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    data = p.add_argument_group("data")
    data.add_argument("--train_file", type=str, default=None, help="A UTF-8 plain-text file to train on.")
    data.add_argument("--dataset_name", type=str, default=None, help="A Hub dataset to train on instead (train split).")
    data.add_argument("--dataset_config_name", type=str, default=None, help="The configuration of --dataset_name.")
    data.add_argument("--text_column", type=str, default="text", help="The column of --dataset_name holding the text.")
    data.add_argument(
        "--validation_split_percentage",
        type=float,
        default=10.0,
        help="The last this-many percent of the token ids are the validation split (nanoGPT: 10).",
    )
    data.add_argument(
        "--tokenizer_name",
        type=str,
        default=None,
        help="A saved tokenizer (folder or Hub id) to use; by default a character tokenizer is built from the text.",
    )
    data.add_argument(
        "--trust_remote_code", action="store_true", help="Allow custom code when loading --tokenizer_name."
    )

    model = p.add_argument_group("model")
    model.add_argument(
        "--config_overrides",
        type=str,
        default=None,
        help="Comma-separated NanoGPTConfig fields over the default (n_layer=4,n_head=4,n_embd=128,dropout=0.0,"
        "bias=false), e.g. 'n_layer=6,norm_type=rmsnorm,mlp_type=swiglu,position_embedding_type=rope'.",
    )
    model.add_argument(
        "--block_size", type=positive_int, default=64, help="Context length of training windows and of the model."
    )
    model.add_argument("--torch_compile", action="store_true", help="Compile the model with torch.compile (inductor).")

    train = p.add_argument_group("training")
    train.add_argument(
        "--per_device_train_batch_size", type=positive_int, default=12, help="Windows per batch per device."
    )
    train.add_argument(
        "--per_device_eval_batch_size",
        type=positive_int,
        default=None,
        help="Windows per eval batch; unset: the train batch size.",
    )
    train.add_argument(
        "--gradient_accumulation_steps", type=positive_int, default=1, help="Batches accumulated per optimizer step."
    )
    train.add_argument("--learning_rate", type=float, default=1e-3, help="Peak learning rate, reached after warmup.")
    train.add_argument(
        "--min_learning_rate", type=float, default=1e-4, help="Learning rate at the end of the cosine decay."
    )
    train.add_argument("--warmup_steps", type=int, default=100, help="Steps of linear warmup.")
    train.add_argument(
        "--weight_decay", type=float, default=0.1, help="AdamW weight decay, applied to 2-D weights only."
    )
    train.add_argument("--adam_beta1", type=float, default=0.9, help="AdamW beta1.")
    train.add_argument("--adam_beta2", type=float, default=0.99, help="AdamW beta2.")
    train.add_argument("--max_grad_norm", type=float, default=1.0, help="Gradient-norm clipping (0 disables it).")
    train.add_argument(
        "--max_train_steps", type=positive_int, default=2000, help="Optimizer steps in total (also the cosine length)."
    )
    train.add_argument("--seed", type=int, default=1337, help="Seed of the model init, dropout and data sampling.")

    evals = p.add_argument_group("evaluation, logging and checkpoints")
    evals.add_argument(
        "--eval_steps", type=positive_int, default=250, help="Estimate train/validation loss every N steps."
    )
    evals.add_argument("--eval_iters", type=positive_int, default=20, help="Batches per split in each loss estimate.")
    evals.add_argument(
        "--logging_steps", type=positive_int, default=10, help="Log the running training loss every N steps."
    )
    evals.add_argument(
        "--sample_max_new_tokens",
        type=int,
        default=200,
        help="Length of the sample printed at each evaluation (0: none).",
    )
    evals.add_argument("--output_dir", type=str, required=True, help="Where the model, checkpoints and results go.")
    evals.add_argument(
        "--checkpointing_steps",
        type=positive_int,
        default=None,
        help="Save output_dir/step_N every N steps and at the end.",
    )
    evals.add_argument(
        "--checkpoints_total_limit",
        type=positive_int,
        default=None,
        help="Keep only the newest N checkpoints; unset keeps all.",
    )
    evals.add_argument(
        "--resume_from_checkpoint",
        type=str,
        default=None,
        help="A checkpoint folder, or 'latest' for the newest complete one in --output_dir (none yet: start fresh).",
    )
    evals.add_argument("--with_tracking", action="store_true", help="Log metrics to the trackers of --report_to.")
    evals.add_argument(
        "--report_to",
        type=str,
        default="tensorboard",
        help="Trackers for --with_tracking: tensorboard, trackio or all.",
    )
    evals.add_argument("--push_to_hub", action="store_true", help="Upload the final model folder to the Hub.")
    evals.add_argument("--hub_model_id", type=str, default=None, help="The Hub repo to push to (user/name).")
    args = p.parse_args(argv)

    if bool(args.train_file) == bool(args.dataset_name):
        p.error("give exactly one of --train_file or --dataset_name")
    if args.train_file and not Path(args.train_file).is_file():
        p.error(f"--train_file not found: {args.train_file}")
    if args.push_to_hub and not args.hub_model_id:
        p.error("--push_to_hub needs --hub_model_id")
    if args.push_to_hub:
        from nanoformer.hub.push import hub_offline

        if hub_offline():  # fail now, not after training
            p.error("--push_to_hub: HF_HUB_OFFLINE is set (offline mode); unset it to push, or drop --push_to_hub")
    if args.min_learning_rate > args.learning_rate:
        p.error(f"--min_learning_rate ({args.min_learning_rate}) is above --learning_rate ({args.learning_rate})")
    try:
        accelerator_tracking_kwargs(args.with_tracking, args.report_to, ".")
    except ValueError as err:
        p.error(str(err))
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
    overrides = parse_config_overrides(args.config_overrides, NanoGPTConfig)
    if "block_size" in overrides and overrides["block_size"] != args.block_size:
        raise ValueError("set the context length with --block_size, not --config_overrides block_size=...")
    if "vocab_size" in overrides and overrides["vocab_size"] < len(tokenizer):
        raise ValueError(
            f"--config_overrides vocab_size={overrides['vocab_size']} is below the tokenizer's {len(tokenizer)}"
        )
    config = NanoGPTConfig(
        **{
            "vocab_size": len(tokenizer),
            "block_size": args.block_size,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
            **DEFAULT_MODEL,
            **overrides,
        }
    )
    return NanoGPTForCausalLM(config)


def configure_optimizer(model: torch.nn.Module, args: argparse.Namespace) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices and embeddings (dim >= 2) only, never on biases and norm gains (nanoGPT)."""
    params = [p for p in model.parameters() if p.requires_grad]  # tied weights appear once
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.learning_rate, betas=(args.adam_beta1, args.adam_beta2))


def lm_loss(
    model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor, reduction: str = "mean"
) -> torch.Tensor:
    """Cross-entropy of every position against its target (the window shifted by one), as nanoGPT computes it."""
    logits = model(input_ids=inputs).logits
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction=reduction)


@torch.no_grad()
def estimate_loss(model, accelerator, ids: np.ndarray, args, seed: list[int]) -> float:
    """Mean loss over --eval_iters random batches of one split (the same batches at every evaluation)."""
    model.eval()
    sampler = RandomWindowSampler(
        ids, args.block_size, args.per_device_eval_batch_size, seed + [accelerator.process_index]
    )
    losses = torch.zeros(args.eval_iters, device=accelerator.device)
    for i in range(args.eval_iters):
        inputs, targets = sampler.next_batch()
        losses[i] = lm_loss(model, inputs.to(accelerator.device), targets.to(accelerator.device))
    model.train()
    return accelerator.reduce(losses.mean(), reduction="mean").item()


@torch.no_grad()
def full_split_loss(model, accelerator, ids: np.ndarray, args) -> float:
    """Exact mean loss over the whole split in non-overlapping block_size windows (windows shared out across processes)."""
    model.eval()
    totals = torch.zeros(2, device=accelerator.device, dtype=torch.float64)  # summed loss, tokens
    for inputs, targets in full_split_windows(
        ids, args.block_size, args.per_device_eval_batch_size, accelerator.process_index, accelerator.num_processes
    ):
        loss_sum = lm_loss(model, inputs.to(accelerator.device), targets.to(accelerator.device), reduction="sum")
        totals += torch.stack([loss_sum.double(), torch.tensor(targets.numel(), device=accelerator.device).double()])
    model.train()
    totals = accelerator.reduce(totals, reduction="sum")
    return (totals[0] / totals[1]).item()


@torch.no_grad()
def sample_text(model, tokenizer, args, max_new_tokens: int) -> str:
    """A sample from a newline prompt (nanoGPT's start), on a forked RNG so that training randomness is untouched."""
    prompt = tokenizer("\n", add_special_tokens=False)["input_ids"] or [tokenizer.eos_token_id]
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(args.seed)
        model.eval()
        out = model.generate(torch.tensor([prompt], device=device), max_new_tokens=max_new_tokens)
        model.train()
    return tokenizer.decode(out[0, len(prompt) :], skip_special_tokens=True)


def export_and_push(model, tokenizer, args: argparse.Namespace, results: dict) -> Path:
    """Write a Hub-ready copy (model card, remote code, loss curve) to ``output_dir/hub_export`` and upload it."""
    from nanoformer.hub import export_for_hub, push_to_hub

    if args.dataset_name:
        datasets, data_name = [args.dataset_name], args.dataset_name
    else:  # a local file: the card's default attribution (tiny Shakespeare) only if that is what was used
        data_name = Path(args.train_file).name
        datasets = None if "shakespeare" in str(args.train_file).lower() else []
    hidden = {"push_to_hub", "hub_model_id", "output_dir", "resume_from_checkpoint", "with_tracking", "report_to"}
    folder = export_for_hub(
        model,
        tokenizer,
        Path(args.output_dir) / "hub_export",
        metrics={"eval_loss": results["eval_loss_full"]},
        datasets=datasets,
        eval_dataset={
            "type": "text",
            "name": data_name,
            "split": f"last {args.validation_split_percentage:g}% (whole split, non-overlapping block_size windows)",
        },
        training_args={k: v for k, v in vars(args).items() if v is not None and k not in hidden},
        figures=[p for p in [Path(args.output_dir) / "loss_curve.png"] if p.is_file()],
        repo_id=args.hub_model_id,
        overwrite=(Path(args.output_dir) / "hub_export").exists(),
    )
    push_to_hub(folder, args.hub_model_id)
    return folder


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.makedirs(args.output_dir, exist_ok=True)
    accelerator = Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        step_scheduler_with_optimizer=False,  # one scheduler step per optimizer step, whatever the process count
        **({"dynamo_backend": "inductor"} if args.torch_compile else {}),
        **accelerator_tracking_kwargs(args.with_tracking, args.report_to, args.output_dir),
    )
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    logging.getLogger("nanoformer").setLevel(logging.INFO)  # our messages; libraries stay at WARNING
    set_seed(args.seed)

    try:  # bad input (file, text, config, checkpoint) ends here with one clear line and a non-zero exit
        with accelerator.main_process_first():  # the main process encodes and caches the ids; the others reuse them
            tokenizer, ids = load_tokenizer_and_ids(args)
        train_ids, val_ids = split_train_val(ids, args.validation_split_percentage)
        model = build_model(args, tokenizer)
        checkpoint = resolve_checkpoint(args.resume_from_checkpoint, args.output_dir)
        saved_tokenizer = read_meta(checkpoint).get("extra", {}).get("tokenizer") if checkpoint else None
        if saved_tokenizer not in (None, tokenizer_fingerprint(tokenizer)):
            raise ValueError(f"{checkpoint} was trained with a different tokenizer/vocabulary than this run's")
    except ValueError as err:
        raise SystemExit(f"train_lm.py: error: {err}") from None
    model.generation_config = GenerationConfig(
        do_sample=True,
        temperature=0.8,
        top_k=200,
        max_new_tokens=500,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    n_params = sum(p.numel() for p in model.parameters())
    logger.info(
        f"{len(ids):,} tokens (train {len(train_ids):,}, validation {len(val_ids):,}, vocabulary {len(tokenizer)}); "
        f"model {n_params / 1e6:.2f}M parameters"
    )
    optimizer = configure_optimizer(model, args)
    scheduler = get_cosine_with_warmup_schedule(
        optimizer, warmup_steps=args.warmup_steps, decay_steps=args.max_train_steps, min_lr=args.min_learning_rate
    )
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    sampler = RandomWindowSampler(
        train_ids, args.block_size, args.per_device_train_batch_size, [args.seed, accelerator.process_index]
    )

    start_step, history = 0, []
    if checkpoint is not None:
        state = load_checkpoint(accelerator, checkpoint)
        changed = {
            k: (state.args.get(k), v)
            for k, v in vars(args).items()
            if k in RESUME_MUST_MATCH and state.args.get(k) != v
        }
        if changed:
            logger.warning(f"Resuming with settings that differ from the checkpoint's (saved, now): {changed}")
        start_step, history = state.step, state.extra.get("history", [])
        if state.data_state is not None:
            sampler.load_state_dict(state.data_state)
        logger.info(f"Resumed from {checkpoint} at step {start_step}")

    if args.with_tracking:
        accelerator.init_trackers("train_lm", config=tracker_config(args))

    tokens_per_step = (
        args.per_device_train_batch_size
        * args.block_size
        * args.gradient_accumulation_steps
        * accelerator.num_processes
    )
    logger.info(
        f"Training to step {args.max_train_steps} from step {start_step}: {tokens_per_step:,} tokens per step "
        f"({accelerator.num_processes} process(es), mixed precision {accelerator.mixed_precision})"
    )

    # Evaluation runs the module without its DDP wrapper: DDP's forward would sync buffers with the other processes,
    # which then hangs whenever processes score different numbers of batches (the last full-split windows).
    eval_model = accelerator.unwrap_model(model)

    def evaluate(step: int) -> dict:
        record = {
            "step": step,
            "train_loss": estimate_loss(eval_model, accelerator, train_ids, args, [args.seed, 2]),
            "eval_loss": estimate_loss(eval_model, accelerator, val_ids, args, [args.seed, 3]),
        }
        history.append(record)
        accelerator.print(f"step {step}: train loss {record['train_loss']:.4f}, val loss {record['eval_loss']:.4f}")
        if args.sample_max_new_tokens > 0 and accelerator.is_main_process:
            text = sample_text(
                accelerator.unwrap_model(model, keep_torch_compile=False), tokenizer, args, args.sample_max_new_tokens
            )
            accelerator.print(f"--- sample at step {step} ---\n{text}\n---")
        if args.with_tracking:
            accelerator.log({k: v for k, v in record.items() if k != "step"}, step=step)
        return record

    if start_step == 0:
        evaluate(0)

    train_time, start_time = 0.0, time.perf_counter()
    running_loss, running_n, tokens_per_second = 0.0, 0, 0.0
    progress = tqdm(
        total=args.max_train_steps,
        initial=start_step,
        disable=not accelerator.is_local_main_process,
        desc="train",
        mininterval=0.1 if sys.stderr.isatty() else 30.0,  # a log file gets a line every 30 s, not every step
    )
    model.train()
    for step in range(start_step, args.max_train_steps):
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
        completed = step + 1

        if completed % args.logging_steps == 0 or completed == args.max_train_steps:
            mean_loss = (running_loss / running_n).item()  # .item() syncs the device, so the timing below is honest
            running_loss, running_n = 0.0, 0
            step_time = time.perf_counter() - t0
            train_time += step_time
            tokens_per_second = tokens_per_step * (completed - start_step) / train_time
            record = {"step": completed, "loss": mean_loss, "learning_rate": lr}
            history.append(record)
            progress.set_postfix(
                loss=f"{mean_loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_second:,.0f}", refresh=False
            )
            if args.with_tracking:
                accelerator.log({"train/loss": mean_loss, "train/learning_rate": lr}, step=completed)
        else:
            train_time += time.perf_counter() - t0
        progress.update(1)

        if completed % args.eval_steps == 0 or completed == args.max_train_steps:
            evaluate(completed)
        if args.checkpointing_steps and (
            completed % args.checkpointing_steps == 0 or completed == args.max_train_steps
        ):
            save_checkpoint(
                accelerator,
                args.output_dir,
                completed,
                args=args,
                data_state=sampler.state_dict(),
                extra={"history": history, "tokenizer": tokenizer_fingerprint(tokenizer)},
                total_limit=args.checkpoints_total_limit,
            )
    progress.close()
    train_runtime = time.perf_counter() - start_time

    final = next((r for r in reversed(history) if "eval_loss" in r), None)
    if final is None or final["step"] != max(start_step, args.max_train_steps):
        final = evaluate(max(start_step, args.max_train_steps))
    eval_loss_full = full_split_loss(eval_model, accelerator, val_ids, args)
    accelerator.print(
        f"validation loss over the whole split ({len(val_ids):,} tokens, block_size windows): {eval_loss_full:.4f}"
    )

    accelerator.wait_for_everyone()
    unwrapped = accelerator.unwrap_model(model, keep_torch_compile=False)
    unwrapped.save_pretrained(
        args.output_dir, is_main_process=accelerator.is_main_process, save_function=accelerator.save
    )
    if accelerator.is_main_process:
        tokenizer.save_pretrained(args.output_dir)
        results = {
            "step": final["step"],
            "eval_loss": final["eval_loss"],
            "eval_loss_full": eval_loss_full,
            "perplexity": math.exp(eval_loss_full),
            "train_loss": final["train_loss"],
            "train_runtime": train_runtime,
            "train_tokens_per_second": tokens_per_second,
            "train_steps_this_run": max(0, args.max_train_steps - start_step),
            "num_parameters": n_params,
            "num_processes": accelerator.num_processes,
        }
        write_all_results(args.output_dir, results)
        with open(Path(args.output_dir) / "log_history.json", "w", encoding="utf-8") as f:
            json.dump(history, f, indent=1)
        plot_curves(
            history,
            [["loss", "train_loss", "eval_loss"]],
            Path(args.output_dir) / "loss_curve.png",
            title=f"NanoGPT ({n_params / 1e6:.2f}M parameters), block {args.block_size}",
            labels={
                "loss": "training batches (running mean)",
                "train_loss": f"train split ({args.eval_iters} batches)",
                "eval_loss": f"validation split ({args.eval_iters} batches)",
            },
        )
        logger.info(f"Saved the model, tokenizer and results to {args.output_dir}: {json.dumps(results)}")
        if args.sample_max_new_tokens > 0:
            text = sample_text(unwrapped, tokenizer, args, args.sample_max_new_tokens)
            accelerator.print(f"--- final sample ---\n{text}\n---")
        if args.push_to_hub:
            folder = export_and_push(unwrapped, tokenizer, args, results)
            logger.info(f"Pushed {folder} to https://huggingface.co/{args.hub_model_id}")
    accelerator.end_training()


if __name__ == "__main__":
    try:
        main()
    except HubPushError as err:  # the model is saved; only the upload failed
        raise SystemExit(f"train_lm.py: error: {err}") from None

"""Evaluation of `train_lm.py`, the nanoGPT way: the loss estimated on a few random batches of each split, the exact
loss over the whole validation split, and a sample."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from nanoformer.training.lm_data import RandomWindowSampler, full_split_windows


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


def make_evaluate(args, accelerator, tokenizer, train_ids, val_ids, state):
    """``evaluate(model, step) -> record``: nanoGPT's estimate of both splits' loss, a sample, logged to history."""

    def evaluate(model, step: int) -> dict:
        # The module without its DDP wrapper: DDP's forward would sync buffers with the other processes, which hangs
        # whenever processes score different numbers of batches (the last full-split windows).
        eval_model = accelerator.unwrap_model(model)
        record = {
            "step": step,
            "train_loss": estimate_loss(eval_model, accelerator, train_ids, args, [args.seed, 2]),
            "eval_loss": estimate_loss(eval_model, accelerator, val_ids, args, [args.seed, 3]),
        }
        state.history.append(record)
        accelerator.print(f"step {step}: train loss {record['train_loss']:.4f}, val loss {record['eval_loss']:.4f}")
        if args.sample_max_new_tokens > 0 and accelerator.is_main_process:
            plain = accelerator.unwrap_model(model, keep_torch_compile=False)
            text = sample_text(plain, tokenizer, args, args.sample_max_new_tokens)
            accelerator.print(f"--- sample at step {step} ---\n{text}\n---")
        if args.with_tracking:
            accelerator.log({k: v for k, v in record.items() if k != "step"}, step=step)
        return record

    return evaluate

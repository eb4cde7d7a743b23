"""Learning-rate schedules as `torch.optim.lr_scheduler.LambdaLR`, so `accelerator.save_state` checkpoints them.

- `cosine_with_warmup_lr`: nanoGPT's ``get_lr`` — linear warmup, cosine decay to a minimum lr, then flat.
- `noam_lr`: "Attention Is All You Need" (eq. 3) — d_model^-0.5 · min(step^-0.5, step · warmup^-1.5), times a scale.
- `linear_with_warmup_lr` / `constant_with_warmup_lr`: the HF example scripts' ``--lr_scheduler_type linear`` and
  ``constant_with_warmup`` (with the same warmup as the cosine schedule; linear decays to the minimum lr).
- `get_schedule`: any of them by name, as ``--lr_scheduler_type`` gives it.

Both are plain functions of the 0-based optimizer step giving an *absolute* learning rate; the ``get_*_schedule``
helpers wrap them as LambdaLR multipliers of each param group's initial lr (so e.g. the schedule's peak should equal
the optimizer's lr for the cosine schedule, and any optimizer lr works for Noam, whose value is absolute).
LambdaLR evaluates the function at ``last_epoch`` = the number of `scheduler.step()` calls so far, which is the index
of the next optimizer step: step k (0-based) trains with ``fn(k)``, exactly like nanoGPT's ``get_lr(iter_num)``.

With Accelerate, step the scheduler once per optimizer update: either prepare it with
``Accelerator(step_scheduler_with_optimizer=False)`` or keep it out of `prepare` and `register_for_checkpointing` it
(a prepared scheduler is otherwise stepped ``num_processes`` times per update).
"""

from __future__ import annotations

import math
from functools import partial

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR


def cosine_with_warmup_lr(step: int, *, max_lr: float, min_lr: float, warmup_steps: int, decay_steps: int) -> float:
    """nanoGPT's schedule at 0-based `step`: linear warmup to `max_lr`, cosine decay to `min_lr` at `decay_steps`.

    Warmup is ``max_lr * (step + 1) / (warmup_steps + 1)`` (never 0, so the first step learns something); after
    `decay_steps` the lr stays at `min_lr`.
    """
    if step < warmup_steps:
        return max_lr * (step + 1) / (warmup_steps + 1)
    if step >= decay_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
    coeff = 0.5 * (1.0 + math.cos(math.pi * progress))  # 1 → 0
    return min_lr + coeff * (max_lr - min_lr)


def linear_with_warmup_lr(step: int, *, max_lr: float, min_lr: float, warmup_steps: int, decay_steps: int) -> float:
    """Linear warmup to `max_lr` (as `cosine_with_warmup_lr`), then a straight line down to `min_lr` at `decay_steps`."""
    if step < warmup_steps:
        return max_lr * (step + 1) / (warmup_steps + 1)
    if step >= decay_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
    return max_lr - progress * (max_lr - min_lr)


def constant_with_warmup_lr(step: int, *, max_lr: float, min_lr: float, warmup_steps: int, decay_steps: int) -> float:
    """Linear warmup to `max_lr`, then `max_lr` (`min_lr` and `decay_steps` are unused)."""
    return max_lr * (step + 1) / (warmup_steps + 1) if step < warmup_steps else max_lr


def noam_lr(step: int, *, d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """The Transformer paper's lr at 0-based `step`: ``scale · d_model^-0.5 · min(s^-0.5, s · warmup^-1.5)``, s = step+1.

    It rises linearly for `warmup_steps` steps, peaks at ``scale · (d_model · warmup_steps)^-0.5`` and then decays as
    the inverse square root of the step.
    """
    if warmup_steps <= 0:
        raise ValueError(f"noam_lr needs warmup_steps > 0, got {warmup_steps}")
    s = step + 1
    return scale * d_model**-0.5 * min(s**-0.5, s * warmup_steps**-1.5)


def _relative(step: int, *, fn, base_lr: float) -> float:
    # LambdaLR multiplies the group's initial lr by this factor, so divide `base_lr` back out.
    return fn(step) / base_lr


def _lambda_lr(optimizer: Optimizer, fn, last_epoch: int, base_lr: float | None = None) -> LambdaLR:
    """LambdaLR following `fn`: absolute for each group when `base_lr` is None, else relative to `base_lr`."""
    lambdas = []
    for group in optimizer.param_groups:
        divisor = base_lr if base_lr is not None else group.get("initial_lr", group["lr"])
        if divisor <= 0:
            raise ValueError(f"learning rate must be > 0 to carry a schedule, got {divisor}")
        # functools.partial (not a lambda) keeps the scheduler picklable.
        lambdas.append(partial(_relative, fn=fn, base_lr=divisor))
    return LambdaLR(optimizer, lambdas, last_epoch=last_epoch)


def get_cosine_with_warmup_schedule(
    optimizer: Optimizer,
    *,
    warmup_steps: int,
    decay_steps: int,
    min_lr: float,
    max_lr: float | None = None,
    last_epoch: int = -1,
) -> LambdaLR:
    """LambdaLR for `cosine_with_warmup_lr`; `max_lr` defaults to the optimizer's (first group's) lr.

    The schedule is applied as the factor ``lr(step) / max_lr`` to every param group's own lr, so groups keep their
    ratio (nanoGPT uses one lr for all groups, where this is exactly its ``get_lr``).
    """
    if max_lr is None:
        max_lr = optimizer.param_groups[0].get("initial_lr", optimizer.param_groups[0]["lr"])
    if min_lr > max_lr:
        raise ValueError(f"min learning rate ({min_lr}) must not exceed the peak learning rate ({max_lr})")
    fn = partial(
        cosine_with_warmup_lr, max_lr=max_lr, min_lr=min_lr, warmup_steps=warmup_steps, decay_steps=decay_steps
    )
    return _lambda_lr(optimizer, fn, last_epoch, base_lr=max_lr)


def get_noam_schedule(
    optimizer: Optimizer, *, d_model: int, warmup_steps: int, scale: float = 1.0, last_epoch: int = -1
) -> LambdaLR:
    """LambdaLR for `noam_lr`: every param group follows the absolute Noam lr, whatever lr the optimizer was given."""
    fn = partial(noam_lr, d_model=d_model, warmup_steps=warmup_steps, scale=scale)
    return _lambda_lr(optimizer, fn, last_epoch)


SCHEDULES = {"cosine": cosine_with_warmup_lr, "linear": linear_with_warmup_lr, "constant_with_warmup": constant_with_warmup_lr}


def get_schedule(
    name: str, optimizer: Optimizer, *, warmup_steps: int, decay_steps: int, min_lr: float, d_model: int = 0,
    noam_scale: float = 1.0,
) -> LambdaLR:
    """The ``--lr_scheduler_type`` schedule: "noam" (absolute, needs `d_model`), or "cosine" / "linear" /
    "constant_with_warmup" from the optimizer's lr down to `min_lr` at `decay_steps`."""
    if name == "noam":
        return get_noam_schedule(optimizer, d_model=d_model, warmup_steps=warmup_steps, scale=noam_scale)
    if name not in SCHEDULES:
        raise ValueError(f"unknown lr_scheduler_type {name!r}; choose from noam, {', '.join(SCHEDULES)}")
    max_lr = optimizer.param_groups[0].get("initial_lr", optimizer.param_groups[0]["lr"])
    if min_lr > max_lr:
        raise ValueError(f"min learning rate ({min_lr}) must not exceed the peak learning rate ({max_lr})")
    fn = partial(SCHEDULES[name], max_lr=max_lr, min_lr=min_lr, warmup_steps=warmup_steps, decay_steps=decay_steps)
    return _lambda_lr(optimizer, fn, -1, base_lr=max_lr)

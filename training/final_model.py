"""Which weights a training run ends with: the last step's, the best evaluated, or an average of the last checkpoints.

- ``--load_best_model_at_end`` (HF Trainer's name): every evaluation that improves ``--metric_for_best_model`` writes
  the model to ``output_dir/best_model`` (`save_best_model`); at the end those weights are loaded back.
- ``--average_last_checkpoints N``: the paper's "single model obtained by averaging the last 5 checkpoints" (fairseq's
  ``average_checkpoints.py``): the last N ``step_*`` checkpoints, ``--checkpointing_steps`` apart, are averaged into
  the model (`nanoformer.training.average_checkpoints`), which is then evaluated again.

`choose_final_model` returns the final model's evaluation results and keeps the last step's as ``last_step_*``, so
``all_results.json`` always reports what the choice replaced.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from accelerate.logging import get_logger
from nanoformer.training.arguments import UsageError
from nanoformer.training.average_checkpoints import load_averaged_weights, select_checkpoints

logger = get_logger(__name__)
BEST_MODEL_DIR = "best_model"  # the best evaluated weights, with --load_best_model_at_end


def save_best_model(accelerator, model, output_dir: str) -> None:
    """Keep the weights of the best evaluation so far in ``output_dir/best_model`` (a temporary folder renamed into
    place, so a killed run keeps the previous best)."""
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        best = Path(output_dir) / BEST_MODEL_DIR
        tmp = best.with_name(f".tmp-{BEST_MODEL_DIR}")
        shutil.rmtree(tmp, ignore_errors=True)
        accelerator.unwrap_model(model).save_pretrained(tmp)
        shutil.rmtree(best, ignore_errors=True)
        tmp.rename(best)
    accelerator.wait_for_everyone()


def choose_final_model(args, accelerator, model, state, evaluate, last: dict, data_state) -> dict:
    """Load the final model's weights into `model` (the last step's, the best evaluated, or the average of the last
    checkpoints) and return its evaluation results, with the last step's scores kept as ``last_step_*``."""
    kept = {f"last_step_{k}": last.get(k) for k in ("eval_loss", "eval_ppl", "eval_bleu")}
    unwrapped = accelerator.unwrap_model(model)
    if args.load_best_model_at_end and state.best_step is not None and state.best_step != state.step:
        best_dir = Path(args.output_dir) / BEST_MODEL_DIR
        if not (best_dir / "model.safetensors").is_file():
            raise UsageError(f"--load_best_model_at_end: {best_dir} (the step {state.best_step} model) is gone")
        load_averaged_weights(unwrapped, [best_dir])
        record = next(r for r in reversed(state.history) if r["step"] == state.best_step and "eval_loss" in r)
        logger.info(f"Final model: the best evaluated one (step {state.best_step}, {args.metric_for_best_model})")
        return {**last, **record, **kept, "final_model": "best", "final_model_steps": [state.best_step]}
    if args.average_last_checkpoints:
        chosen = select_checkpoints(args.output_dir, last=args.average_last_checkpoints, every=args.checkpointing_steps)
        steps = [step for step, _ in chosen]
        load_averaged_weights(unwrapped, [path for _, path in chosen])
        logger.info(f"Final model: the average of the checkpoints of steps {steps}")
        if evaluate is not None:
            last = evaluate(model, state.step, data_state["counters"])
            state.history.pop()  # the curves show the training run; the average is reported in all_results.json
        return {**last, **kept, "final_model": "average", "final_model_steps": steps}
    return {**last, **kept, "final_model": "last", "final_model_steps": [state.step]}

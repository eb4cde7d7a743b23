"""The pieces both trainers share, written once: flags, set-up, loop state, resume, final save, push, CLI errors.

Each trainer (`train_lm.py`, `train_mt.py`) keeps its own visible training loop, nanoGPT-style; what is here is the
scaffolding around it:

- `add_common_arguments`: the flags both scripts have (same names, help and validation; each script sets its own
  defaults with ``parser.set_defaults``), with the names of HF's ``run_*_no_trainer.py`` scripts as aliases.
- `check_common_arguments`: every problem a user can make with those flags, found at parse time (before any data is
  read or any tokenizer trained): push without a repo id or offline, unknown trackers, an output folder that already
  holds a run, a missing or foreign ``--resume_from_checkpoint``.
- `make_accelerator`: Accelerator + logging + tracker configuration.
- `LoopState`: the typed training-loop bookkeeping (step, history, timers, counters, best score) that checkpoints
  carry (`state_dict` / `load_state_dict`).
- `resume`, `save`: checkpoint round trip of accelerator state, loop state and data position.
- `save_final`: model, tokenizer (its ``model_max_length`` = the model's position table, no loading leftovers),
  ``all_results.json``, ``training_args.json``, ``log_history.json``, ``training_curves.png``.
- `export_and_push`: a Hub export of the final model, then the upload.
- `StopOnSignal`: SIGTERM/SIGINT finish the current update, checkpoint and exit with `PREEMPTED_EXIT_CODE`.
- `CliParser` / `run_cli`: one error policy: one line naming the problem, exit status 2, no traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from nanoformer.tokenization import match_model_max_length, save_tokenizer
from nanoformer.training.arguments import (  # noqa: F401 - CliParser and run_cli re-exported for the trainers
    CliParser,
    UsageError,
    non_negative_float,
    non_negative_int,
    parse_config_overrides,
    positive_float,
    positive_int,
    run_cli,
    unit_interval,
)
from nanoformer.training.checkpointing import load_checkpoint, read_meta, resolve_checkpoint, save_checkpoint
from nanoformer.training.reporting import (
    TRAINING_ARGS_FILE,
    accelerator_tracking_kwargs,
    plot_curves,
    run_environment,
    write_all_results,
    write_training_args,
)
from transformers import PretrainedConfig

logger = logging.getLogger(__name__)

# A run stopped by SIGTERM/SIGINT exits with this status after writing its checkpoint (EX_TEMPFAIL: "try again"),
# so a job script can tell "preempted, resume me" from success (0) and from a usage error (2).
PREEMPTED_EXIT_CODE = 75
CURVES_FILE = "training_curves.png"
# What a finished or interrupted run leaves in --output_dir; --overwrite_output_dir removes exactly these.
RUN_FILES = ("all_results.json", "log_history.json", CURVES_FILE, "config.json", "model.safetensors",
             "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
             TRAINING_ARGS_FILE)  # fmt: skip
RUN_FOLDERS = ("runs", "hub", "tokenizer", "best_model", ".tmp-best_model")


# --------------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------------


SCHEDULER_CHOICES = ("cosine", "linear", "constant_with_warmup")


def add_common_arguments(
    parser: argparse.ArgumentParser, *, scheduler_choices: Sequence[str] = SCHEDULER_CHOICES
) -> None:
    """Declare the flags both trainers share. Defaults are generic; each script overrides them with set_defaults."""
    model = parser.add_argument_group("model and tokenizer")
    model.add_argument(
        "--model_name_or_path",
        default=None,
        help="Continue from a saved model: a folder written by this trainer, a Hub export or a Hub id.",
    )
    model.add_argument("--tokenizer_name", default=None, help="A saved tokenizer folder (or Hub id) to use.")
    model.add_argument(
        "--trust_remote_code",
        action="store_true",
        help="Allow custom modelling code of --model_name_or_path/--tokenizer_name that nanoformer does not provide.",
    )
    model.add_argument(
        "--config_overrides",
        default=None,
        help="Config fields of a fresh model: 'key=value,...' (JSON values allowed, e.g. "
        'rope_parameters={"rope_type":"dynamic","factor":2.0}) or one JSON object.',
    )

    optim = parser.add_argument_group("optimisation")
    optim.add_argument(
        "--lr_scheduler_type",
        default=scheduler_choices[0],
        choices=scheduler_choices,
        help="Learning-rate schedule after the linear warmup (cosine and linear decay to the minimum lr).",
    )
    optim.add_argument("--learning_rate", type=positive_float, default=1e-3, help="Peak learning rate.")
    optim.add_argument(
        "--warmup_steps", "--num_warmup_steps", type=non_negative_int, default=0, help="Steps of linear warmup."
    )
    optim.add_argument("--weight_decay", type=non_negative_float, default=0.0, help="AdamW weight decay.")
    optim.add_argument("--adam_beta1", type=unit_interval, default=0.9, help="Adam beta1, in [0, 1).")
    optim.add_argument("--adam_beta2", type=unit_interval, default=0.999, help="Adam beta2, in [0, 1).")
    optim.add_argument("--adam_epsilon", type=positive_float, default=1e-8, help="Adam epsilon.")
    optim.add_argument(
        "--max_grad_norm", type=non_negative_float, default=1.0, help="Gradient-norm clipping (0 disables it)."
    )
    optim.add_argument(
        "--gradient_accumulation_steps", type=positive_int, default=1, help="Batches accumulated per optimizer step."
    )
    optim.add_argument(
        "--max_train_steps",
        type=positive_int,
        default=None,
        help="Optimizer steps in total (default: the script's recipe, or the length of --num_train_epochs).",
    )
    optim.add_argument(
        "--num_train_epochs",
        type=positive_float,
        default=None,
        help="Passes over the training data; --max_train_steps, when also given, stops the run earlier.",
    )
    optim.add_argument(
        "--max_train_samples", type=positive_int, default=None, help="Train on the first N examples only."
    )
    optim.add_argument("--seed", type=int, default=42, help="Seed of the model init, dropout and data order.")

    out = parser.add_argument_group("evaluation, logging, checkpoints and output")
    out.add_argument("--per_device_eval_batch_size", type=positive_int, default=None, help="Evaluation batch size.")
    out.add_argument("--eval_steps", type=positive_int, default=1000, help="Evaluate every N steps and at the end.")
    out.add_argument("--logging_steps", type=positive_int, default=50, help="Log loss, lr and speed every N steps.")
    out.add_argument("--output_dir", required=True, help="Where the final model, results, curves and checkpoints go.")
    out.add_argument(
        "--overwrite_output_dir",
        action="store_true",
        help="Start clean in an --output_dir that holds an earlier run (its checkpoints and results are deleted).",
    )
    out.add_argument(
        "--checkpointing_steps",
        type=positive_int,
        default=None,
        help="Save a resumable checkpoint (output_dir/step_N) every N steps and at the end.",
    )
    out.add_argument(
        "--checkpoints_total_limit", type=positive_int, default=None, help="Keep only the newest N checkpoints."
    )
    out.add_argument(
        "--resume_from_checkpoint",
        default=None,
        help="A step_N folder, or 'latest' for the newest complete one in --output_dir (none yet: start fresh).",
    )
    out.add_argument("--with_tracking", action="store_true", help="Log metrics to the trackers of --report_to.")
    out.add_argument(
        "--report_to", default="tensorboard", help="Trackers for --with_tracking: tensorboard, trackio or all."
    )
    out.add_argument("--push_to_hub", action="store_true", help="Export the final model (output_dir/hub), upload it.")
    out.add_argument("--hub_model_id", default=None, help="The Hub repo to push to (user/name).")


def holds_run(output_dir: str | os.PathLike) -> bool:
    """Whether `output_dir` holds an earlier run (results, a final model or checkpoints)."""
    root = Path(output_dir)
    if not root.is_dir():
        return False
    return any((root / name).exists() for name in RUN_FILES[:2] + ("model.safetensors",)) or any(
        child.name.startswith(("step_", ".tmp-step_")) for child in root.iterdir()
    )


def clear_run(output_dir: str | os.PathLike) -> None:
    """Delete what an earlier run left in `output_dir` (checkpoints, results, final model, logs); nothing else."""
    root = Path(output_dir)
    for child in root.iterdir():
        if child.name.startswith(("step_", ".tmp-step_")) or child.name in RUN_FOLDERS:
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        elif child.name in RUN_FILES:
            child.unlink()


def remove_if_empty(output_dir: str | os.PathLike) -> None:
    """Remove `output_dir` if it holds nothing (a run that failed before writing anything); keep it otherwise."""
    with contextlib.suppress(OSError):
        os.rmdir(output_dir)


def check_common_arguments(args: argparse.Namespace, parser: argparse.ArgumentParser, trainer: str) -> None:
    """Validate the shared flags before any work; `parser.error` (one line, exit 2) on the first problem.

    Sets ``args.checkpoint`` to the resolved ``--resume_from_checkpoint`` folder (None: start fresh).
    """
    if args.push_to_hub and not args.hub_model_id:
        parser.error("--push_to_hub needs --hub_model_id")
    if args.push_to_hub:
        from nanoformer.hub.push import hub_offline

        if hub_offline():  # fail now, not after training
            parser.error("--push_to_hub: HF_HUB_OFFLINE is set (offline mode); unset it to push, or drop --push_to_hub")
    try:
        accelerator_tracking_kwargs(args.with_tracking, args.report_to, ".")
    except ValueError as err:
        parser.error(str(err))
    out = Path(args.output_dir)
    if out.exists() and not out.is_dir():
        parser.error(f"--output_dir {out}: exists and is not a folder")
    probe = next((p for p in [out.resolve(), *out.resolve().parents] if p.exists()), Path("."))
    if not probe.is_dir():
        parser.error(f"--output_dir {out}: cannot be created ({probe} is a file)")
    if not os.access(probe, os.W_OK | os.X_OK):
        parser.error(f"--output_dir {out}: not writable ({probe} is read-only for this user)")
    if args.resume_from_checkpoint and args.overwrite_output_dir:
        parser.error("--resume_from_checkpoint and --overwrite_output_dir contradict each other; give one")
    if not args.resume_from_checkpoint and not args.overwrite_output_dir and holds_run(out):
        # A new run would mix its files with the old one's, and a later `latest` would resume the old run.
        parser.error(
            f"--output_dir {out} already holds a run; pass --resume_from_checkpoint latest to continue it, "
            "--overwrite_output_dir to start clean, or another --output_dir"
        )
    try:
        args.checkpoint = resolve_checkpoint(args.resume_from_checkpoint, out)
    except ValueError as err:
        parser.error(str(err))
    if args.resume_from_checkpoint and args.checkpoint is None and holds_run(out):
        parser.error(
            f"--resume_from_checkpoint latest: {out} holds a run but no checkpoint to continue from; "
            "pass --overwrite_output_dir to start clean, or another --output_dir"
        )
    if args.checkpoint is not None:
        saved_by = read_meta(args.checkpoint).get("extra", {}).get("trainer", trainer)
        if saved_by != trainer:
            parser.error(f"--resume_from_checkpoint {args.checkpoint}: a {saved_by} checkpoint, not one of {trainer}")


def looks_local(name: str) -> bool:
    """Whether a model/tokenizer name is meant as a local folder rather than a Hub id ("user/name")."""
    return Path(name).exists() or name.startswith(("/", ".", "~")) or name.count("/") > 1


# What the Hub accepts as a repo id ("name" or "namespace/name"); anything else can only be a local folder.
HUB_ID = re.compile(r"^(?:[\w.-]+/)?[\w.-]+$")


def missing_model_folder(name: str) -> bool:
    """Whether `name` (a --model_dir) can be neither a folder here nor a Hub repo id: a "folder not found" error."""
    return not Path(name).expanduser().is_dir() and (looks_local(name) or not HUB_ID.match(name))


def check_model_arguments(
    args: argparse.Namespace, parser: argparse.ArgumentParser, fresh_config: Callable[[], PretrainedConfig]
) -> PretrainedConfig:
    """Check --model_name_or_path, --tokenizer_name and --config_overrides before any data is read; returns the
    config the model will start from (the saved one, or `fresh_config()`), overrides not applied.

    nanoformer's model types are registered first, so its own output folders and Hub exports load with its code and
    need no --trust_remote_code; other custom code needs it.
    """
    import nanoformer.modeling  # noqa: F401 - registers NanoGPT and the translator with the Auto classes
    from transformers import AutoConfig

    for flag in ("model_name_or_path", "tokenizer_name"):
        name = getattr(args, flag)
        if name and looks_local(name) and not Path(name).expanduser().is_dir():
            parser.error(f"--{flag} {name}: folder not found")
    try:
        if args.model_name_or_path:
            config = AutoConfig.from_pretrained(args.model_name_or_path, trust_remote_code=args.trust_remote_code)
        else:
            config = fresh_config()
        overrides = parse_config_overrides(args.config_overrides, config)
        type(config)(**{**config.to_dict(), **overrides})  # the config's own checks (sizes, choices)
    except (OSError, ValueError) as error:
        parser.error(_first_line(error))
    return config


# --------------------------------------------------------------------------------------------------------------------
# Set-up
# --------------------------------------------------------------------------------------------------------------------


def make_accelerator(args: argparse.Namespace, **kwargs: Any) -> Accelerator:
    """The run's Accelerator (gradient accumulation, trackers under output_dir/runs) and logging configuration.

    Our messages (``nanoformer.*`` and the script's own) are logged at INFO, libraries at WARNING. An earlier run in
    --output_dir is removed here when --overwrite_output_dir is given.
    """
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    for ours in ("nanoformer", "__main__"):
        logging.getLogger(ours).setLevel(logging.INFO)
    accelerator = Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        **accelerator_tracking_kwargs(args.with_tracking, args.report_to, args.output_dir),
        **kwargs,
    )
    if args.overwrite_output_dir and accelerator.is_main_process and Path(args.output_dir).is_dir():
        clear_run(args.output_dir)
    accelerator.wait_for_everyone()
    os.makedirs(args.output_dir, exist_ok=True)
    return accelerator


def init_trackers(accelerator: Accelerator, args: argparse.Namespace, project: str) -> None:
    """Start the --report_to trackers (a tracker that fails to start is a one-line error)."""
    if not args.with_tracking:
        return
    from nanoformer.training.reporting import tracker_config

    try:
        accelerator.init_trackers(project, tracker_config(args))
    except Exception as error:  # tracker packages raise anything: missing credentials, bad paths...
        raise UsageError(f"--report_to {args.report_to}: cannot start the tracker: {_first_line(error)}") from error


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# --------------------------------------------------------------------------------------------------------------------
# Loop state, checkpoints and the final save
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class LoopState:
    """Bookkeeping of a training loop that a checkpoint carries, so a resumed run continues its counts and logs.

    `best_metric` / `best_step` track the best evaluation score so far (higher or lower is better, as the trainer
    says); `bad_evals` counts evaluations since it last improved (early stopping).
    """

    step: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    train_seconds: float = 0.0  # time inside training steps (evaluation and saving excluded)
    data_wait_seconds: float = 0.0  # part of train_seconds spent waiting for a batch
    train_tokens: int = 0  # tokens trained on by this process (targets only, for the translator)
    nonfinite_steps: int = 0  # updates skipped for non-finite gradients
    runtime_before: float = 0.0  # wall time of the runs this one resumed
    best_metric: float | None = None
    best_step: int | None = None
    bad_evals: int = 0

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for f in fields(self):
            if f.name in state:
                setattr(self, f.name, state[f.name])

    @staticmethod
    def from_legacy_extra(extra: dict[str, Any]) -> dict[str, Any]:
        """The loop state of a checkpoint written before LoopState existed (an untyped ``extra`` dict)."""
        best = extra.get("best") or {}
        renamed = {"step_seconds": "train_seconds", "target_tokens": "train_tokens", "train_runtime": "runtime_before"}
        state = {renamed.get(k, k): v for k, v in extra.items() if renamed.get(k, k) in LoopState.__dataclass_fields__}
        return {**state, "best_metric": best.get("value"), "best_step": best.get("step")}

    def record_eval(self, value: float, higher_is_better: bool) -> bool:
        """Update the best score with an evaluation at the current step; returns whether it improved."""
        better = self.best_metric is None or (
            value > self.best_metric if higher_is_better else value < self.best_metric
        )
        if better:
            self.best_metric, self.best_step, self.bad_evals = value, self.step, 0
        else:
            self.bad_evals += 1
        return better


def save(
    accelerator: Accelerator,
    args: argparse.Namespace,
    state: LoopState,
    trainer: str,
    *,
    data_state: Any = None,
    runtime: float = 0.0,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Checkpoint ``output_dir/step_<state.step>`` with the loop state (and `runtime` of this run so far)."""
    loop_state = {**state.state_dict(), "runtime_before": state.runtime_before + runtime}
    return save_checkpoint(
        accelerator,
        args.output_dir,
        state.step,
        args={k: v for k, v in vars(args).items() if k != "checkpoint"},
        data_state=data_state,
        extra={"trainer": trainer, "loop_state": loop_state, **(extra or {})},
        total_limit=args.checkpoints_total_limit,
    )


def resume(accelerator: Accelerator, checkpoint: Path | None, state: LoopState, data: Any = None):
    """Restore accelerator state, `state` and `data` (anything with load_state_dict) from `checkpoint`, if any.

    Returns the `CheckpointState` (None when starting fresh). A checkpoint of another model is a `UsageError`.
    """
    if checkpoint is None:
        return None
    try:
        saved = load_checkpoint(accelerator, checkpoint)
    except (RuntimeError, ValueError, KeyError) as error:  # shapes or keys of another model
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        detail = next(
            (line for line in lines if line.startswith(("size mismatch", "Missing key", "Unexpected key"))), None
        )
        raise UsageError(
            f"--resume_from_checkpoint {checkpoint}: does not fit this model/optimizer: {detail or _first_line(error)}"
        ) from error
    state.load_state_dict(saved.extra.get("loop_state") or LoopState.from_legacy_extra(saved.extra))
    state.step = saved.step
    if data is not None and saved.data_state is not None:
        data.load_state_dict(saved.data_state)
    logger.info(f"Resumed from {checkpoint} at step {saved.step}")
    return saved


def save_final(
    accelerator: Accelerator,
    model: torch.nn.Module,
    tokenizer,
    output_dir: str | os.PathLike,
    results: dict[str, Any],
    history: list[dict[str, Any]],
    *,
    curves: Sequence[str | Sequence[str]],
    title: str,
    labels: dict[str, str] | None = None,
    args: argparse.Namespace | None = None,
    trainer: str | None = None,
) -> None:
    """Write the final `model` (unwrapped; call on every process), tokenizer, all_results.json, training_args.json
    (`args`, `trainer` and where the run ran), log_history.json and training_curves.png to `output_dir`, the same
    files for both trainers."""
    accelerator.wait_for_everyone()
    model.save_pretrained(output_dir, is_main_process=accelerator.is_main_process, save_function=accelerator.save)
    if not accelerator.is_main_process:
        return
    save_tokenizer(match_model_max_length(tokenizer, model.config), output_dir)  # the saved limit is the model's
    write_all_results(output_dir, results)
    if args is not None:
        write_training_args(output_dir, args, trainer=trainer or "unknown", environment=run_environment(accelerator))
    with open(Path(output_dir) / "log_history.json", "w", encoding="utf-8") as f:
        json.dump(history, f, indent=1)
    plot_curves(history, curves, Path(output_dir) / CURVES_FILE, title=title, labels=labels)


def export_and_push(model, tokenizer, args: argparse.Namespace, **card: Any) -> Path:
    """Export `model` + `tokenizer` as a Hub repo in ``output_dir/hub``, its model card built from the run folder
    (results, training arguments, curves; `card`: more export_for_hub arguments), and upload it to --hub_model_id.
    A failed upload is a `UsageError`; the model stays in output_dir."""
    from nanoformer.hub import HubPushError, export_for_hub, push_to_hub

    folder = export_for_hub(
        model, tokenizer, Path(args.output_dir) / "hub", run_dir=args.output_dir, repo_id=args.hub_model_id,
        overwrite=True, **card,
    )  # fmt: skip
    try:
        push_to_hub(folder, args.hub_model_id)
    except HubPushError as error:
        raise UsageError(f"--push_to_hub: {error} (the model is saved in {args.output_dir})") from error
    logger.info(f"Pushed {folder} to {args.hub_model_id}")
    return folder


# --------------------------------------------------------------------------------------------------------------------
# Preemption
# --------------------------------------------------------------------------------------------------------------------


class StopOnSignal:
    """Turns SIGTERM/SIGINT (SLURM or Kubernetes preemption, Ctrl-C) into a request to stop after this update.

    Create it when the loop starts (before, Ctrl-C interrupts set-up at once, as usual).

    The loop calls `requested(accelerator)` once per update; with several processes the flag is all-reduced so that
    every process stops at the same step (one of them may have received the signal a little later). A second signal
    while stopping exits at once, as the default handler would.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum

    def requested(self, accelerator: Accelerator) -> bool:
        flag = self.signum is not None
        if accelerator.num_processes > 1:
            flag = bool(accelerator.reduce(torch.tensor(float(flag), device=accelerator.device), "max"))
        return flag

    def exit(self, accelerator: Accelerator, checkpoint: Path) -> None:
        """After `checkpoint` was written: close the trackers and exit with `PREEMPTED_EXIT_CODE`."""
        name = signal.Signals(self.signum).name if self.signum else "a signal"
        logger.warning(
            f"Stopped by {name} after step {checkpoint.name.removeprefix('step_')}: checkpoint {checkpoint} written; "
            f"continue with --resume_from_checkpoint latest (exit status {PREEMPTED_EXIT_CODE})"
        )
        accelerator.end_training()
        sys.exit(PREEMPTED_EXIT_CODE)

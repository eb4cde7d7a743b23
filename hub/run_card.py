"""Model-card inputs from what a trainer's output folder recorded.

`train_lm.py` and `train_mt.py` leave in ``--output_dir``: ``all_results.json`` (scores, steps, speed, data
counters, which weights the final model is), ``training_args.json`` (the arguments and where the run ran; for runs
written before it existed, the newest ``step_N/meta.json`` holds the same arguments), ``log_history.json`` and
``training_curves.png``. An averaging output (``average_checkpoints``) holds ``averaged_checkpoints.json`` naming its
steps and the run it came from.

`read_run` reads those files (JSON only, nothing is unpickled); `card_from_run` turns them into `export_for_hub`'s
card arguments: the model-index metrics (BLEU with its sacreBLEU signature, eval loss, perplexity), the evaluation
and training data, a recipe table (model size, batches, optimiser, schedule, label smoothing, steps, time, speed,
data counts, final model, hardware), the full arguments, and the curves image.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .model_card import CAUSAL_LM, TRANSLATOR, ModelKind

RESULTS_FILE = "all_results.json"  # nanoformer.training.reporting.RESULTS_FILE
TRAINING_ARGS_FILE = "training_args.json"  # nanoformer.training.reporting.TRAINING_ARGS_FILE
HISTORY_FILE = "log_history.json"
CURVES_FILE = "training_curves.png"  # nanoformer.training.common.CURVES_FILE
AVERAGE_FILE = "averaged_checkpoints.json"  # nanoformer.training.average_checkpoints.RECORD_NAME

# Arguments that say where files went or how the run was driven, not how the model was trained.
HIDDEN_ARGS = frozenset({
    "push_to_hub", "hub_model_id", "output_dir", "overwrite_output_dir", "resume_from_checkpoint", "with_tracking",
    "report_to", "checkpoint", "logging_steps", "num_sample_translations", "sample_max_new_tokens",
})  # fmt: skip

# Other spellings of the metrics a run records, so that `--metric eval_bleu=...` replaces the run's `bleu`.
METRIC_ALIASES = {"eval_bleu": "bleu", "loss": "eval_loss", "eval_ppl": "perplexity", "ppl": "perplexity",
                  "eval_perplexity": "perplexity"}  # fmt: skip


def canonical_metric(name: str) -> str:
    """The name a run's metric is published under (``eval_bleu`` → ``bleu``, ``eval_ppl`` → ``perplexity``)."""
    return METRIC_ALIASES.get(name, name)


@dataclass
class TrainingRun:
    """What one trainer output folder (or averaging output) recorded; empty fields for files it lacks."""

    folder: Path
    results: dict[str, Any] = field(default_factory=dict)
    args: dict[str, Any] = field(default_factory=dict)
    args_file: str | None = None  # where `args` came from, relative to `folder`
    environment: dict[str, Any] = field(default_factory=dict)
    trainer: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    curves: Path | None = None
    averaged: dict[str, Any] | None = None  # averaged_checkpoints.json of an averaging output
    source: TrainingRun | None = None  # for an averaging output: the run its checkpoints came from


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: not readable JSON ({error})") from error


def _newest_checkpoint_meta(folder: Path) -> tuple[Path, dict] | None:
    steps = []
    for child in folder.glob("step_*"):
        suffix = child.name.removeprefix("step_")
        if suffix.isdigit() and (child / "meta.json").is_file():
            steps.append((int(suffix), child / "meta.json"))
    if not steps:
        return None
    path = max(steps)[1]
    meta = _read_json(path)
    return (path, meta) if isinstance(meta, dict) else None


def _resolve(recorded: str, near: Path) -> Path | None:
    """A folder recorded as a path string (maybe relative to the cwd of the command that wrote it)."""
    path = Path(recorded).expanduser()
    for candidate in ([path] if path.is_absolute() else [path, near.parent / path, near.parent / path.name]):
        if candidate.is_dir():
            return candidate
    return None


def read_run(folder: str | os.PathLike) -> TrainingRun | None:
    """Read the run records of `folder`; None when it holds none (a plain saved model)."""
    folder = Path(folder)
    run = TrainingRun(folder=folder)
    results = _read_json(folder / RESULTS_FILE)
    if isinstance(results, dict):
        run.results = results
    saved_args = _read_json(folder / TRAINING_ARGS_FILE)
    if isinstance(saved_args, dict) and isinstance(saved_args.get("args"), dict):
        run.args, run.args_file = saved_args["args"], TRAINING_ARGS_FILE
        run.environment = dict(saved_args.get("environment") or {})
        run.trainer = saved_args.get("trainer")
    elif (found := _newest_checkpoint_meta(folder)) is not None and isinstance(found[1].get("args"), dict):
        path, meta = found  # a run from before training_args.json: its checkpoints carry the arguments
        run.args, run.args_file = meta["args"], str(path.relative_to(folder))
        run.trainer = (meta.get("extra") or {}).get("trainer")
    history = _read_json(folder / HISTORY_FILE)
    if isinstance(history, list):
        run.history = [record for record in history if isinstance(record, dict)]
    if (folder / CURVES_FILE).is_file():
        run.curves = folder / CURVES_FILE
    averaged = _read_json(folder / AVERAGE_FILE)
    if isinstance(averaged, dict):
        run.averaged = averaged
        source_dir = _resolve(str(averaged.get("config_from", "")), folder) if averaged.get("config_from") else None
        if source_dir is not None and source_dir.resolve() != folder.resolve():
            run.source = read_run(source_dir)
    if not (run.results or run.args or run.history or run.curves or run.averaged):
        return None
    return run


# --------------------------------------------------------------------------------------------------------------------
# Card inputs
# --------------------------------------------------------------------------------------------------------------------


def _num(value: Any, digits: int = 4) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.{digits}g}"
    return str(value)


def _duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def _file_label(path: str) -> str:
    """``../shared/data/tatoeba-cmn-eng/valid.jsonl`` → ``tatoeba-cmn-eng/valid.jsonl``."""
    p = Path(path)
    return f"{p.parent.name}/{p.name}" if p.parent.name else p.name


def _builder(path: str) -> str:
    """The `datasets` builder a local file is read with, as the model-index dataset type."""
    suffix = Path(path).suffix.lower()
    return {".jsonl": "json", ".json": "json", ".tsv": "csv", ".csv": "csv"}.get(suffix, "text")


def _metrics(kind: ModelKind, results: Mapping[str, Any]) -> dict[str, float]:
    def number(key: str) -> float | None:
        value = results.get(key)
        return value if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) else None

    metrics: dict[str, float] = {}
    if kind is TRANSLATOR:
        for key, name in (("eval_bleu", "bleu"), ("eval_loss", "eval_loss"), ("eval_ppl", "perplexity")):
            if number(key) is not None:
                metrics[name] = number(key)
    else:  # train_lm: the whole validation split (eval_loss is nanoGPT's few-batch estimate)
        loss = number("eval_loss_full") if number("eval_loss_full") is not None else number("eval_loss")
        if loss is not None:
            metrics["eval_loss"] = loss
            metrics["perplexity"] = number("perplexity") if number("perplexity") is not None else math.exp(loss)
    return metrics


def _eval_dataset(kind: ModelKind, args: Mapping[str, Any], results: Mapping[str, Any]) -> dict[str, str] | None:
    if kind is TRANSLATOR:
        count = f" ({results['eval_samples']:,} pairs)" if isinstance(results.get("eval_samples"), int) else ""
        if args.get("validation_file"):
            path = str(args["validation_file"])
            kind_type = "tatoeba" if "tatoeba" in path.lower() else _builder(path)
            return {"type": kind_type, "name": f"{_file_label(path)}{count}", "split": "validation"}
        if args.get("dataset_name") and not args.get("train_file"):
            name = str(args["dataset_name"])
            dataset = {"type": name, "name": f"{name} {args.get('validation_split_name') or 'validation'}{count}",
                       "split": str(args.get("validation_split_name") or "validation")}  # fmt: skip
            if args.get("dataset_config_name"):
                dataset["config"] = str(args["dataset_config_name"])
            return dataset
        return None
    percent = args.get("validation_split_percentage")
    if percent is None:
        return None
    split = f"last {percent:g}% (whole split, non-overlapping block_size windows)"
    if args.get("dataset_name"):
        dataset = {"type": str(args["dataset_name"]), "name": str(args["dataset_name"]), "split": split}
        if args.get("dataset_config_name"):
            dataset["config"] = str(args["dataset_config_name"])
        return dataset
    if args.get("train_file"):
        path = str(args["train_file"])
        kind_type = "tiny_shakespeare" if "shakespeare" in path.lower() else "text"
        return {"type": kind_type, "name": _file_label(path), "split": split}
    return None


def _training_datasets(kind: ModelKind, args: Mapping[str, Any]) -> list[str] | None:
    """Hub ids of the training data; None = the kind's default (the local file is that data set), [] = none."""
    if args.get("train_file"):
        default_key = "tatoeba" if kind is TRANSLATOR else "shakespeare"
        return None if default_key in str(args["train_file"]).lower() else []
    if args.get("dataset_name"):
        return [str(args["dataset_name"])]
    return None


def _peak_logged_lr(history: Sequence[Mapping[str, Any]]) -> float | None:
    rates = [r["learning_rate"] for r in history if isinstance(r.get("learning_rate"), int | float)]
    return max(rates) if rates else None


def _final_model(results: Mapping[str, Any]) -> str | None:
    which = results.get("final_model")
    steps = results.get("final_model_steps") or []
    if which == "average" and steps:
        text = f"average of the {len(steps)} checkpoints at steps {', '.join(map(str, steps))}"
        if isinstance(results.get("last_step_eval_bleu"), int | float):
            text += f" (the last step alone: BLEU {results['last_step_eval_bleu']:.2f})"
        return text
    if which == "best":
        step = steps[0] if steps else results.get("best_step")
        metric = results.get("best_metric") or "the evaluation metric"
        return f"best evaluated checkpoint (step {step}, by {metric})"
    if which == "last":
        return f"last step ({results.get('step')})"
    return None


def _hardware(environment: Mapping[str, Any], results: Mapping[str, Any]) -> str | None:
    processes = environment.get("num_processes", results.get("num_processes"))
    if not environment:
        return f"{processes} process{'es' if processes != 1 else ''} (device not recorded)" if processes else None
    text = f"{processes} × {environment.get('device_name') or environment.get('device')}"
    if environment.get("mixed_precision") not in (None, "no"):
        text += f", {environment['mixed_precision']} mixed precision"
    versions = [f"{lib} {environment[lib]}" for lib in ("torch", "transformers") if environment.get(lib)]
    return text + (f" ({', '.join(versions)})" if versions else "")


def _model_size(kind: ModelKind, config: Mapping[str, Any], num_parameters: int | None) -> str | None:
    get = config.get
    if kind is TRANSLATOR and get("d_model"):
        text = (f"{get('encoder_layers')} + {get('decoder_layers')} layers, d_model {get('d_model')}, "
                f"{get('encoder_attention_heads')} heads, FFN {get('encoder_ffn_dim')}, dropout {_num(get('dropout'))}")
    elif kind is CAUSAL_LM and get("n_embd"):
        layers, heads = get("n_layer"), get("n_head")
        text = (f"{layers} layer{'s' if layers != 1 else ''} × {heads} head{'s' if heads != 1 else ''} × "
                f"{get('n_embd')}, block {get('block_size')}, dropout {_num(get('dropout'))}")
        parts = [get(key) for key in ("norm_type", "mlp_type", "position_embedding_type") if get(key)]
        text += f" ({', '.join(map(str, parts))})" if parts else ""
    else:
        text = ""
    if num_parameters is not None:
        text += f"{'; ' if text else ''}{num_parameters:,} parameters"
    return text or None


def _recipe(kind: ModelKind, run: TrainingRun, config: Mapping[str, Any], num_parameters: int | None) -> list:
    args, results = run.args, run.results
    rows: list[tuple[str, str]] = []
    if (model := _model_size(kind, config, num_parameters)) is not None:
        rows.append(("Model", model))
    accumulation = args.get("gradient_accumulation_steps") or 1
    processes = results.get("num_processes", run.environment.get("num_processes", 1)) or 1
    per_process = f"× {accumulation} accumulation × {processes} process{'es' if processes != 1 else ''}"
    if kind is TRANSLATOR:
        if args.get("train_file"):
            data = f"`{_file_label(str(args['train_file']))}`"
        else:
            data = f"`{args.get('dataset_name')}` ({args.get('dataset_config_name')}, streamed)"
        data += f", {args.get('source_lang', 'en')} → {args.get('target_lang', 'zh')}"
        if args.get("zh_script") not in (None, "as-is"):
            data += f", Chinese converted to {args['zh_script']}"
        rows.append(("Training data", data))
        if args.get("max_tokens_per_batch"):
            per_update = args["max_tokens_per_batch"] * accumulation * processes
            rows.append(("Batches", f"≤ {args['max_tokens_per_batch']:,} padded source + target tokens per batch "
                         f"{per_process} = ≤ {per_update:,} per update; source / target lengths ≤ "
                         f"{args.get('max_source_length')} / {args.get('max_target_length')} tokens"))
        smoothing = config.get("label_smoothing", args.get("label_smoothing"))
        if smoothing is not None:
            rows.append(("Label smoothing", _num(smoothing)))
    else:
        data = f"`{_file_label(str(args['train_file']))}`" if args.get("train_file") else f"`{args.get('dataset_name')}`"
        if args.get("validation_split_percentage") is not None:
            data += f" (last {args['validation_split_percentage']:g}% held out for validation)"
        rows.append(("Training data", data))
        batch, block = args.get("per_device_train_batch_size"), args.get("block_size") or config.get("block_size")
        if batch and block:
            rows.append(("Batches", f"{batch} windows × {block} tokens {per_process} = "
                         f"{batch * block * accumulation * processes:,} tokens per update"))
    if "adam_beta1" in args:
        decay = args.get("weight_decay") or 0
        # train_mt.py: Adam, AdamW only with weight decay; train_lm.py: AdamW, decay on matrices only (nanoGPT).
        name = "AdamW" if kind is CAUSAL_LM or decay > 0 else "Adam"
        optimiser = f"{name} β = ({_num(args['adam_beta1'])}, {_num(args.get('adam_beta2'))}), "
        optimiser += f"ε = {_num(args.get('adam_epsilon'))}, weight decay {_num(decay)}"
        optimiser += f", gradient clipping {_num(args.get('max_grad_norm'))}"
        rows.append(("Optimiser", optimiser))
    schedule = args.get("lr_scheduler_type")
    if schedule:
        warmup = f"{args.get('warmup_steps', 0)} warmup steps"
        if schedule == "noam":
            text = f"Noam (inverse square root), {warmup}, scale {_num(args.get('noam_scale', 1.0))}"
        elif args.get("min_learning_rate") is not None:
            text = f"{schedule}, {warmup}, lr {_num(args.get('learning_rate'))} → {_num(args['min_learning_rate'])}"
        else:
            text = f"{schedule}, {warmup}, peak lr {_num(args.get('learning_rate'))}"
        if (peak := _peak_logged_lr(run.history)) is not None:
            text += f"; highest logged lr {peak:.3g}"
        rows.append(("Schedule", text))
    if results.get("step") is not None:
        steps = f"{results['step']:,}"
        if results.get("stop_reason"):
            steps += f" ({results['stop_reason']})"
        if isinstance(results.get("train_runtime"), int | float):
            steps += f" in {_duration(results['train_runtime'])}"
        rows.append(("Steps", steps))
    if isinstance(results.get("train_tokens_per_second"), int | float):
        unit = "target tokens/s" if kind is TRANSLATOR else "tokens/s"
        speed = f"{results['train_tokens_per_second']:,.0f} {unit}"
        if isinstance(results.get("train_target_tokens"), int):
            speed += f" ({results['train_target_tokens']:,} target tokens in all)"
        rows.append(("Throughput", speed))
    if isinstance(results.get("rows_read"), int):
        counts = f"{results['rows_read']:,} rows read, {results.get('skipped_rows', 0):,} skipped"
        for key, label in (("truncated_pairs", "truncated"), ("dropped_overlong_pairs", "dropped as too long")):
            if results.get(key):
                counts += f", {results[key]:,} {label}"
        rows.append(("Data read", counts))
    elif "skipped_rows" in results:
        rows.append(("Skipped rows", _num(results["skipped_rows"])))
    if (final := _final_model(results)) is not None:
        rows.append(("Final model", final))
    if (hardware := _hardware(run.environment, results)) is not None:
        rows.append(("Hardware", hardware))
    if args.get("seed") is not None:
        rows.append(("Seed", str(args["seed"])))
    return rows


@dataclass
class RunCard:
    """`export_for_hub` card arguments built from a run (None / empty: the run did not record it)."""

    metrics: dict[str, float] = field(default_factory=dict)
    sacrebleu_signature: str | None = None
    eval_dataset: dict[str, str] | None = None
    datasets: list[str] | None = None
    recipe: list[tuple[str, str]] = field(default_factory=list)
    training_args: dict[str, Any] = field(default_factory=dict)
    training_args_source: str | None = None
    figures: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def card_from_run(
    run: TrainingRun, kind: ModelKind, *, config: Mapping[str, Any] | None = None, num_parameters: int | None = None
) -> RunCard:
    """The card arguments `run` supports for a model of `kind` (`config`: the model's config dict)."""
    config = config or {}
    card = RunCard()
    trained = run
    if run.averaged is not None:
        steps = [str(s) for s in run.averaged.get("steps") or []]
        source = run.averaged.get("config_from") or "?"
        card.notes.append(
            f"The weights are the element-wise average of {len(steps) or len(run.averaged.get('inputs') or [])} "
            f"checkpoints (steps {', '.join(steps) or '?'}) of the training run `{_file_label(str(source))}` "
            "(`average_checkpoints`, as the paper does for its base models). The recipe and curves below are that "
            "run's; its recorded scores belong to its own final model, not to this average, and are not shown."
        )
        trained = run.source or TrainingRun(folder=run.folder)
    else:
        card.metrics = _metrics(kind, run.results)
        if card.metrics.get("bleu") is not None and isinstance(run.results.get("bleu_signature"), str):
            card.sacrebleu_signature = run.results["bleu_signature"]
    card.eval_dataset = _eval_dataset(kind, trained.args, trained.results) if card.metrics else None
    card.datasets = _training_datasets(kind, trained.args) if trained.args else None
    if card.metrics and kind is TRANSLATOR and trained.results.get("num_beams"):
        card.notes.append(f"BLEU: beam search with {trained.results['num_beams']} beams, scored by sacreBLEU.")
    if trained.args or trained.results:
        card.recipe = _recipe(kind, trained, config, num_parameters)
    card.training_args = {k: v for k, v in trained.args.items() if k not in HIDDEN_ARGS}
    if trained.args_file:
        prefix = "" if trained is run else f"{trained.folder.name}/"  # an average: its run's arguments
        card.training_args_source = prefix + trained.args_file
    if trained.curves is not None:
        card.figures.append(trained.curves)
    return card

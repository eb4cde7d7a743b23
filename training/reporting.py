"""Logging helpers shared by the training scripts: trackers, ``all_results.json`` and PNG training curves.

- `accelerator_tracking_kwargs` / `tracker_config`: what `Accelerator(...)` and `accelerator.init_trackers` need for
  ``--with_tracking --report_to tensorboard|trackio|all`` (trackers write locally under ``output_dir``; nothing is
  sent anywhere when HF_HUB_OFFLINE=1 / no credentials).
- `write_all_results`: the HF examples' ``all_results.json``.
- `write_training_args`: ``training_args.json``, the run's arguments and where it ran (HF's Trainer saves its
  ``TrainingArguments`` next to the model too; ours is JSON), so an export's model card can state the recipe.
- `plot_curves`: one PNG of any logged series against ``step`` (e.g. train/eval loss, BLEU), matplotlib Agg backend.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from accelerate.utils import ProjectConfiguration

SUPPORTED_TRACKERS = ("tensorboard", "trackio")
RESULTS_FILE = "all_results.json"
TRAINING_ARGS_FILE = "training_args.json"


def accelerator_tracking_kwargs(with_tracking: bool, report_to: str, output_dir: str | os.PathLike) -> dict[str, Any]:
    """Keyword arguments for `Accelerator(...)`: ``log_with`` and a project configuration rooted at `output_dir`.

    `report_to` is "all" or a comma-separated list of tracker names (as in the HF examples); logs go to
    ``output_dir/runs``. Raises ValueError for an unknown tracker name or a tracker whose package is not installed.
    """
    project_config = ProjectConfiguration(project_dir=str(output_dir), logging_dir=str(Path(output_dir) / "runs"))
    if not with_tracking:
        return {"project_config": project_config}
    if report_to == "all":
        log_with: Any = "all"
    else:
        log_with = [name.strip() for name in report_to.split(",") if name.strip()]
        unknown = [name for name in log_with if name not in SUPPORTED_TRACKERS]
        if unknown:
            raise ValueError(
                f"--report_to: unknown tracker(s) {unknown}; choose from {list(SUPPORTED_TRACKERS)} or 'all'"
            )
        for name in log_with:
            module = "torch.utils.tensorboard" if name == "tensorboard" else name
            try:
                __import__(module)
            except ImportError as err:
                raise ValueError(f"--report_to {name}: the `{name}` package is not installed ({err})") from err
    return {"log_with": log_with, "project_config": project_config}


def tracker_config(args: argparse.Namespace | Mapping[str, Any]) -> dict[str, Any]:
    """Arguments as a flat dict of scalars that every tracker accepts (TensorBoard hparams reject None/lists/paths)."""
    items = vars(args).items() if isinstance(args, argparse.Namespace) else args.items()
    config = {}
    for key, value in items:
        if isinstance(value, bool | int | float | str):
            config[key] = value
        else:
            config[key] = str(value)
    return config


def write_all_results(
    output_dir: str | os.PathLike, results: Mapping[str, Any], name: str = RESULTS_FILE
) -> Path:
    """Write `results` as ``output_dir/all_results.json`` (pretty-printed; NaN/inf written as null)."""

    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return value

    path = Path(output_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({key: clean(value) for key, value in results.items()}, f, indent=2, default=str)
        f.write("\n")
    return path


def run_environment(accelerator: Any) -> dict[str, Any]:
    """Where a run ran: process count, device, precision and library versions (for ``training_args.json``)."""
    import accelerate
    import torch
    import transformers

    device = accelerator.device
    if device.type == "cuda":
        device_name = torch.cuda.get_device_name(device)
    else:
        threads = torch.get_num_threads()
        device_name = f"{platform.machine() or 'unknown'} CPU, {threads} thread{'s' if threads != 1 else ''} per process"
    return {
        "num_processes": accelerator.num_processes,
        "distributed_type": str(accelerator.distributed_type.value),
        "mixed_precision": str(accelerator.mixed_precision),
        "device": device.type,
        "device_name": device_name,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "accelerate": accelerate.__version__,
    }


def write_training_args(
    output_dir: str | os.PathLike,
    args: argparse.Namespace | Mapping[str, Any],
    *,
    trainer: str,
    environment: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``output_dir/training_args.json``: ``{"trainer", "args", "environment"}`` (`args` as given on the command
    line after defaults; values JSON cannot hold are written as strings)."""
    items = vars(args) if isinstance(args, argparse.Namespace) else dict(args)
    record = {
        "trainer": trainer,
        "args": {key: value for key, value in items.items() if key != "checkpoint"},  # checkpoint: a resolved Path
        "environment": dict(environment or {}),
    }
    path = Path(output_dir) / TRAINING_ARGS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def plot_curves(
    history: Sequence[Mapping[str, Any]],
    keys: Sequence[str | Sequence[str]],
    path: str | os.PathLike,
    *,
    x_key: str = "step",
    title: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> Path | None:
    """Save a PNG of logged values against `x_key`, one panel per entry of `keys`.

    Args:
        history: logged records, e.g. ``[{"step": 100, "train_loss": 2.1}, {"step": 100, "eval_loss": 2.2}, ...]``;
            a record contributes a point to every key it holds (records lacking a key are skipped for it).
        keys: panels to draw; a string is one series, a list of strings shares one panel (e.g.
            ``[["train_loss", "eval_loss"], "eval_bleu"]``).
        path: the PNG file to write.
        x_key: the x-axis field.
        title: figure title.
        labels: legend names for keys (default: the key itself), e.g. ``{"loss": "train loss (running mean)"}``.

    Returns:
        The path written, or None when no requested key has any point (nothing to draw).
    """
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on servers/CI
    import matplotlib.pyplot as plt

    panels = [[k] if isinstance(k, str) else list(k) for k in keys]
    series = {
        key: [(r[x_key], r[key]) for r in history if x_key in r and r.get(key) is not None]
        for panel in panels
        for key in panel
    }
    panels = [[k for k in panel if series[k]] for panel in panels]
    panels = [panel for panel in panels if panel]
    if not panels:
        return None

    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        for key in panel:
            xs, ys = zip(*series[key], strict=True)
            ax.plot(xs, ys, label=(labels or {}).get(key, key), marker="." if len(xs) < 50 else None)
        ax.set_xlabel(x_key)
        ax.set_ylabel(panel[0] if len(panel) == 1 else "loss" if all("loss" in k for k in panel) else "value")
        ax.grid(True, alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

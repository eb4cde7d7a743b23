"""Crash-safe training checkpoints on top of `accelerator.save_state`, shared by the training scripts.

Layout of one checkpoint (``output_dir/step_N``)::

    step_N/
        model.safetensors, optimizer.bin, scheduler.bin, random_states_*.pkl, ...   (accelerator.save_state)
        data_state_0.json, data_state_1.json, ...                                  (one per process, optional)
        meta.json                                                                  (step, args, extra; written last)

A checkpoint is first written to ``output_dir/.tmp-step_N`` and renamed to ``step_N`` only once every process has
finished writing, so a run killed mid-save never leaves a half ``step_N`` behind: `find_latest_checkpoint` only
considers folders named exactly ``step_<int>`` that contain ``meta.json``.

Typical use in a training loop::

    ckpt = resolve_checkpoint(args.resume_from_checkpoint, args.output_dir)   # None when starting fresh
    if ckpt is not None:
        state = load_checkpoint(accelerator, ckpt)
        start_step, data_state = state.step, state.data_state
    ...
    save_checkpoint(accelerator, args.output_dir, step, args=args, data_state=sampler.state_dict(),
                    total_limit=args.checkpoints_total_limit)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelerate import Accelerator

logger = logging.getLogger(__name__)

CHECKPOINT_PREFIX = "step_"
TMP_PREFIX = ".tmp-"
META_NAME = "meta.json"
_CHECKPOINT_RE = re.compile(rf"^{CHECKPOINT_PREFIX}(\d+)$")


@dataclass
class CheckpointState:
    """What `load_checkpoint` hands back besides the restored accelerator state."""

    path: Path
    step: int
    args: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    # The data state saved by *this* process (None if it saved none, or if the run had fewer processes).
    data_state: Any = None


def checkpoint_dir(output_dir: str | os.PathLike, step: int) -> Path:
    """The folder a checkpoint of `step` lives in: ``output_dir/step_<step>``."""
    return Path(output_dir) / f"{CHECKPOINT_PREFIX}{step}"


def list_checkpoints(output_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """All complete checkpoints in `output_dir` as ``(step, path)``, oldest first.

    Complete means: named exactly ``step_<int>`` and holding ``meta.json`` (written last). Temporary folders left by a
    killed save (``.tmp-step_N``) and anything else are ignored.
    """
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _CHECKPOINT_RE.match(child.name)
        if match and child.is_dir() and (child / META_NAME).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def find_latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint in `output_dir`, or None if there is none."""
    checkpoints = list_checkpoints(output_dir)
    return checkpoints[-1][1] if checkpoints else None


def resolve_checkpoint(spec: str | None, output_dir: str | os.PathLike) -> Path | None:
    """Turn a ``--resume_from_checkpoint`` value into a checkpoint folder.

    - None or "" → None (start fresh).
    - "latest" → the newest complete checkpoint in `output_dir`; None (with a warning) if there is none yet, so the
      same command can be relaunched after a crash/pre-emption whether or not a checkpoint was written.
    - a path → that folder, which must be a complete checkpoint (ValueError otherwise).
    """
    if not spec:
        return None
    if spec == "latest":
        latest = find_latest_checkpoint(output_dir)
        if latest is None:
            logger.warning(f"--resume_from_checkpoint latest: no complete checkpoint in {output_dir}; starting fresh")
        return latest
    path = Path(spec)
    if not path.is_dir():
        raise ValueError(f"--resume_from_checkpoint: checkpoint folder not found: {path}")
    if not (path / META_NAME).is_file():
        raise ValueError(f"--resume_from_checkpoint: {path} is not a complete checkpoint (no {META_NAME})")
    return path


def read_meta(checkpoint: str | os.PathLike) -> dict[str, Any]:
    """The ``meta.json`` of a checkpoint folder as a dict (keys: step, args, extra, num_processes)."""
    with open(Path(checkpoint) / META_NAME, encoding="utf-8") as f:
        return json.load(f)


def prune_checkpoints(output_dir: str | os.PathLike, total_limit: int | None) -> list[Path]:
    """Delete the oldest complete checkpoints so that at most `total_limit` remain; returns the deleted folders.

    `total_limit` None (or <= 0) keeps everything. Call on the main process only.
    """
    if not total_limit or total_limit <= 0:
        return []
    checkpoints = list_checkpoints(output_dir)
    doomed = [path for _, path in checkpoints[: max(0, len(checkpoints) - total_limit)]]
    for path in doomed:
        logger.info(f"Deleting old checkpoint {path} (--checkpoints_total_limit {total_limit})")
        shutil.rmtree(path)
    return doomed


def _jsonable(value: Any) -> Any:
    """Args/extra as plain JSON: Paths and other objects become strings rather than failing the save."""
    if isinstance(value, argparse.Namespace):
        value = vars(value)
    return json.loads(json.dumps(value, default=str))


def save_checkpoint(
    accelerator: Accelerator,
    output_dir: str | os.PathLike,
    step: int,
    *,
    args: argparse.Namespace | dict[str, Any] | None = None,
    data_state: Any = None,
    extra: dict[str, Any] | None = None,
    total_limit: int | None = None,
) -> Path:
    """Save the full training state as ``output_dir/step_<step>``; call on every process.

    Args:
        accelerator: the run's Accelerator (model, optimizer, scheduler must have gone through `prepare`).
        output_dir: the run's output folder.
        step: the number of optimizer steps done so far; resuming continues from it.
        args: the script's arguments (recorded in meta.json for reference).
        data_state: this process's data position (JSON-serialisable), e.g. a sampler's RNG state or a streaming
            dataset's `state_dict()`; each process writes its own ``data_state_<rank>.json``.
        extra: anything else JSON-serialisable to keep (e.g. best metric so far, training history).
        total_limit: keep at most this many checkpoints, deleting the oldest (None keeps all).

    Returns:
        The final checkpoint folder.
    """
    output_dir = Path(output_dir)
    final = checkpoint_dir(output_dir, step)
    tmp = output_dir / f"{TMP_PREFIX}{final.name}"
    if accelerator.is_main_process and tmp.exists():
        shutil.rmtree(tmp)  # left over by a run killed while saving this same step
    accelerator.wait_for_everyone()

    accelerator.save_state(str(tmp))
    if data_state is not None:
        with open(tmp / f"data_state_{accelerator.process_index}.json", "w", encoding="utf-8") as f:
            json.dump(data_state, f)
    accelerator.wait_for_everyone()  # every process has written its files before meta.json marks the folder complete

    if accelerator.is_main_process:
        meta = {
            "step": step,
            "num_processes": accelerator.num_processes,
            "args": _jsonable(args) if args is not None else {},
            "extra": _jsonable(extra) if extra is not None else {},
        }
        with open(tmp / META_NAME, "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        if final.exists():  # re-saving a step (e.g. the final step after resuming from it)
            shutil.rmtree(final)
        os.replace(tmp, final)
        prune_checkpoints(output_dir, total_limit)
        logger.info(f"Saved checkpoint {final}")
    accelerator.wait_for_everyone()
    return final


def load_checkpoint(accelerator: Accelerator, checkpoint: str | os.PathLike) -> CheckpointState:
    """Restore model, optimizer, scheduler, RNG and registered objects from `checkpoint`; call on every process.

    Returns the recorded step, args and extra, plus this process's saved data state (None, with a warning, if the
    checkpoint was written by fewer processes than are running now).
    """
    path = Path(checkpoint)
    meta = read_meta(path)
    accelerator.load_state(str(path))
    data_file = path / f"data_state_{accelerator.process_index}.json"
    data_state = None
    if data_file.is_file():
        with open(data_file, encoding="utf-8") as f:
            data_state = json.load(f)
    elif any(path.glob("data_state_*.json")):
        logger.warning(
            f"{path} has no data state for process {accelerator.process_index} "
            f"(saved with {meta.get('num_processes')} processes); this process's data position starts fresh"
        )
    return CheckpointState(
        path=path,
        step=int(meta["step"]),
        args=meta.get("args", {}),
        extra=meta.get("extra", {}),
        data_state=data_state,
    )

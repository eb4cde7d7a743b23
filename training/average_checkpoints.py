"""Average the weights of several checkpoints into one model ("Attention Is All You Need" §6.1, fairseq's
``scripts/average_checkpoints.py``): the paper's base models are "a single model obtained by averaging the last 5
checkpoints".

    python -m nanoformer.training.average_checkpoints --last 5 out/en-zh --output out/en-zh-avg5
    python -m nanoformer.training.average_checkpoints --last 5 out/en-zh --every 1000 --output out/en-zh-avg5x1k
    python -m nanoformer.training.average_checkpoints --inputs out/en-zh/step_8000 out/en-zh/step_9000 --output avg

Inputs are training checkpoints (``RUN_DIR/step_N`` written by `checkpointing.save_checkpoint`) or saved Hugging Face
model folders (``model.safetensors`` or a sharded ``model.safetensors.index.json``, plus ``config.json``). Weights are
read from safetensors only: nothing is ever unpickled (a checkpoint's ``optimizer.bin``/``*.pkl`` are not touched).

The output is a normal Hugging Face folder, written by `save_pretrained` (weights, ``config.json``,
``generation_config.json``, the model's remote code) plus the tokenizer and ``averaged_checkpoints.json`` (which inputs,
which steps). Checkpoints hold no config, so the model is built from, in order: ``--config_dir``; the first input's own
``config.json``; its run folder's ``config.json`` (written when the run finished); the run's
``--model_name_or_path`` (from ``meta.json``) when that is a local folder. The tokenizer comes from ``--tokenizer_dir``,
else the first of those folders that holds one, else the run's ``tokenizer/`` (trained by train_mt.py) or its
``--tokenizer_name``.

In Python (e.g. at the end of training, on the model object in hand)::

    from nanoformer.training.average_checkpoints import load_averaged_weights, select_checkpoints
    chosen = select_checkpoints("out/en-zh", last=5)            # [(step, path), ...], oldest first
    load_averaged_weights(model, [path for _, path in chosen])   # in place; tied weights stay tied
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import nanoformer.modeling  # noqa: F401  (registers "translator" and "nanogpt" with the Auto classes)
import torch
from nanoformer.tokenization import match_model_max_length, save_tokenizer
from nanoformer.training.checkpointing import META_NAME, list_checkpoints, read_meta
from safetensors import SafetensorError
from safetensors.torch import load_file

logger = logging.getLogger(__name__)

WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
CONFIG_NAME = "config.json"
RECORD_NAME = "averaged_checkpoints.json"
_STEP_RE = re.compile(r"^step_(\d+)$")

PathLike = str | os.PathLike


class AveragingError(ValueError):
    """A problem with the inputs or the output, worded for a one-line CLI error."""


# --------------------------------------------------------------------------------------------------------------------
# Choosing and reading checkpoints
# --------------------------------------------------------------------------------------------------------------------


def select_checkpoints(run_dir: PathLike, last: int, every: int | None = None) -> list[tuple[int, Path]]:
    """The newest `last` complete checkpoints of a run as ``(step, path)``, oldest first.

    With `every`, checkpoints are taken newest first and one is kept only if it lies at least `every` steps before
    the previously kept one (so ``last=5, every=100`` on checkpoints every 50 steps takes every other one, counting
    back from the newest, which need not be a multiple of 50 when a run stopped on a time budget).
    Complete means what `checkpointing.list_checkpoints` says: ``step_<int>`` holding ``meta.json``.
    """
    run_dir = Path(run_dir)
    if last < 1:
        raise AveragingError(f"--last must be at least 1, got {last}")
    if every is not None and every < 1:
        raise AveragingError(f"--every must be at least 1, got {every}")
    if not run_dir.is_dir():
        raise AveragingError(f"run folder not found: {run_dir}")
    found = list_checkpoints(run_dir)
    if not found:
        raise AveragingError(f"no complete checkpoints (step_N folders with {META_NAME}) in {run_dir}")
    chosen: list[tuple[int, Path]] = []
    for step, path in reversed(found):
        if every and chosen and chosen[-1][0] - step < every:
            continue
        chosen.append((step, path))
        if len(chosen) == last:
            break
    if len(chosen) < last:
        spacing = f" spaced at least {every} steps apart" if every else ""
        steps = ", ".join(str(step) for step, _ in found)
        raise AveragingError(
            f"--last {last}: {run_dir} has only {len(chosen)} complete checkpoints{spacing} (steps {steps})"
        )
    return chosen[::-1]


def weight_files(path: PathLike) -> list[Path]:
    """The safetensors file(s) holding a folder's weights (one file, or the shards of an index); a file as is."""
    path = Path(path)
    if path.is_file() and path.name.endswith(".safetensors"):
        return [path]
    if not path.is_dir():
        raise AveragingError(f"checkpoint not found: {path}")
    if (path / WEIGHTS_NAME).is_file():
        return [path / WEIGHTS_NAME]
    index = path / WEIGHTS_INDEX_NAME
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (ValueError, KeyError, AttributeError) as error:
            raise AveragingError(f"{index}: not a safetensors index ({error})") from error
        missing = [name for name in shards if not (path / name).is_file()]
        if missing:
            raise AveragingError(f"{path}: shard {missing[0]} listed in {WEIGHTS_INDEX_NAME} is missing")
        return [path / name for name in shards]
    raise AveragingError(
        f"{path}: no {WEIGHTS_NAME} (weights are read from safetensors only; pickled .bin files are never loaded)"
    )


def load_weights(path: PathLike) -> dict[str, torch.Tensor]:
    """All tensors of one checkpoint or model folder, read from safetensors onto the CPU."""
    weights: dict[str, torch.Tensor] = {}
    for file in weight_files(path):
        try:
            weights.update(load_file(file))
        except (SafetensorError, OSError) as error:
            raise AveragingError(f"cannot read {file}: {error}") from error
    return weights


def checkpoint_step(path: PathLike) -> int | None:
    """The training step of a checkpoint (its ``meta.json``, else a ``step_N`` name), None for a plain model."""
    path = Path(path)
    if (path / META_NAME).is_file():
        try:
            return int(read_meta(path)["step"])
        except (ValueError, KeyError, TypeError):
            pass
    match = _STEP_RE.match(path.name)
    return int(match.group(1)) if match else None


# --------------------------------------------------------------------------------------------------------------------
# Averaging
# --------------------------------------------------------------------------------------------------------------------


def average_checkpoints(paths: Sequence[PathLike]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the weights in `paths` (checkpoint/model folders or .safetensors files).

    Floating-point tensors are summed in float64 and cast back to the first input's dtype, so the result is the
    correctly rounded mean whatever the number of inputs. Other tensors (integer buffers) cannot be averaged
    meaningfully and are taken from the last input. Every input must hold the same tensor names and shapes;
    otherwise a ValueError (`AveragingError`) names the first offending tensor. One input is loaded at a time.
    """
    if not paths:
        raise AveragingError("no checkpoints to average")
    first = Path(paths[0])
    sums: dict[str, torch.Tensor] = {}
    reference: dict[str, tuple[torch.Size, torch.dtype]] = {}
    for index, path in enumerate(paths):
        weights = load_weights(path)
        if index == 0:
            reference = {name: (t.shape, t.dtype) for name, t in weights.items()}
            if not reference:
                raise AveragingError(f"{first}: no tensors")
        else:
            only_first = sorted(reference.keys() - weights.keys())
            only_here = sorted(weights.keys() - reference.keys())
            if only_first:
                raise AveragingError(f"tensor {only_first[0]!r} is in {first} but not in {path} (different models?)")
            if only_here:
                raise AveragingError(f"tensor {only_here[0]!r} is in {path} but not in {first} (different models?)")
        for name, tensor in weights.items():
            shape, dtype = reference[name]
            if tensor.shape != shape:
                raise AveragingError(
                    f"tensor {name!r} has shape {tuple(shape)} in {first} but {tuple(tensor.shape)} in {path}"
                )
            if tensor.is_floating_point() != dtype.is_floating_point:
                raise AveragingError(f"tensor {name!r} is {dtype} in {first} but {tensor.dtype} in {path}")
            if not tensor.is_floating_point():
                sums[name] = tensor
            elif index == 0:
                sums[name] = tensor.to(torch.float64)
            else:
                sums[name].add_(tensor.to(torch.float64))
        del weights
    count = len(paths)
    return {
        name: (total / count).to(reference[name][1]) if total.is_floating_point() else total
        for name, total in sums.items()
    }


def load_averaged_weights(model: torch.nn.Module, paths: Sequence[PathLike]) -> torch.nn.Module:
    """Overwrite `model`'s weights with the average of the checkpoints in `paths`, in place; returns `model`.

    `model` is the unwrapped model (e.g. ``accelerator.unwrap_model(model)``) on any device; the averaged tensors are
    copied into its parameters, so tied weights stay tied. See `load_state_into` for what must match.
    """
    load_state_into(model, average_checkpoints(paths))
    return model


def load_state_into(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy `state` into `model`'s parameters and buffers, checking that it describes exactly this model.

    A checkpoint stores each shared tensor once (accelerate and `save_pretrained` drop aliases: the translator's
    ``lm_head.weight`` and ``model.decoder.embed_tokens.weight`` are ``model.encoder.embed_tokens.weight``), so a
    model name absent from `state` is accepted only if it shares storage with a name that is present; loading that
    one fills both, and the tie (one Parameter object) is untouched.
    """
    own = model.state_dict()
    unexpected = sorted(state.keys() - own.keys())
    if unexpected:
        raise AveragingError(
            f"the checkpoints hold tensor {unexpected[0]!r}, which {type(model).__name__} has not (another architecture?)"
        )
    for name, tensor in state.items():
        if tensor.shape != own[name].shape:
            raise AveragingError(
                f"tensor {name!r} has shape {tuple(tensor.shape)} in the checkpoints but {tuple(own[name].shape)} in "
                f"{type(model).__name__} (another configuration?)"
            )
    filled = {own[name].untyped_storage().data_ptr() for name in state}
    missing = [name for name in own if name not in state and own[name].untyped_storage().data_ptr() not in filled]
    if missing:
        raise AveragingError(
            f"the checkpoints lack tensor {missing[0]!r} of {type(model).__name__} (another architecture?)"
        )
    with torch.no_grad():
        model.load_state_dict(state, strict=False)


# --------------------------------------------------------------------------------------------------------------------
# Building and writing the averaged model
# --------------------------------------------------------------------------------------------------------------------


def _run_dir(path: Path) -> Path | None:
    """The run folder of a training checkpoint (``RUN_DIR/step_N``), None for anything else."""
    return path.parent if (path / META_NAME).is_file() else None


def _run_arg(path: Path, name: str) -> Path | None:
    """A run's local folder argument (e.g. ``--tokenizer_name``) recorded in a checkpoint's meta.json."""
    if not (path / META_NAME).is_file():
        return None
    try:
        value = read_meta(path).get("args", {}).get(name)
    except (ValueError, OSError):
        return None
    return Path(value) if isinstance(value, str) and value and Path(value).is_dir() else None


def find_config_dir(path: PathLike) -> Path:
    """Where the config of the model in `path` lives: its own folder, its run folder, or the run's base model."""
    path = Path(path)
    folder = path.parent if path.is_file() else path
    run = _run_dir(folder)
    candidates = [folder, run, _run_arg(folder, "model_name_or_path")]
    for candidate in candidates:
        if candidate is not None and (candidate / CONFIG_NAME).is_file():
            return candidate
    where = f"{folder} and its run folder {run} hold" if run else f"{folder} holds"
    raise AveragingError(
        f"{where} no {CONFIG_NAME} (has the run not finished yet?): pass --config_dir, a saved model of the same "
        "architecture"
    )


def find_tokenizer_dir(path: PathLike, config_dir: PathLike | None = None) -> Path:
    """A folder holding the tokenizer that goes with the model in `path` (see the module docstring for the order)."""
    path = Path(path)
    folder = path.parent if path.is_file() else path
    run = _run_dir(folder)
    candidates = [
        Path(config_dir) if config_dir else None,
        folder,
        run,
        run / "tokenizer" if run else None,  # train_mt.py's own tokenizer, saved before training starts
        _run_arg(folder, "tokenizer_name"),
        _run_arg(folder, "model_name_or_path"),
    ]
    for candidate in candidates:
        if candidate is not None and any(
            (candidate / n).is_file() for n in ("tokenizer_config.json", "tokenizer.json")
        ):
            return candidate
    raise AveragingError(f"no tokenizer found for {folder}: pass --tokenizer_dir")


def build_model(config_dir: PathLike) -> torch.nn.Module:
    """A freshly initialised model of the architecture in ``config_dir/config.json``, with its generation config.

    nanoformer's models are registered with the Auto classes on import, so no remote code is executed: a config of
    a model type transformers does not know is refused.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, GenerationConfig

    config_dir = Path(config_dir)
    try:
        # trust_remote_code=False: the folder's own copy of the code (auto_map) is never run, nor asked about.
        config = AutoConfig.from_pretrained(config_dir, trust_remote_code=False)
        auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
        model = auto.from_config(config, trust_remote_code=False)
    except (ValueError, OSError, KeyError) as error:
        raise AveragingError(f"cannot build a model from {config_dir / CONFIG_NAME}: {error}") from error
    if (config_dir / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(config_dir)  # e.g. beam 4, length penalty 0.6
    return model


def _check_writable(output_dir: Path) -> None:
    """Fail before the (possibly long) averaging if `output_dir` cannot be created or written."""
    probe = output_dir
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise AveragingError(f"cannot write --output {output_dir}: {probe} is not a folder")
    if probe.exists() and not os.access(probe, os.W_OK):
        raise AveragingError(f"cannot write --output {output_dir}: {probe} is not writable")


def save_averaged_model(
    paths: Sequence[PathLike],
    output_dir: PathLike,
    *,
    config_dir: PathLike | None = None,
    tokenizer_dir: PathLike | str | None = None,
) -> Path:
    """Average the checkpoints in `paths` and write a Hugging Face folder to `output_dir`; returns `output_dir`.

    The model is built from `config_dir` (default: `find_config_dir` of the first input) and the tokenizer copied
    from `tokenizer_dir` (a folder or Hub id; default: `find_tokenizer_dir`). Everything is checked before anything
    is written; ``averaged_checkpoints.json`` records the inputs and their steps.
    """
    from transformers import AutoTokenizer

    paths = [Path(p) for p in paths]
    if not paths:
        raise AveragingError("no checkpoints to average")
    output_dir = Path(output_dir)
    for path in paths:
        weight_files(path)  # a missing or weightless input fails before any loading
        if path.resolve() == output_dir.resolve():
            raise AveragingError(f"--output {output_dir} is one of the inputs")
    _check_writable(output_dir)
    config_dir = Path(config_dir) if config_dir else find_config_dir(paths[0])
    if not (config_dir / CONFIG_NAME).is_file():
        raise AveragingError(f"--config_dir {config_dir}: no {CONFIG_NAME} there")
    tokenizer_source = tokenizer_dir if tokenizer_dir else find_tokenizer_dir(paths[0], config_dir)
    try:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_source, trust_remote_code=False)
    except (ValueError, OSError) as error:
        raise AveragingError(f"cannot load the tokenizer from {tokenizer_source}: {error}") from error

    model = build_model(config_dir)
    averaged = average_checkpoints(paths)
    load_state_into(model, averaged)
    dtypes = {t.dtype for t in averaged.values() if t.is_floating_point()}
    if len(dtypes) == 1:
        model.to(dtypes.pop())  # keep the checkpoints' precision (fp32 for train_mt.py, whatever the autocast)
    steps = [checkpoint_step(path) for path in paths]
    logger.info(
        f"Averaged {len(paths)} checkpoints (steps {', '.join('?' if s is None else str(s) for s in steps)}): "
        + ", ".join(str(path) for path in paths)
    )

    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(output_dir)
        save_tokenizer(match_model_max_length(tokenizer, model.config), output_dir)  # no loading leftovers
        record = {
            "inputs": [str(path) for path in paths],
            "steps": steps,
            "config_from": str(config_dir),
            "tokenizer_from": str(tokenizer_source),
        }
        (output_dir / RECORD_NAME).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    except OSError as error:
        raise AveragingError(f"cannot write --output {output_dir}: {error.strerror or error}") from error
    logger.info(
        f"Wrote the averaged model to {output_dir} (config from {config_dir}, tokenizer from {tokenizer_source})"
    )
    return output_dir


# --------------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m nanoformer.training.average_checkpoints",
        description="Average the weights of several checkpoints into one Hugging Face model folder.",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--inputs",
        nargs="+",
        metavar="DIR",
        help="Checkpoint folders (RUN_DIR/step_N) or saved model folders to average.",
    )
    source.add_argument(
        "--last",
        nargs=2,
        metavar=("N", "RUN_DIR"),
        help="Average the newest N complete checkpoints of the run in RUN_DIR.",
    )
    p.add_argument(
        "--every",
        type=int,
        default=None,
        metavar="K",
        help="With --last: keep checkpoints at least K steps apart, counting back from the newest.",
    )
    p.add_argument("--output", required=True, metavar="DIR", help="Where to write the averaged model.")
    p.add_argument(
        "--config_dir",
        default=None,
        help="A saved model of the same architecture to take config.json and generation_config.json from "
        "(default: the first input's folder, else its run folder).",
    )
    p.add_argument(
        "--tokenizer_dir",
        default=None,
        help="The tokenizer to save with the model (default: found next to the config or in the run folder).",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """The CLI; returns 0, or prints one ``error: ...`` line and returns 2."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    args = parse_args(argv)
    try:
        if args.last is not None:
            count, run_dir = args.last
            try:
                last = int(count)
            except ValueError:
                raise AveragingError(f"--last N RUN_DIR: N must be an integer, got {count!r}") from None
            paths = [path for _, path in select_checkpoints(run_dir, last, args.every)]
        else:
            if args.every is not None:
                raise AveragingError("--every applies to --last only")
            paths = [Path(p) for p in args.inputs]
        save_averaged_model(paths, args.output, config_dir=args.config_dir, tokenizer_dir=args.tokenizer_dir)
    except AveragingError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

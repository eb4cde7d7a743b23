"""Small command-line helpers shared by the training scripts."""

from __future__ import annotations

import argparse
import json
import types
from typing import Any

from transformers import PretrainedConfig

# Bookkeeping entries of `PretrainedConfig.to_dict()` that are not model hyper-parameters.
_NOT_OVERRIDABLE = {"transformers_version", "model_type", "architectures", "auto_map", "dtype", "torch_dtype"}


def _accepts_none(config: PretrainedConfig, key: str) -> bool:
    """Whether the config class declares `key` as optional (`float | None`, ...)."""
    for cls in type(config).__mro__:
        annotation = vars(cls).get("__annotations__", {}).get(key)
        if annotation is not None:
            return isinstance(annotation, types.UnionType) and type(None) in annotation.__args__
    return False


def _convert(key: str, text: str, current: Any, accepts_none: bool = False) -> Any:
    """`text` converted to the type of the config's current value for `key` (JSON for None/list/dict values);
    ``null`` gives None for a field declared optional."""
    text = text.strip()
    if accepts_none and text == "null":
        return None
    try:
        if isinstance(current, bool):
            lowered = text.lower()
            if lowered in ("true", "1", "yes"):
                return True
            if lowered in ("false", "0", "no"):
                return False
            raise ValueError("expected true/false")
        if isinstance(current, int):
            return int(text)
        if isinstance(current, float):
            return float(text)
        if isinstance(current, str):
            return text
        # None, lists, dicts: JSON literal if it parses ("null", "0.1", "[1,2]"), else the raw string.
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text
    except ValueError as err:
        raise ValueError(f"--config_overrides: cannot read {key}={text!r} as {type(current).__name__} ({err})") from err


def parse_config_overrides(overrides: str | None, config: PretrainedConfig | type[PretrainedConfig]) -> dict[str, Any]:
    """Parse ``"n_layer=6,n_embd=384,dropout=0.2"`` into typed keyword arguments for `config`.

    Each value takes the type of the config's current (or default) value: ints stay ints, ``true``/``false`` become
    bools, fields that default to None accept JSON (``null``, numbers), and any field declared optional
    (``init_std: float | None``) accepts ``null``. Raises ValueError naming the problem for
    an unknown key (listing the valid ones), a malformed item or an unparsable value.
    """
    if not overrides or not overrides.strip():
        return {}
    if isinstance(config, type):
        config = config()
    known = {k: v for k, v in config.to_dict().items() if k not in _NOT_OVERRIDABLE and not k.startswith("_")}
    kwargs: dict[str, Any] = {}
    for item in overrides.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--config_overrides: expected key=value items separated by commas, got {item.strip()!r}")
        if key not in known:
            raise ValueError(
                f"--config_overrides: unknown key {key!r} for {type(config).__name__}; valid keys: {', '.join(sorted(known))}"
            )
        kwargs[key] = _convert(key, value, known[key], _accepts_none(config, key))
    return kwargs


class UsageError(Exception):
    """A problem with what the user asked for (flags, files, data, checkpoint, tracker, Hub): the message is one line,
    and the entry point prints it and exits with status 2 (see `nanoformer.training.common.run_cli`)."""


def _number(text: str, kind: type, ok, wanted: str) -> int | float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}") from None
    if value != value or not ok(value):  # NaN fails every bound
        raise argparse.ArgumentTypeError(f"must be {wanted}, got {text}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer > 0."""
    return _number(text, int, lambda v: v > 0, "a positive integer")


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _number(text, int, lambda v: v >= 0, "an integer >= 0")


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    return _number(text, float, lambda v: 0 < v < float("inf"), "a number > 0")


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    return _number(text, float, lambda v: 0 <= v < float("inf"), "a number >= 0")


def unit_interval(text: str) -> float:
    """argparse type: a number in [0, 1) (Adam betas, label smoothing)."""
    return _number(text, float, lambda v: 0 <= v < 1, "a number in [0, 1)")


def percentage(text: str) -> float:
    """argparse type: a number in (0, 100)."""
    return _number(text, float, lambda v: 0 < v < 100, "a percentage in (0, 100)")

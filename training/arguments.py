"""Command-line helpers shared by every entry point: the error policy, typed numbers, --config_overrides."""

from __future__ import annotations

import argparse
import json
import sys
import types
from collections.abc import Callable
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


def _split_items(text: str) -> list[str]:
    """Split ``key=value`` items at the commas that are outside JSON brackets and quotes."""
    items, depth, quote, start = [], 0, None, 0
    for i, char in enumerate(text):
        if quote:
            quote = None if char == quote and text[i - 1] != "\\" else quote
        elif char in "\"'":
            quote = char
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item for item in items if item.strip()]


def _check_json(key: str, value: Any, current: Any) -> Any:
    """A JSON value for `key`, checked against the type of the config's current value (None: anything)."""
    wanted = type(current)
    ok = (
        current is None
        or value is None
        or (wanted is float and isinstance(value, int | float) and not isinstance(value, bool))
        or (wanted is int and isinstance(value, int) and not isinstance(value, bool))
        or (wanted not in (int, float) and isinstance(value, wanted))
    )
    if not ok:
        raise ValueError(f"--config_overrides: {key} must be of type {wanted.__name__}, got {json.dumps(value)}")
    return value


def parse_config_overrides(overrides: str | None, config: PretrainedConfig | type[PretrainedConfig]) -> dict[str, Any]:
    """Parse ``"n_layer=6,n_embd=384,dropout=0.2"`` (or one JSON object) into typed keyword arguments for `config`.

    Each value takes the type of the config's current (or default) value: ints stay ints, ``true``/``false`` become
    bools, any field declared optional (``init_std: float | None``) accepts ``null``, and a value written as JSON
    (``rope_parameters={"rope_type": "dynamic", "factor": 2.0}``, ``[1, 2]``) is read as JSON, so every field,
    dicts included, can be set; commas inside JSON brackets do not separate items. ``--config_overrides
    '{"n_layer": 6, "rope_parameters": {...}}'`` works too. Raises ValueError naming the problem for an unknown key
    (listing the valid ones), a malformed item or an unparsable value.
    """
    if not overrides or not overrides.strip():
        return {}
    if isinstance(config, type):
        config = config()
    known = {k: v for k, v in config.to_dict().items() if k not in _NOT_OVERRIDABLE and not k.startswith("_")}
    # Constructor arguments that are not stored as fields in every layout (NanoGPT's rope_parameters): any JSON value.
    known.update({k: None for k in getattr(type(config), "init_only_keys", ()) if k not in known})

    def check_key(key: str) -> None:
        if key not in known:
            raise ValueError(
                f"--config_overrides: unknown key {key!r} for {type(config).__name__}; valid keys: {', '.join(sorted(known))}"
            )

    if overrides.strip().startswith("{"):
        try:
            items = json.loads(overrides)
        except json.JSONDecodeError as err:
            raise ValueError(f"--config_overrides: not a valid JSON object ({err})") from None
        for key in items:
            check_key(key)
        return {key: _check_json(key, value, known[key]) for key, value in items.items()}
    kwargs: dict[str, Any] = {}
    for item in _split_items(overrides):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--config_overrides: expected key=value items separated by commas, got {item.strip()!r}")
        check_key(key)
        text = value.strip()
        if text[:1] in ("{", "[") or isinstance(known[key], dict | list):
            try:
                kwargs[key] = _check_json(key, json.loads(text), known[key])
            except json.JSONDecodeError as err:
                raise ValueError(f"--config_overrides: {key}={text!r} is not valid JSON ({err})") from None
        else:
            kwargs[key] = _convert(key, value, known[key], _accepts_none(config, key))
    return kwargs


class UsageError(Exception):
    """A problem with what the user asked for (flags, files, data, checkpoint, tracker, Hub): the message is one line,
    and the entry point prints it and exits with status 2 (`run_cli`)."""


class CliParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (``prog: error: ...``, exit status 2) instead of usage + error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def cli_status(main: Callable[[], Any], prog: str, errors: tuple[type[BaseException], ...] = ()) -> int:
    """The one error policy of every entry point: run `main`; a `UsageError` (or one of `errors`) becomes one line
    ``prog: error: ...`` on stderr and status 2, never a traceback. Returns main's return value (or 0) otherwise."""
    try:
        code = main()
    except (UsageError, *errors) as error:
        text = str(error).strip().splitlines()
        print(f"{prog}: error: {text[0] if text else type(error).__name__}", file=sys.stderr)
        return 2
    return code or 0


def run_cli(main: Callable[[], Any], prog: str, errors: tuple[type[BaseException], ...] = ()) -> None:
    """`cli_status`, then exit with it."""
    sys.exit(cli_status(main, prog, errors))


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

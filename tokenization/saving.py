"""Save a tokenizer as what it is, without what loading it and calling it left behind.

transformers 5 writes a tokenizer's ``init_kwargs`` into ``tokenizer_config.json``, and those pick up:

- from `from_pretrained`: ``is_local`` and ``local_files_only`` (how this copy happened to be loaded);
- from the last call: the `tokenizers` backend keeps the truncation / padding of the last ``tokenizer(...,
  truncation=True, max_length=...)`` call and saves it in ``tokenizer.json``; loading that file turns it into
  ``max_length``, ``stride``, ``truncation_strategy``, ``pad_to_multiple_of`` and ``pad_token_type_id`` init kwargs
  (and ``truncation_side``, dropped when it is the default "right"), and `tokenizers.Tokenizer.from_file` users get
  every text silently cut at that length.

`save_tokenizer` saves with `save_pretrained` and then removes exactly those (`clean_tokenizer_files`), so the
folder loads and encodes as the tokenizer itself does: transformers sets truncation and padding per call anyway.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# tokenizer_config.json keys that record how a tokenizer was loaded or last called, never what it is.
LOAD_LEFTOVERS = (
    "is_local",
    "local_files_only",
    "max_length",
    "stride",
    "truncation_strategy",
    "pad_to_multiple_of",
    "pad_token_type_id",
)


def clean_tokenizer_files(folder: str | os.PathLike) -> list[str]:
    """Remove `LOAD_LEFTOVERS` from ``folder/tokenizer_config.json`` and the saved truncation / padding state from
    ``folder/tokenizer.json`` (rewritten with `tokenizers` itself); returns what was removed, e.g.
    ``["is_local", "tokenizer.json truncation"]``. Files that are absent are left alone."""
    folder = Path(folder)
    removed: list[str] = []
    config_path = folder / "tokenizer_config.json"
    if config_path.is_file():
        config = json.loads(config_path.read_text(encoding="utf-8"))
        drop = [key for key in LOAD_LEFTOVERS if key in config]
        if config.get("truncation_side") == "right":  # the default, written back from a saved truncation state
            drop.append("truncation_side")
        removed += drop
        if drop:
            kept = {key: value for key, value in config.items() if key not in drop}
            # The same layout as transformers' own save (indent 2, sorted keys, UTF-8).
            config_path.write_text(json.dumps(kept, indent=2, sort_keys=True, ensure_ascii=False) + "\n", "utf-8")
    backend_path = folder / "tokenizer.json"
    if backend_path.is_file():
        from tokenizers import Tokenizer

        backend = Tokenizer.from_file(str(backend_path))
        state = [name for name in ("truncation", "padding") if getattr(backend, name) is not None]
        if state:
            backend.no_truncation()
            backend.no_padding()
            backend.save(str(backend_path))  # pretty-printed, as transformers saves it
            removed += [f"tokenizer.json {name}" for name in state]
    return removed


def save_tokenizer(tokenizer: Any, folder: str | os.PathLike) -> tuple[str, ...]:
    """`tokenizer.save_pretrained(folder)` without loading and call-time leftovers (see `clean_tokenizer_files`);
    returns the files written. The tokenizer object itself is not changed."""
    files = tokenizer.save_pretrained(folder)
    clean_tokenizer_files(folder)
    return files

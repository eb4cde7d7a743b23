"""Streaming readers for training text: translation pairs from local JSONL/TSV/CSV files or a Hub dataset, and plain
text lines.

Every reader is a generator (nothing is loaded into memory as a whole) and counts what it skips in a `CorpusStats`
you may pass in, so the caller can log it:

    stats = CorpusStats()
    for source, target in read_translation_pairs("train.jsonl", "en", "zh", stats=stats):
        ...
    logger.info("read %s", stats)  # "28979 rows, 0 skipped"

Local JSONL is read line by line and each line parsed on its own (the `datasets` json builder aborts on the first
bad line). A row is `{"translation": {"en": ..., "zh": ...}}` (the schema the Hub WMT sets stream) or flat
`{"en": ..., "zh": ...}`. TSV/CSV rows are `source<TAB>target`, or have a header row naming the language columns.
"""

from __future__ import annotations

import csv
import json
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

JSON_SUFFIXES = (".jsonl", ".json")
DELIMITED_SUFFIXES = {".tsv": "\t", ".csv": ","}


@dataclass
class CorpusStats:
    """Counts of rows read and rows skipped (by reason) while streaming a corpus."""

    rows: int = 0
    skipped: Counter = field(default_factory=Counter)

    @property
    def num_skipped(self) -> int:
        return sum(self.skipped.values())

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1

    def __str__(self) -> str:
        text = f"{self.rows} rows, {self.num_skipped} skipped"
        if self.skipped:
            text += " (" + ", ".join(f"{n} {reason}" for reason, n in self.skipped.most_common()) + ")"
        return text


def _check_file(path: str | os.PathLike) -> Path:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"training file not found: {path}")
    return path


def pair_from_row(row: object, source_lang: str, target_lang: str) -> tuple[str, str] | str:
    """The (source, target) strings of one decoded row, or the reason it is malformed."""
    if not isinstance(row, dict):
        return "rows that are not JSON objects"
    pair = row.get("translation", row)
    if not isinstance(pair, dict):
        return "rows whose 'translation' is not an object"
    source, target = pair.get(source_lang), pair.get(target_lang)
    if source is None or target is None:
        return f"rows missing '{source_lang}' or '{target_lang}'"
    if not isinstance(source, str) or not isinstance(target, str):
        return "rows with non-string text"
    return source, target


def read_translation_pairs(
    path: str | os.PathLike,
    source_lang: str = "en",
    target_lang: str = "zh",
    *,
    stats: CorpusStats | None = None,
) -> Iterator[tuple[str, str]]:
    """Stream `(source, target)` pairs from a local `.jsonl`/`.json` (one JSON object per line), `.tsv` or `.csv` file.

    Malformed rows (bad JSON, missing language, wrong column count) and blank lines are skipped and counted in `stats`.
    Raises `FileNotFoundError` for a missing file and `ValueError` for an unsupported suffix, at call time (before
    the first pair is read).
    """
    path = _check_file(path)
    stats = stats if stats is not None else CorpusStats()
    suffix = path.suffix.lower()
    if suffix in JSON_SUFFIXES:
        return _read_jsonl_pairs(path, source_lang, target_lang, stats)
    if suffix in DELIMITED_SUFFIXES:
        return _read_delimited_pairs(path, DELIMITED_SUFFIXES[suffix], source_lang, target_lang, stats)
    raise ValueError(f"unsupported file type {suffix!r} for translation pairs ({path}): use .jsonl, .tsv or .csv")


def _read_jsonl_pairs(path: Path, source_lang: str, target_lang: str, stats: CorpusStats) -> Iterator[tuple[str, str]]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                stats.skip("blank lines")
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                stats.skip("lines that are not valid JSON")
                continue
            pair = pair_from_row(row, source_lang, target_lang)
            if isinstance(pair, str):
                stats.skip(pair)
                continue
            stats.rows += 1
            yield pair


def _read_delimited_pairs(
    path: Path, delimiter: str, source_lang: str, target_lang: str, stats: CorpusStats
) -> Iterator[tuple[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        # QUOTE_NONE for TSV: sentences may contain quotes; CSV keeps standard quoting.
        quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
        rows = csv.reader(f, delimiter=delimiter, quoting=quoting)
        columns = (0, 1)
        for i, row in enumerate(rows):
            if i == 0 and source_lang in row and target_lang in row:  # a header naming the language columns
                columns = (row.index(source_lang), row.index(target_lang))
                continue
            if not row or not any(cell.strip() for cell in row):
                stats.skip("blank lines")
                continue
            if len(row) <= max(columns):
                stats.skip("rows with too few columns")
                continue
            stats.rows += 1
            yield row[columns[0]], row[columns[1]]


def read_text_lines(path: str | os.PathLike, *, stats: CorpusStats | None = None) -> Iterator[str]:
    """Stream the lines of a plain text file without their line ending; blank lines are skipped and counted.

    Raises `FileNotFoundError` at call time for a missing file.
    """
    path = _check_file(path)
    return _read_lines(path, stats if stats is not None else CorpusStats())


def _read_lines(path: Path, stats: CorpusStats) -> Iterator[str]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\r\n")
            if not line.strip():
                stats.skip("blank lines")
                continue
            stats.rows += 1
            yield line


def read_hub_translation_pairs(
    dataset_name: str,
    dataset_config_name: str | None = None,
    source_lang: str = "en",
    target_lang: str = "zh",
    *,
    split: str = "train",
    stats: CorpusStats | None = None,
) -> Iterator[tuple[str, str]]:
    """Stream `(source, target)` pairs from a Hub dataset with a `translation` column (e.g. `wmt/wmt19`, `zh-en`).

    The dataset is opened at call time, so `ConnectionError` (with a hint to use a local `--train_file`) is raised
    before any pair is read when the Hub cannot be reached.
    """
    import datasets  # imported here: the local readers do not need it

    stats = stats if stats is not None else CorpusStats()
    try:
        dataset = datasets.load_dataset(dataset_name, dataset_config_name, split=split, streaming=True)
    except Exception as error:  # offline, unknown id, gated... all surface as different exception types
        raise ConnectionError(
            f"could not load Hub dataset {dataset_name!r} (config {dataset_config_name!r}, split {split!r}): {error}. "
            "If you are offline (HF_HUB_OFFLINE=1 or no network), pass a local JSONL/TSV file with --train_file."
        ) from error
    return _hub_pairs(dataset, source_lang, target_lang, stats)


def _hub_pairs(dataset, source_lang: str, target_lang: str, stats: CorpusStats) -> Iterator[tuple[str, str]]:
    for row in dataset:
        pair = pair_from_row(row, source_lang, target_lang)
        if isinstance(pair, str):
            stats.skip(pair)
            continue
        stats.rows += 1
        yield pair

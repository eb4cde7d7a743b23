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
import logging
import os
import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

JSON_SUFFIXES = (".jsonl", ".json")
DELIMITED_SUFFIXES = {".tsv": "\t", ".csv": ","}
# Files are decoded with errors="replace": a line holding invalid UTF-8 then holds U+FFFD and is skipped and counted
# (instead of one bad byte aborting the read). Text that legitimately contains U+FFFD is skipped too.
ENCODING_ERRORS = "replace"
INVALID_UTF8 = "lines that are not valid UTF-8"


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


def _cells(line: str, delimiter: str) -> list[str]:
    # QUOTE_NONE for TSV: sentences may contain quotes; CSV keeps standard quoting.
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    return next(csv.reader([line], delimiter=delimiter, quoting=quoting), [])


@dataclass
class RowParser:
    """The one parser of translation rows, for every reader (tokenizer CLI, trainer, scorer).

    Turns a row into ``(source, target)`` or the reason it is malformed (a key of the skip counts). `kind` is "jsonl",
    "tsv" or "csv" (the row is one line of the file, a str or the text builder's ``{"text": line}``) or "hub" (a
    dict row of a Hub dataset). Use `RowParser.for_file` for a local file: it reads the header of a delimited file.
    """

    kind: str
    source_lang: str
    target_lang: str
    columns: tuple[int, int] = (0, 1)  # delimited files: source/target column indices
    header: list[str] | None = None  # delimited files: the header row, skipped wherever it turns up

    @classmethod
    def for_file(cls, path: str | os.PathLike, source_lang: str, target_lang: str) -> RowParser:
        """The parser of a local .jsonl/.json/.tsv/.csv file; ValueError for another suffix."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix in JSON_SUFFIXES:
            return cls("jsonl", source_lang, target_lang)
        if suffix not in DELIMITED_SUFFIXES:
            raise ValueError(f"unsupported file type {suffix!r} for translation pairs ({path}): use .jsonl, .tsv or .csv")
        parser = cls(suffix[1:], source_lang, target_lang)
        # A header names the language columns. It is read here because with several processes only one of them
        # streams the first line.
        with path.open(encoding="utf-8", errors=ENCODING_ERRORS, newline="") as f:
            cells = _cells(f.readline().rstrip("\r\n"), DELIMITED_SUFFIXES[suffix])
        if source_lang in cells and target_lang in cells:
            parser.header, parser.columns = cells, (cells.index(source_lang), cells.index(target_lang))
        return parser

    def __call__(self, row: dict[str, Any] | str) -> tuple[str, str] | str:
        if self.kind == "hub":
            pair = pair_from_row(row, self.source_lang, self.target_lang)
        else:
            line = row if isinstance(row, str) else row["text"]
            if not line.strip():
                return "blank lines"
            if "\ufffd" in line:
                return INVALID_UTF8
            if self.kind == "jsonl":
                try:
                    pair = pair_from_row(json.loads(line), self.source_lang, self.target_lang)
                except json.JSONDecodeError:
                    return "lines that are not valid JSON"
            else:
                cells = _cells(line, DELIMITED_SUFFIXES["." + self.kind])
                if self.header is not None and cells == self.header:
                    return "header"
                if len(cells) <= max(self.columns):
                    return "rows with too few columns"
                pair = (cells[self.columns[0]], cells[self.columns[1]])
        if isinstance(pair, str):
            return pair
        if not pair[0].strip() or not pair[1].strip():
            return "rows with empty text"
        return pair


def read_translation_pairs(
    path: str | os.PathLike,
    source_lang: str = "en",
    target_lang: str = "zh",
    *,
    stats: CorpusStats | None = None,
) -> Iterator[tuple[str, str]]:
    """Stream `(source, target)` pairs from a local `.jsonl`/`.json` (one JSON object per line), `.tsv` or `.csv` file.

    Malformed rows (bad JSON or UTF-8, missing language, empty text, wrong column count) and blank lines are skipped
    and counted in `stats`. Raises `FileNotFoundError` for a missing file and `ValueError` for an unsupported suffix,
    at call time (before the first pair is read).
    """
    path = _check_file(path)
    parser = RowParser.for_file(path, source_lang, target_lang)
    return _parsed_lines(path, parser, stats if stats is not None else CorpusStats())


def _parsed_lines(path: Path, parser: RowParser, stats: CorpusStats) -> Iterator[tuple[str, str]]:
    with path.open(encoding="utf-8", errors=ENCODING_ERRORS, newline="") as f:
        for line in f:
            pair = parser(line.rstrip("\r\n"))
            if isinstance(pair, str):
                if pair != "header":
                    stats.skip(pair)
                continue
            stats.rows += 1
            yield pair


def read_text(path: str | os.PathLike, *, stats: CorpusStats | None = None) -> str:
    """The whole text of a file with its line breaks, lines holding invalid UTF-8 dropped (and counted)."""
    stats = stats if stats is not None else CorpusStats()
    text = _check_file(path).read_text(encoding="utf-8", errors=ENCODING_ERRORS)
    return drop_invalid_lines(text, stats)


def drop_invalid_lines(text: str, stats: CorpusStats) -> str:
    """`text` without the lines that hold invalid UTF-8 (U+FFFD after decoding with errors="replace"), counted."""
    if "\ufffd" not in text:
        return text
    kept = []
    for line in text.splitlines(keepends=True):
        if "\ufffd" in line:
            stats.skip(INVALID_UTF8)
        else:
            kept.append(line)
    return "".join(kept)


def read_text_lines(path: str | os.PathLike, *, stats: CorpusStats | None = None) -> Iterator[str]:
    """Stream the lines of a plain text file without their line ending; blank lines are skipped and counted.

    Raises `FileNotFoundError` at call time for a missing file.
    """
    path = _check_file(path)
    return _read_lines(path, stats if stats is not None else CorpusStats())


def _read_lines(path: Path, stats: CorpusStats) -> Iterator[str]:
    with path.open(encoding="utf-8", errors=ENCODING_ERRORS) as f:
        for line in f:
            line = line.rstrip("\r\n")
            if not line.strip():
                stats.skip("blank lines")
                continue
            if "\ufffd" in line:
                stats.skip(INVALID_UTF8)
                continue
            stats.rows += 1
            yield line


class HubDatasetError(ConnectionError):
    """A Hub dataset that cannot be streamed (Hub unreachable, unknown id, config or split). The message is one line."""


_SCRIPT_REFUSED = "Dataset scripts are no longer supported"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _split_patterns(card_data: Any, config: str | None, split: str) -> list[str]:
    """The `data_files` patterns of `split` in the dataset card's YAML `configs:` (default: ``<config>/<split>-*``)."""
    configs = card_data.get("configs") or [] if isinstance(card_data, dict) else []
    for entry in configs:
        if entry.get("config_name", "default") != (config or "default"):
            continue
        files = entry.get("data_files") or []
        files = [files] if isinstance(files, str | dict) else files
        for item in files:
            if isinstance(item, dict) and item.get("split") == split:
                paths = item.get("path")
                return [paths] if isinstance(paths, str) else list(paths or [])
    return [f"{config}/{split}-*" if config else f"data/{split}-*"]


def _parquet_files(files: list[str], card_data: dict, config: str | None, split: str) -> list[str]:
    """The repo's Parquet files of `config`/`split`, as matched by the card's patterns (fsspec/glob semantics)."""
    from fnmatch import fnmatchcase

    patterns = _split_patterns(card_data, config, split)
    return sorted(f for f in files if f.endswith(".parquet") and any(fnmatchcase(f, p) for p in patterns))


def _downloaded_copy(
    dataset_name: str, dataset_config_name: str | None, split: str, what: str, reason: str
) -> tuple[SplitFiles, str]:
    """Offline (HF_HUB_OFFLINE=1), `datasets` cannot stream a Hub repo even when it is in the cache: stream the
    Parquet files of a copy downloaded before (`hf download --repo-type dataset NAME`) from the local cache."""
    from huggingface_hub import DatasetCard, snapshot_download
    from huggingface_hub.errors import IncompleteSnapshotError

    def cached(patterns: list[str]) -> Path:  # the snapshot folder; raises if a file of `patterns` is missing
        return Path(snapshot_download(dataset_name, repo_type="dataset", local_files_only=True,
                                      allow_patterns=patterns))  # fmt: skip

    try:
        local = cached(["README.md"])
    except IncompleteSnapshotError as error:  # downloaded without its card: the default file layout
        local = Path(error.snapshot_path)
    except Exception:  # LocalEntryNotFoundError and friends: nothing downloaded
        raise HubDatasetError(
            f"HF_HUB_OFFLINE=1 and no downloaded copy of {dataset_name!r} in the cache ({reason}): download it once "
            f"with `hf download --repo-type dataset {dataset_name}`, or pass local files with --train_file"
        ) from None
    card = local / "README.md"
    card_data = DatasetCard.load(card).data.to_dict() if card.is_file() else {}
    try:
        cached(_split_patterns(card_data, dataset_config_name, split))  # every file of the split is there
    except IncompleteSnapshotError as error:
        raise HubDatasetError(f"HF_HUB_OFFLINE=1: {_first_line(error)}") from None
    files = _parquet_files([p.relative_to(local).as_posix() for p in local.rglob("*.parquet")], card_data,
                           dataset_config_name, split)  # fmt: skip
    if not files:
        raise HubDatasetError(f"HF_HUB_OFFLINE=1: the downloaded copy of {dataset_name!r} in {local} has no Parquet "
                              f"files of config {dataset_config_name!r}, split {split!r}")  # fmt: skip
    how = f"HF_HUB_OFFLINE=1: streaming {what} from the {len(files)} Parquet file(s) downloaded in {local}"
    return SplitFiles.of_parquet(split, [str(local / f) for f in files]), how


@dataclass
class SplitFiles:
    """One split as its resolved data files (a Hub split's, or one local file), streamed in file order or, for
    Parquet files, in any order.

    ``stream()`` is the split in file order (made once, then reused); ``stream(order)`` reads the files in `order`
    (a permutation of ``range(num_files)``) with the ``parquet`` builder and the split's features, so every order
    yields the same columns. A split whose files are not Parquet is only read in file order (`reorderable`).
    """

    split: str
    files: list[str]  # hf://datasets/NAME@SHA/... or paths in the local cache
    open_in_file_order: Callable[[], Any]
    features: Any = None  # datasets.Features of the split (None: read from the Parquet schema)
    reorderable: bool = True
    _in_file_order: Any = field(default=None, repr=False)

    @classmethod
    def of_parquet(cls, split: str, files: list[str]) -> SplitFiles:
        return cls(split, files, lambda: _stream_parquet(split, files, None))

    @property
    def num_files(self) -> int:
        return len(self.files)

    def stream(self, order: Sequence[int] | None = None):
        """A streaming `datasets.IterableDataset` of the split, its files read in `order` (None: file order)."""
        if order is None:
            if self._in_file_order is None:
                self._in_file_order = self.open_in_file_order()
            return self._in_file_order
        if sorted(order) != list(range(self.num_files)):
            raise ValueError(f"not an order of the {self.num_files} files of split {self.split!r}: {list(order)}")
        if not self.reorderable:
            raise ValueError(f"the files of split {self.split!r} are not Parquet: they are read in file order only")
        return _stream_parquet(self.split, [self.files[i] for i in order], self.features)


def _stream_parquet(split: str, files: list[str], features: Any):
    import datasets

    return datasets.load_dataset("parquet", data_files={split: files}, split=split, features=features, streaming=True)


def shard_order(num_files: int, seed: int, epoch: int) -> list[int]:
    """The order in which epoch `epoch` reads the `num_files` files of a split: a permutation drawn from `seed` and
    `epoch` alone (the same on every process and after a resume; another one each epoch)."""
    order = list(range(num_files))
    random.Random(f"shard order {seed} {epoch}").shuffle(order)
    return order


def stream_hub_dataset(dataset_name: str, dataset_config_name: str | None, split: str) -> tuple[Any, str]:
    """Stream one split of a Hub dataset: ``(datasets.IterableDataset, how)``, `how` a sentence for the log
    (`open_hub_split`, in the repo's file order)."""
    split_files, how = open_hub_split(dataset_name, dataset_config_name, split)
    return split_files.stream(), how


def open_hub_split(dataset_name: str, dataset_config_name: str | None, split: str) -> tuple[SplitFiles, str]:
    """Open one split of a Hub dataset to stream: ``(SplitFiles, how)``, `how` a sentence for the log.

    The Hub is asked once first (`HfApi.dataset_info`), so an unreachable endpoint is one `HubDatasetError` within
    seconds (``load_dataset`` would retry each file for ~25 s, warning each time). A repo that still holds a loading
    script (``wmt/wmt19`` has carried ``wmt19.py`` next to its Parquet files) is refused by ``datasets`` ≥ 4; its
    Parquet files of the split (by the card's YAML ``configs:``, else ``<config>/<split>-*``) are then streamed with
    the ``parquet`` builder, pinned to the revision just asked, and `how` says so. Offline (``HF_HUB_OFFLINE=1``),
    where ``datasets`` streams nothing, the Parquet files of a copy downloaded before
    (``hf download --repo-type dataset NAME``) are streamed from the local cache. The split's data files are
    resolved here, so its `SplitFiles` streams them in any order (``SplitFiles.stream(order)``) without asking again.
    """
    import datasets
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    what = f"{dataset_name!r} ({dataset_config_name}, split {split!r})"
    info = None
    if not constants.is_offline_mode():  # offline, load_dataset reads the cache
        try:
            info = HfApi().dataset_info(dataset_name, revision="main")  # as datasets asks (olah needs the revision)
        except RepositoryNotFoundError:
            raise HubDatasetError(f"dataset {dataset_name!r} not found on the Hub at {constants.ENDPOINT}") from None
        except HfHubHTTPError as error:
            raise HubDatasetError(f"the Hub at {constants.ENDPOINT} refused {what}: {_first_line(error)}") from None
        except Exception as error:  # connection refused, DNS, timeout: the transport's own exception types
            raise HubDatasetError(
                f"cannot reach the Hugging Face Hub at {constants.ENDPOINT} to stream {what} ({_first_line(error)}): "
                "set HF_HUB_OFFLINE=1 to stream a copy downloaded before, or pass local files with --train_file"
            ) from None
    try:
        # = load_dataset(..., streaming=True), keeping the builder's resolved data files
        builder = datasets.load_dataset_builder(dataset_name, dataset_config_name)
        files = list((builder.config.data_files or {}).get(split) or [])
        split_files = SplitFiles(split, files, lambda: builder.as_streaming_dataset(split=split),
                                 reorderable=builder.name == "parquet" and bool(files))  # fmt: skip
        split_files.stream()  # a missing split fails here
        split_files.features = builder.info.features  # known now (from the card or the first file's schema)
        return split_files, f"Streaming {what} from {constants.ENDPOINT} with datasets' loader for the repo"
    except Exception as error:  # missing config or split, offline without a cache... many exception types
        if info is None:
            return _downloaded_copy(dataset_name, dataset_config_name, split, what, _first_line(error))
        if _SCRIPT_REFUSED not in str(error):
            raise HubDatasetError(
                f"cannot stream {what} from the Hub: {_first_line(error)} — pass local files with --train_file instead"
            ) from error
        script = _first_line(error).rsplit(" ", 1)[-1]
    card_data = info.card_data.to_dict() if info.card_data else {}
    files = _parquet_files([s.rfilename for s in info.siblings or []], card_data, dataset_config_name, split)
    if not files:
        raise HubDatasetError(
            f"{dataset_name!r} holds a loading script ({script}), which datasets {datasets.__version__} does not run, "
            f"and no Parquet files of config {dataset_config_name!r}, split {split!r}"
        )
    urls = [f"hf://datasets/{dataset_name}@{info.sha}/{f}" for f in files]
    split_files = SplitFiles.of_parquet(split, urls)
    try:
        split_files.stream()
    except Exception as error:
        raise HubDatasetError(f"cannot stream the Parquet files of {what}: {_first_line(error)}") from error
    shown = files[0] if len(files) == 1 else f"{files[0]} ... {files[-1]}"
    return split_files, (
        f"{dataset_name!r} holds a loading script ({script}), which datasets {datasets.__version__} does not run: "
        f"streaming its {len(files)} Parquet file(s) of {what} instead (data_files {shown} at {info.sha[:12]})"
    )


def read_hub_translation_pairs(
    dataset_name: str,
    dataset_config_name: str | None = None,
    source_lang: str = "en",
    target_lang: str = "zh",
    *,
    split: str = "train",
    stats: CorpusStats | None = None,
    shard_seed: int | None = None,
) -> Iterator[tuple[str, str]]:
    """Stream `(source, target)` pairs from a Hub dataset with a `translation` column (e.g. `wmt/wmt19`, `zh-en`).

    The dataset is opened at call time (`open_hub_split`, which logs how), so a `HubDatasetError` (a
    `ConnectionError`, with a hint to use a local `--train_file`) is raised before any pair is read when the Hub
    cannot be reached. With `shard_seed`, Parquet files are read in `shard_order(n, shard_seed, 0)`, the order
    `train_mt.py --seed shard_seed` starts its first epoch with (its own tokenizer pass reads the same pairs).
    """
    stats = stats if stats is not None else CorpusStats()
    split_files, how = open_hub_split(dataset_name, dataset_config_name, split)
    logger.info(how)
    order = None
    if shard_seed is not None and split_files.reorderable and split_files.num_files > 1:
        order = shard_order(split_files.num_files, shard_seed, 0)
        logger.info(f"reading the {split_files.num_files} files in the order {order}, drawn from --seed {shard_seed}")
    return _hub_pairs(split_files.stream(order), source_lang, target_lang, stats)


def _hub_pairs(dataset, source_lang: str, target_lang: str, stats: CorpusStats) -> Iterator[tuple[str, str]]:
    parser = RowParser("hub", source_lang, target_lang)
    with closing_rows(dataset) as rows:
        for row in rows:
            pair = parser(row)
            if isinstance(pair, str):
                stats.skip(pair)
                continue
            stats.rows += 1
            yield pair


@contextmanager
def closing_rows(dataset) -> Iterator[Iterator]:
    """Iterate a streaming dataset and close its reader when done, also when stopped midway (`--max_train_samples`).

    A stream left suspended in the middle of a Parquet file keeps pyarrow reading ahead; if nothing closes it before
    the interpreter exits, the process can abort at exit ("terminate called without an active exception").
    """
    rows = iter(dataset)
    try:
        yield rows
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            close()

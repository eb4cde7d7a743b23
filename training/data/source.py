"""Translation data sources: a local .jsonl/.tsv/.csv file or a Hub dataset, streamed with `datasets`.

A local file is streamed with the ``text`` builder, one row per line, and each line is parsed by the corpus module's
`RowParser` (the one parser of every reader): the ``json`` builder would abort on the first line that is not JSON,
we count it and go on. Files are decoded with ``errors="replace"``, so a line with invalid UTF-8 is skipped and counted
too. With several processes, ``split_dataset_by_node`` (in the trainer) gives each one its own part of the stream.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from accelerate.logging import get_logger
from nanoformer.tokenization.corpus import (
    DELIMITED_SUFFIXES,
    ENCODING_ERRORS,
    JSON_SUFFIXES,
    HubDatasetError,
    RowParser,
    SplitFiles,
    open_hub_split,
)
from nanoformer.training.arguments import UsageError

LOCAL_SUFFIXES = (*JSON_SUFFIXES, *DELIMITED_SUFFIXES)
logger = get_logger(__name__)  # logs on the main process only


class DataSourceError(UsageError):
    """A training/validation source that cannot be opened (missing file, unreachable Hub). The message is one line."""


def open_translation_source(
    *,
    data_file: str | None,
    dataset_name: str | None,
    dataset_config_name: str | None,
    split: str,
    source_lang: str,
    target_lang: str,
    flag: str = "--train_file",
):
    """Open a streaming `datasets.IterableDataset` of raw rows and the `RowParser` for them (`open_translation_split`,
    files in file order)."""
    split_files, parser = open_translation_split(
        data_file=data_file, dataset_name=dataset_name, dataset_config_name=dataset_config_name, split=split,
        source_lang=source_lang, target_lang=target_lang, flag=flag,
    )  # fmt: skip
    return split_files.stream(), parser


def open_translation_split(
    *,
    data_file: str | None,
    dataset_name: str | None,
    dataset_config_name: str | None,
    split: str,
    source_lang: str,
    target_lang: str,
    flag: str = "--train_file",
) -> tuple[SplitFiles, RowParser]:
    """Open the data files of a split (`SplitFiles`: streamed in file order, or a Hub split's Parquet files in any
    order) and the `RowParser` for its rows.

    A local `data_file` takes precedence over `dataset_name`; a Hub dataset is opened by `open_hub_split` (which
    streams the Parquet files of a repo that still holds a loading script) and how is logged. Raises
    `DataSourceError` with a one-line message for a missing or unsupported file, or a Hub dataset that cannot be
    loaded (an unreachable Hub names the endpoint, within seconds).
    """
    import datasets

    if data_file:
        path = Path(data_file)
        if not path.is_file():
            raise DataSourceError(f"{flag} {data_file}: file not found")
        suffix = path.suffix.lower()
        if suffix not in LOCAL_SUFFIXES:
            raise DataSourceError(f"{flag} {data_file}: unsupported file type {suffix!r} (use .jsonl, .tsv or .csv)")
        parser = RowParser.for_file(path, source_lang, target_lang)

        def lines():  # keep_linebreaks=False: a row is the line without its newline.
            return datasets.load_dataset(
                "text", data_files={split: str(path)}, split=split, streaming=True, encoding_errors=ENCODING_ERRORS
            )

        split_files = SplitFiles(split, [str(path)], lines, reorderable=False)
        split_files.stream()  # opened now, as before
        return split_files, parser
    if not dataset_name:
        raise DataSourceError(f"no data: pass {flag} (a local .jsonl/.tsv/.csv file) or --dataset_name")
    try:
        split_files, how = open_hub_split(dataset_name, dataset_config_name, split)
    except HubDatasetError as error:
        raise DataSourceError(str(error).replace("--train_file", flag)) from None
    logger.info(how)
    return split_files, RowParser("hub", source_lang, target_lang)


def read_pairs(
    dataset, parser: RowParser, limit: int | None = None, counters: Counter | None = None
) -> list[tuple[str, str]]:
    """The first `limit` well-formed pairs of a streaming dataset (for validation sets); malformed rows counted."""
    counters = counters if counters is not None else Counter()
    pairs = []
    for row in dataset:
        pair = parser(row)
        if isinstance(pair, str):
            if pair != "header":
                counters[pair] += 1
            continue
        pairs.append(pair)
        if limit is not None and len(pairs) >= limit:
            break
    return pairs



"""Streaming translation data for `train_mt.py`: `datasets` streaming → parse → tokenize → shuffle → token batches.

The pipeline, per process:

1. **Source.** A Hub dataset id (e.g. ``wmt/wmt19``, ``zh-en``) is streamed with ``load_dataset(..., streaming=True)``.
   A local ``.jsonl``/``.tsv``/``.csv`` file is streamed with the ``text`` builder, one row per line, and each line is
   parsed here: the ``json`` builder aborts on the first line that is not JSON, we count it and go on.
   With several processes, ``split_dataset_by_node`` gives each one its own part of the stream.
2. **Parse.** A row becomes ``(source, target)`` or is *malformed* (not JSON, missing a language, empty or non-string
   text): malformed rows are skipped and counted by reason (`counters`).
3. **Tokenize** on the fly in chunks (the fast tokenizer encodes a chunk in one Rust call). Pairs longer than
   ``max_source_length``/``max_target_length`` are truncated (keeping ``</s>``) or dropped, and counted.
4. **Shuffle + bucket.** Tokenized pairs go into a shuffle buffer of ``shuffle_buffer_size`` pairs. When it is full,
   it is shuffled and half of it is sorted by length and cut into batches of at most ``max_tokens`` *padded* tokens
   (``n_pairs * (longest source + longest target)``), like fairseq's ``--max-tokens``; the batches are emitted in
   random order. Pairs of similar length share a batch, so little compute is spent on padding.
5. **Prefetch.** A background thread runs steps 1–4 ahead of the training loop (`PrefetchIterator`), so the
   accelerator does not wait for Python data work; the loop measures the time it still waits.

The stream repeats (epochs) forever; the trainer stops on ``--max_train_steps``/``--max_train_minutes``.

**Resume (`TranslationBatchStream.state_dict`).** The saved state is exact: it holds the ``datasets`` stream position
(``IterableDataset.state_dict()``: rows already read are not read again), the epoch, the *contents* of our shuffle
buffer and of the batches cut but not yet emitted, the shuffling RNG and the counters, all as they were right after the
last batch the trainer consumed (batches prefetched but not consumed are produced again). A resumed run therefore sees
the same batches, in the same order, as an uninterrupted one. We use no ``datasets`` shuffle buffer — its contents are
not saved and would be refilled with new rows on resume, losing the rows that were in it. For a Hub dataset with
several shards the shard order is shuffled per epoch (``shuffle(buffer_size=1)`` holds no rows, so nothing is lost).
Not restored: nothing else. A checkpoint is only valid for the same data files, tokenizer and data arguments.
"""

from __future__ import annotations

import csv
import json
import queue
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import torch
from nanoformer.tokenization.corpus import DELIMITED_SUFFIXES, JSON_SUFFIXES, pair_from_row
from nanoformer.training.arguments import UsageError

LOCAL_SUFFIXES = (*JSON_SUFFIXES, *DELIMITED_SUFFIXES)


class DataSourceError(UsageError):
    """A training/validation source that cannot be opened (missing file, unreachable Hub). The message is one line."""


# --------------------------------------------------------------------------------------------------------------------
# Sources and row parsing
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class RowParser:
    """Turns one streamed row into ``(source, target)`` or the reason it is malformed.

    `kind` is "jsonl", "tsv", "csv" (a ``{"text": line}`` row from the text builder) or "hub" (a dict row).
    """

    kind: str
    source_lang: str
    target_lang: str
    columns: tuple[int, int] = (0, 1)  # delimited files: source/target column indices
    header: list[str] | None = None  # delimited files: the header row, skipped wherever it turns up

    def __call__(self, row: dict[str, Any]) -> tuple[str, str] | str:
        if self.kind == "hub":
            pair = pair_from_row(row, self.source_lang, self.target_lang)
        elif self.kind == "jsonl":
            line = row["text"]
            if not line.strip():
                return "blank lines"
            try:
                pair = pair_from_row(json.loads(line), self.source_lang, self.target_lang)
            except json.JSONDecodeError:
                return "lines that are not valid JSON"
        else:
            line = row["text"]
            if not line.strip():
                return "blank lines"
            delimiter = DELIMITED_SUFFIXES["." + self.kind]
            quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
            cells = next(csv.reader([line], delimiter=delimiter, quoting=quoting))
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
    """Open a streaming `datasets.IterableDataset` of raw rows and the `RowParser` for them.

    A local `data_file` takes precedence over `dataset_name`. Raises `DataSourceError` with a one-line message for a
    missing or unsupported file, or a Hub dataset that cannot be loaded.
    """
    import datasets

    if data_file:
        path = Path(data_file)
        if not path.is_file():
            raise DataSourceError(f"{flag} {data_file}: file not found")
        suffix = path.suffix.lower()
        if suffix not in LOCAL_SUFFIXES:
            raise DataSourceError(f"{flag} {data_file}: unsupported file type {suffix!r} (use .jsonl, .tsv or .csv)")
        parser = RowParser("jsonl" if suffix in JSON_SUFFIXES else suffix[1:], source_lang, target_lang)
        if parser.kind != "jsonl":
            # The header (if any) names the language columns; read it here because with several processes only
            # one of them streams the first line.
            with path.open(encoding="utf-8", newline="") as f:
                first = f.readline().rstrip("\r\n")
            delimiter = DELIMITED_SUFFIXES[suffix]
            quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
            cells = next(csv.reader([first], delimiter=delimiter, quoting=quoting), [])
            if source_lang in cells and target_lang in cells:
                parser.header = cells
                parser.columns = (cells.index(source_lang), cells.index(target_lang))
        # keep_linebreaks=False: a row is the line without its newline.
        dataset = datasets.load_dataset("text", data_files={split: str(path)}, split=split, streaming=True)
        return dataset, parser
    if not dataset_name:
        raise DataSourceError(f"no data: pass {flag} (a local .jsonl/.tsv/.csv file) or --dataset_name")
    try:
        dataset = datasets.load_dataset(dataset_name, dataset_config_name, split=split, streaming=True)
    except Exception as error:  # offline, unknown id, missing split... surface as many exception types
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DataSourceError(
            f"cannot stream {dataset_name!r} ({dataset_config_name}, split {split!r}) from the Hugging Face Hub: "
            f"{reason} — pass local files with {flag} instead"
        ) from error
    return dataset, RowParser("hub", source_lang, target_lang)


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


# --------------------------------------------------------------------------------------------------------------------
# Token batches
# --------------------------------------------------------------------------------------------------------------------


def pad_batch(
    pairs: list[tuple[list[int], list[int]]], pad_token_id: int, label_pad_id: int = -100
) -> dict[str, torch.Tensor]:
    """Right-pad ``(source ids, target ids)`` pairs: ``input_ids``, ``attention_mask``, ``labels`` (-100 = ignore)."""
    src_len = max(len(s) for s, _ in pairs)
    tgt_len = max(len(t) for _, t in pairs)
    input_ids = torch.full((len(pairs), src_len), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(pairs), src_len), dtype=torch.long)
    labels = torch.full((len(pairs), tgt_len), label_pad_id, dtype=torch.long)
    for i, (src, tgt) in enumerate(pairs):
        input_ids[i, : len(src)] = torch.tensor(src)
        attention_mask[i, : len(src)] = 1
        labels[i, : len(tgt)] = torch.tensor(tgt)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def bucket_into_batches(pairs: list[tuple[list[int], list[int]]], max_tokens: int) -> list[list[tuple]]:
    """Sort pairs by length and cut them into batches of at most `max_tokens` padded source + target tokens."""
    pairs = sorted(pairs, key=lambda p: (len(p[0]), len(p[1])))
    batches, current, src_max, tgt_max = [], [], 0, 0
    for src, tgt in pairs:
        new_src, new_tgt = max(src_max, len(src)), max(tgt_max, len(tgt))
        if current and (len(current) + 1) * (new_src + new_tgt) > max_tokens:
            batches.append(current)
            current, new_src, new_tgt = [], len(src), len(tgt)
        current.append((src, tgt))
        src_max, tgt_max = new_src, new_tgt
    if current:
        batches.append(current)
    return batches


@dataclass
class _StreamState:
    """Everything needed to continue the batch stream exactly (see the module docstring)."""

    dataset: dict | None = None  # datasets IterableDataset.state_dict() (None = start of the epoch)
    epoch: int = 0
    buffer: list = field(default_factory=list)  # tokenized pairs waiting in the shuffle buffer
    pending: list = field(default_factory=list)  # batches cut but not yet emitted (emitted from the end)
    rng: list | None = None  # random.Random.getstate() as JSON
    counters: Counter = field(default_factory=Counter)


class TranslationBatchStream:
    """An endless, resumable stream of length-bucketed token batches for one process (see the module docstring).

    Iterating yields ``(batch, state)``: ``batch`` holds padded ``input_ids``, ``attention_mask``, ``labels`` and
    ``state`` is the JSON-able stream state right after this batch (what a checkpoint saves with it).
    `counters` holds rows read, malformed rows by reason and truncated/dropped over-long pairs (all counted on the
    first pass over the data) and pairs batched (all epochs).
    """

    def __init__(
        self,
        dataset,
        parser: RowParser,
        tokenizer,
        *,
        max_tokens: int,
        max_source_length: int,
        max_target_length: int,
        overlong: str = "truncate",
        shuffle_buffer_size: int = 10_000,
        seed: int = 0,
        target_transform: Callable[[str], str] | None = None,
        tokenize_chunk: int = 512,
    ) -> None:
        if overlong not in ("truncate", "drop"):
            raise ValueError(f"overlong must be 'truncate' or 'drop', got {overlong!r}")
        if max_tokens < max_source_length + max_target_length:
            raise ValueError(
                f"--max_tokens_per_batch ({max_tokens}) must be at least --max_source_length + --max_target_length "
                f"({max_source_length} + {max_target_length}) so that every pair fits in a batch"
            )
        self.dataset = dataset
        self.parser = parser
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.max_source_length = max_source_length
        self.max_target_length = max_target_length
        self.overlong = overlong
        self.shuffle_buffer_size = max(2, shuffle_buffer_size)
        self.target_transform = target_transform
        self.tokenize_chunk = tokenize_chunk
        self.eos_token_id = tokenizer.eos_token_id
        self.state = _StreamState()
        self.rng = random.Random(seed)

    # -- state ---------------------------------------------------------------------------------------------------
    def _snapshot(self) -> dict[str, Any]:
        rng = self.rng.getstate()
        return {
            "dataset": self.state.dataset,
            "epoch": self.state.epoch,
            "buffer": list(self.state.buffer),
            "pending": list(self.state.pending),
            "rng": [rng[0], list(rng[1]), rng[2]],
            "counters": dict(self.state.counters),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a state yielded with a batch (call before iterating)."""
        self.state = _StreamState(
            dataset=state["dataset"],
            epoch=state["epoch"],
            buffer=[tuple(p) for p in state["buffer"]],
            pending=[[tuple(p) for p in batch] for batch in state["pending"]],
            counters=Counter(state["counters"]),
        )
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))

    @property
    def counters(self) -> Counter:
        return self.state.counters

    # -- pipeline ------------------------------------------------------------------------------------------------
    def _fit(self, ids: list[int], limit: int) -> list[int] | None:
        if len(ids) <= limit:
            return ids
        if self.overlong == "drop":
            return None
        return ids[: limit - 1] + [self.eos_token_id]  # truncated, still ends with </s>

    def _add_rows(self, rows: list[dict]) -> None:
        # Rows are counted on the first pass over the data only: later epochs read the same rows again.
        counters = self.state.counters if self.state.epoch == 0 else Counter()
        sources, targets = [], []
        for row in rows:
            counters["rows"] += 1
            pair = self.parser(row)
            if isinstance(pair, str):
                if pair != "header":
                    counters[f"malformed: {pair}"] += 1
                continue
            sources.append(pair[0])
            targets.append(self.target_transform(pair[1]) if self.target_transform else pair[1])
        if not sources:
            return
        encoded = self.tokenizer(sources, text_target=targets)
        for src, tgt in zip(encoded["input_ids"], encoded["labels"]):
            too_long = len(src) > self.max_source_length or len(tgt) > self.max_target_length
            src, tgt = self._fit(src, self.max_source_length), self._fit(tgt, self.max_target_length)
            if src is None or tgt is None:
                counters["dropped_overlong"] += 1
                continue
            counters["truncated_overlong"] += too_long
            self.state.buffer.append((src, tgt))

    def _cut(self, pairs: list) -> None:
        batches = bucket_into_batches(pairs, self.max_tokens)
        self.rng.shuffle(batches)
        self.state.pending = batches + self.state.pending  # emitted from the end

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], dict[str, Any]]]:
        state = self.state
        rows_iter = None
        while True:
            while state.pending:
                pairs = state.pending.pop()
                state.counters["pairs"] += len(pairs)
                yield pad_batch(pairs, self.tokenizer.pad_token_id), self._snapshot()
            if rows_iter is None:
                self.dataset.set_epoch(state.epoch)
                if state.dataset is not None:
                    self.dataset.load_state_dict(state.dataset)
                rows_iter = iter(self.dataset)
            rows = list(islice(rows_iter, self.tokenize_chunk))
            state.dataset = self.dataset.state_dict()
            if rows:
                self._add_rows(rows)
                if len(state.buffer) >= self.shuffle_buffer_size:
                    self.rng.shuffle(state.buffer)
                    half = len(state.buffer) // 2
                    self._cut(state.buffer[:half])
                    state.buffer = state.buffer[half:]
                continue
            # End of the epoch: batch what is left, start the next pass over the data.
            if not state.buffer and state.counters["pairs"] == 0:
                raise DataSourceError(
                    f"no usable translation pairs in the training data ({state.counters['rows']} rows read, "
                    f"{malformed_count(state.counters)} malformed)"
                )
            if state.buffer:
                self.rng.shuffle(state.buffer)
                self._cut(state.buffer)
                state.buffer = []
            state.epoch += 1
            state.dataset = None
            rows_iter = None


def malformed_count(counters: Counter | dict) -> int:
    """Total malformed rows in stream counters."""
    return sum(v for k, v in counters.items() if k.startswith("malformed: "))


def skipped_rows(counters: Counter | dict) -> int:
    """Rows that never reached a batch: malformed ones and over-long pairs dropped."""
    return malformed_count(counters) + int(counters.get("dropped_overlong", 0))


def reduce_counters(accelerator, counters: Counter | dict) -> Counter:
    """Stream counters summed over processes (each process reads its own part of the stream)."""
    if accelerator.num_processes == 1:
        return Counter(counters)
    from accelerate.utils import gather_object

    total: Counter = Counter()
    for part in gather_object([dict(counters)]):
        total.update(part)
    return total


def describe_counters(counters: Counter | dict) -> str:
    """One line for the log: rows read, malformed rows by reason, truncated and dropped pairs."""
    reasons = {k.removeprefix("malformed: "): v for k, v in counters.items() if k.startswith("malformed: ")}
    text = f"{counters.get('rows', 0)} rows read, {sum(reasons.values())} malformed"
    if reasons:
        text += " (" + ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda kv: -kv[1])) + ")"
    text += f", {counters.get('truncated_overlong', 0)} truncated, {counters.get('dropped_overlong', 0)} dropped as too long"
    return text


class PrefetchIterator:
    """Runs an iterator in a daemon thread, `depth` items ahead; exceptions are re-raised in the consumer.

    `wait_seconds` accumulates the time the consumer spent blocked on the queue (data starvation).
    """

    _END = object()

    def __init__(self, iterable, depth: int = 8) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self.wait_seconds = 0.0
        self._thread = threading.Thread(target=self._run, args=(iterable,), daemon=True)
        self._thread.start()

    def _run(self, iterable) -> None:
        try:
            for item in iterable:
                while not self._stop.is_set():
                    try:
                        self._queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
            self._queue.put(self._END)
        except BaseException as error:  # noqa: BLE001 - handed to the consumer
            self._queue.put(error)

    def __iter__(self):
        return self

    def __next__(self):
        start = time.perf_counter()
        item = self._queue.get()
        self.wait_seconds += time.perf_counter() - start
        if item is self._END:
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()

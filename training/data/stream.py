"""The resumable batch stream of `train_mt.py`: `datasets` streaming → parse → tokenize → shuffle → token batches.

The pipeline, per process:

1. **Source.** A Hub dataset id (e.g. ``wmt/wmt19``, ``zh-en``) is streamed with ``load_dataset(..., streaming=True)``.
   A local ``.jsonl``/``.tsv``/``.csv`` file is streamed with the ``text`` builder, one row per line, and each line is
   parsed by the corpus `RowParser` (`source.py`). With several processes, ``split_dataset_by_node`` gives each one
   its own part of the stream.
2. **Parse.** A row becomes ``(source, target)`` or is *malformed* (not JSON or not UTF-8, missing a language, empty
   or non-string text): malformed rows are skipped and counted by reason (`counters`).
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
not saved and would be refilled with new rows on resume, losing the rows that were in it.

**Shard order.** A Hub split stored as several Parquet files is grouped by sub-corpus (``wmt/wmt19`` zh-en: news
commentary, then wikititles, the UN corpus...), which a 10k-pair buffer cannot mix. With ``dataset`` a function of
the epoch, the trainer (`mt_setup.py`) streams epoch ``e`` with the files in the order `shard_order` draws from the
seed and ``e`` (the same on every process, before ``split_dataset_by_node``): the same seed gives the same orders,
each epoch another. The state saves the epoch's order (``file_order``); a resume checks it against its own
`epoch_order`, rebuilds that order, then loads the ``datasets`` position in it, so it continues in the shard it
stopped in and reads on across the shard boundaries (tests/test_hub_streaming.py checks it against an uninterrupted
run).
Not restored: nothing else. A checkpoint is only valid for the same data files, tokenizer and data arguments.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import torch
from nanoformer.tokenization.corpus import RowParser
from nanoformer.training.data.batching import bucket_into_batches, pad_batch
from nanoformer.training.data.source import DataSourceError


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
        dataset: Any,  # a datasets.IterableDataset, or a function of the epoch returning that epoch's one
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
        epoch_order: Callable[[int], list[int] | None] | None = None,
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
        self.epoch_order = epoch_order  # the file order of an epoch (None: file order), saved and checked on resume
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
            "file_order": self.epoch_order(self.state.epoch) if self.epoch_order else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a state yielded with a batch (call before iterating). A state saved while reading the
        files in another order than this stream's `epoch_order` of its epoch (another --seed or --shuffle_shards;
        checkpoints before the shard order read them in file order) is refused in one line."""
        saved_order = state.get("file_order")
        order = self.epoch_order(state["epoch"]) if self.epoch_order else None
        if saved_order != order:
            def say(o: list[int] | None) -> str:
                return "in file order" if o is None else f"in the order {o}"

            raise DataSourceError(
                f"the checkpoint's data stream read epoch {state['epoch']}'s training files {say(saved_order)}, this "
                f"run reads them {say(order)}: resume with the checkpoint's --seed and --shuffle_shards or "
                "--no_shuffle_shards"
            )
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
        # Cut one token past each limit: enough to tell an overlong pair (counted, truncated or dropped below), and a
        # 3000-token line is neither encoded in full nor reported by the tokenizer as too long for the model.
        encoded = self.tokenizer(
            sources,
            text_target=targets,
            truncation=True,
            max_length=self.max_source_length + 1,
            max_target_length=self.max_target_length + 1,
        )
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
        rows_iter, dataset = None, None
        while True:
            while state.pending:
                pairs = state.pending.pop()
                state.counters["pairs"] += len(pairs)
                yield pad_batch(pairs, self.tokenizer.pad_token_id), self._snapshot()
            if rows_iter is None:
                dataset = self.dataset(state.epoch) if callable(self.dataset) else self.dataset
                dataset.set_epoch(state.epoch)
                if state.dataset is not None:
                    dataset.load_state_dict(state.dataset)
                rows_iter = iter(dataset)
            rows = list(islice(rows_iter, self.tokenize_chunk))
            state.dataset = dataset.state_dict()
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



"""Language-model data the nanoGPT way: one long array of token ids, random windows for training.

- `read_text_chunks`: the training text from a local file or a Hub dataset's text column, in ~1 MB pieces cut at
  line ends (so a large corpus is never one Python string).
- `encode_to_file`: token ids written to a ``.bin`` file as uint16 (uint32 when the vocabulary needs it) and read
  back with `np.memmap`, so even a corpus larger than RAM costs only the pages being read. A small JSON beside it
  records what was encoded, and an unchanged file is reused instead of re-encoded.
- `split_train_val`: the first (100 - p)% of the ids for training, the last p% for validation, like nanoGPT.
- `RandomWindowSampler`: batches of random `block_size + 1`-token windows from a seeded NumPy generator whose state
  is JSON-serialisable, so a checkpoint can restore the exact data position.
- `full_split_windows`: the whole validation split in non-overlapping `block_size` windows, for an exact loss.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from nanoformer.tokenization.corpus import ENCODING_ERRORS, CorpusStats, drop_invalid_lines

logger = logging.getLogger(__name__)

CHUNK_CHARS = 1 << 20  # ~1 MB of text per encoding batch


def read_text_chunks(
    train_file: str | os.PathLike | None = None,
    dataset_name: str | None = None,
    dataset_config_name: str | None = None,
    text_column: str = "text",
    chunk_chars: int = CHUNK_CHARS,
) -> Iterator[str]:
    """Yield the training text in pieces of about `chunk_chars` characters, each ending at a line break when possible.

    Exactly one of `train_file` (a UTF-8 text file) or `dataset_name` (a Hub dataset, all rows of its ``train`` split's
    `text_column` joined with newlines) must be given. Errors are raised as ValueError with a one-line message.
    """
    if bool(train_file) == bool(dataset_name):
        raise ValueError("give exactly one of --train_file or --dataset_name")
    if train_file:
        yield from _file_chunks(Path(train_file), chunk_chars)
    else:
        yield from _dataset_chunks(dataset_name, dataset_config_name, text_column, chunk_chars)


def _file_chunks(path: Path, chunk_chars: int) -> Iterator[str]:
    if not path.is_file():
        raise ValueError(f"--train_file not found: {path}")
    stats = CorpusStats()
    yield from (drop_invalid_lines(chunk, stats) for chunk in _raw_file_chunks(path, chunk_chars))
    if stats.num_skipped:
        logger.warning(f"--train_file {path}: skipped {stats.num_skipped} lines that are not valid UTF-8")


def _raw_file_chunks(path: Path, chunk_chars: int) -> Iterator[str]:
    carry = ""
    # newline="": keep \r\n as written; invalid UTF-8 becomes U+FFFD, and its lines are dropped by the caller.
    with open(path, encoding="utf-8", errors=ENCODING_ERRORS, newline="") as f:
        while True:
            piece = f.read(chunk_chars)
            if not piece:
                break
            piece = carry + piece
            cut = piece.rfind("\n") + 1
            if cut == 0:  # no line break in a whole chunk: cut anywhere
                cut = len(piece)
            carry = piece[cut:]
            yield piece[:cut]
    if carry:
        yield carry


def _dataset_chunks(name: str, config_name: str | None, text_column: str, chunk_chars: int) -> Iterator[str]:
    import datasets

    try:
        dataset = datasets.load_dataset(name, config_name, split="train")
    except Exception as err:  # offline, unknown id, missing config: all end the same way for the user
        offline = " (HF_HUB_OFFLINE is set)" if os.environ.get("HF_HUB_OFFLINE") not in (None, "", "0") else ""
        raise ValueError(
            f"could not load dataset {name!r}{offline}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            " — to train on a local text file use --train_file PATH"
        ) from err
    if text_column not in dataset.column_names:
        raise ValueError(
            f"dataset {name!r} has no column {text_column!r} (columns: {dataset.column_names}); set --text_column"
        )
    buffer, size, skipped = [], 0, 0
    for row in dataset:
        text = row[text_column]
        if not isinstance(text, str):  # None or a non-text value: counted and reported below
            skipped += 1
            continue
        buffer.append(text)
        size += len(text) + 1
        if size >= chunk_chars:
            yield "\n".join(buffer) + "\n"
            buffer, size = [], 0
    if buffer:
        yield "\n".join(buffer) + "\n"
    if skipped:
        logger.warning(
            f"dataset {name!r}: skipped {skipped} of {len(dataset)} rows whose {text_column!r} is not a string"
        )


def collect_characters(chunks: Iterator[str]) -> str:
    """All distinct characters of the text as one string (the char tokenizer is built from it); ValueError if empty."""
    chars: set[str] = set()
    for chunk in chunks:
        chars.update(chunk)
    if not chars:
        raise ValueError("the training text is empty")
    return "".join(sorted(chars))


def ids_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned dtype holding every id: uint16 up to 65,536 tokens (GPT-2's 50,257 fit), else uint32."""
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.uint32)


def tokenizer_fingerprint(tokenizer) -> str:
    """A short hash of the tokenizer's vocabulary, to tell whether cached ids are still valid."""
    vocab = sorted(tokenizer.get_vocab().items())
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode("utf-8")).hexdigest()[:16]


def encode_to_file(chunks: Iterator[str], tokenizer, path: str | os.PathLike, source: dict[str, Any]) -> np.memmap:
    """Encode the text to ``path`` (raw token ids) and return them as a read-only memmap.

    `source` describes the text (e.g. file name, size, mtime); when ``path`` already holds ids encoded from the same
    source with the same tokenizer (recorded in ``path + '.json'``), they are reused without re-encoding.
    Raises ValueError if the text encodes to no tokens.
    """
    path = Path(path)
    info_path = path.with_name(path.name + ".json")
    dtype = ids_dtype(len(tokenizer))
    wanted = {"source": source, "tokenizer": tokenizer_fingerprint(tokenizer), "dtype": dtype.name}
    if path.is_file() and info_path.is_file():
        info = json.loads(info_path.read_text(encoding="utf-8"))
        if {k: info.get(k) for k in wanted} == wanted and info.get(
            "num_tokens"
        ) == path.stat().st_size // dtype.itemsize:
            return np.memmap(path, dtype=dtype, mode="r")

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    backend = tokenizer.backend_tokenizer  # the Rust tokenizer: batch-encodes without length warnings
    num_tokens = 0
    with open(tmp, "wb") as f:
        batch: list[str] = []

        def flush() -> int:
            encodings = backend.encode_batch(batch, add_special_tokens=False)
            written = 0
            for enc in encodings:
                f.write(np.asarray(enc.ids, dtype=dtype).tobytes())
                written += len(enc.ids)
            batch.clear()
            return written

        for chunk in chunks:
            # Split each ~1 MB chunk into 64k-char pieces at line ends so encode_batch can use several threads.
            start = 0
            while start < len(chunk):
                end = chunk.rfind("\n", start, start + 65536) + 1 if start + 65536 < len(chunk) else len(chunk)
                if end <= start:
                    end = min(len(chunk), start + 65536)
                batch.append(chunk[start:end])
                start = end
            num_tokens += flush()
    if num_tokens == 0:
        tmp.unlink()
        raise ValueError("the training text is empty (it encodes to no tokens)")
    os.replace(tmp, path)
    info_path.write_text(json.dumps({**wanted, "num_tokens": num_tokens}, indent=2), encoding="utf-8")
    return np.memmap(path, dtype=dtype, mode="r")


def split_train_val(ids: np.ndarray, validation_percentage: float) -> tuple[np.ndarray, np.ndarray]:
    """The first (100 - p)% of `ids` for training and the last p% for validation (nanoGPT: ``n = int(0.9 * len)``)."""
    if not 0 < validation_percentage < 100:
        raise ValueError(f"--validation_split_percentage must be in (0, 100), got {validation_percentage}")
    n = int(len(ids) * (1 - validation_percentage / 100))
    return ids[:n], ids[n:]


class RandomWindowSampler:
    """Batches of random windows of ``block_size + 1`` consecutive ids: inputs are the first `block_size`, targets
    the last `block_size` (the same window shifted by one), as nanoGPT's ``get_batch``.

    The generator is NumPy's PCG64 seeded with `seed`; `state_dict()` is plain JSON, so saving it in a checkpoint and
    calling `load_state_dict` later makes the resumed run draw exactly the batches the uninterrupted run would have.
    """

    def __init__(self, ids: np.ndarray, block_size: int, batch_size: int, seed: int | list[int]):
        if len(ids) < block_size + 1:
            raise ValueError(
                f"the split has {len(ids)} tokens, fewer than block_size + 1 = {block_size + 1}; "
                "use a longer text or a smaller --block_size"
            )
        self.ids = ids
        self.block_size = block_size
        self.batch_size = batch_size
        self.rng = np.random.default_rng(seed)
        self.batches_drawn = 0

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One batch ``(inputs, targets)``, both LongTensors of shape (batch_size, block_size)."""
        starts = self.rng.integers(0, len(self.ids) - self.block_size, size=self.batch_size)
        windows = np.stack([np.asarray(self.ids[s : s + self.block_size + 1], dtype=np.int64) for s in starts])
        self.batches_drawn += 1
        windows = torch.from_numpy(windows)
        return windows[:, :-1], windows[:, 1:]

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable position: the generator's state and the number of batches drawn so far."""
        return {"bit_generator": self.rng.bit_generator.state, "batches_drawn": self.batches_drawn}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where the sampler that produced `state` stopped."""
        self.rng.bit_generator.state = state["bit_generator"]
        self.batches_drawn = int(state["batches_drawn"])


def full_split_windows(
    ids: np.ndarray, block_size: int, batch_size: int, shard: int = 0, num_shards: int = 1
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The whole split as non-overlapping windows: inputs ``ids[i·B : (i+1)·B]``, targets shifted by one.

    Every token after the first is predicted exactly once (a trailing piece shorter than `block_size` is scored
    too), each window starting from an empty context. Window k goes to shard ``k % num_shards`` (one per process).
    """
    num_windows = (len(ids) - 1 + block_size - 1) // block_size
    mine = list(range(shard, num_windows, num_shards))
    for first in range(0, len(mine), batch_size):
        group = mine[first : first + batch_size]
        starts = [k * block_size for k in group]
        lengths = [min(block_size, len(ids) - 1 - s) for s in starts]
        if len(set(lengths)) > 1:  # keep the short tail in its own batch: no padding needed
            for s, n in zip(starts, lengths, strict=True):
                window = torch.from_numpy(np.asarray(ids[s : s + n + 1], dtype=np.int64))[None]
                yield window[:, :-1], window[:, 1:]
            continue
        windows = torch.from_numpy(np.stack([np.asarray(ids[s : s + lengths[0] + 1], dtype=np.int64) for s in starts]))
        yield windows[:, :-1], windows[:, 1:]

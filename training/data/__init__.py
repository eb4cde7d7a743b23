"""Translation data for `train_mt.py`, one job per module: `source` (open and parse), `batching` (pure padding and
bucketing), `stream` (the resumable, shuffled batch stream and its counters), `prefetch` (read-ahead thread)."""

from nanoformer.tokenization.corpus import shard_order  # the file order of each epoch, next to SplitFiles
from nanoformer.training.data.batching import bucket_into_batches, pad_batch
from nanoformer.training.data.prefetch import PrefetchIterator
from nanoformer.training.data.source import DataSourceError, open_translation_source, open_translation_split, read_pairs
from nanoformer.training.data.stream import (
    TranslationBatchStream,
    describe_counters,
    malformed_count,
    reduce_counters,
    skipped_rows,
)

__all__ = [
    "DataSourceError",
    "PrefetchIterator",
    "TranslationBatchStream",
    "bucket_into_batches",
    "describe_counters",
    "malformed_count",
    "open_translation_source",
    "open_translation_split",
    "pad_batch",
    "read_pairs",
    "reduce_counters",
    "shard_order",
    "skipped_rows",
]

"""Pure batching of tokenized pairs: right padding, and length bucketing under a padded-token budget."""

from __future__ import annotations

import torch


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



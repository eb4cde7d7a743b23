"""Unit tests of the translation data pipeline and the shipped sacreBLEU metric (no training run)."""

import json
from itertools import islice

import pytest
import torch
from nanoformer.training.data import (
    DataSourceError,
    TranslationBatchStream,
    bucket_into_batches,
    open_translation_source,
    shard_order,
)


def stream_for(path, tokenizer, dataset=None, **kwargs):
    opened, parser = open_translation_source(
        data_file=str(path), dataset_name=None, dataset_config_name=None, split="train", source_lang="en",
        target_lang="zh",
    )  # fmt: skip
    options = {"max_tokens": 512, "max_source_length": 32, "max_target_length": 32, "shuffle_buffer_size": 300}
    return TranslationBatchStream(dataset or opened, parser, tokenizer, **{**options, **kwargs})


def test_batches_respect_the_padded_token_budget():
    pairs = [([1] * n, [2] * (n // 2 + 1)) for n in range(1, 60)] * 3
    batches = bucket_into_batches(pairs, max_tokens=200)
    assert sum(len(b) for b in batches) == len(pairs)
    for batch in batches:
        padded = len(batch) * (max(len(s) for s, _ in batch) + max(len(t) for _, t in batch))
        assert padded <= 200


def test_stream_resumes_exactly_mid_epoch(shared_data, bpe_tokenizer):
    path = shared_data / "tatoeba-cmn-eng" / "valid.jsonl"  # 1,000 pairs: several epochs in 60 batches
    reference = [batch["input_ids"] for batch, _ in islice(stream_for(path, bpe_tokenizer), 60)]
    saved = None
    for i, (_, state) in enumerate(stream_for(path, bpe_tokenizer)):
        if i == 23:
            saved = json.loads(json.dumps(state))  # what a checkpoint stores
            break
    resumed = stream_for(path, bpe_tokenizer)
    resumed.load_state_dict(saved)
    continued = [batch["input_ids"] for batch, _ in islice(resumed, 36)]
    assert all(torch.equal(a, b) for a, b in zip(reference[24:], continued, strict=True))
    assert max(state["epoch"] for _, state in islice(stream_for(path, bpe_tokenizer), 60)) >= 1


def test_shard_order_is_a_seeded_permutation_per_epoch():
    orders = [shard_order(13, seed=42, epoch=epoch) for epoch in range(5)]
    assert all(sorted(order) == list(range(13)) for order in orders)
    assert len({tuple(order) for order in orders}) == 5 and list(range(13)) not in orders
    assert orders == [shard_order(13, seed=42, epoch=epoch) for epoch in range(5)]  # reproducible
    assert shard_order(13, seed=43, epoch=0) != orders[0]


def test_stream_opens_each_epoch_and_a_resume_its_saved_epoch(shared_data, bpe_tokenizer):
    """With `dataset` a function of the epoch (the trainer's per-epoch shard order), the stream asks for each epoch's
    dataset in turn, and a resumed stream first for the epoch it was saved in."""
    path = shared_data / "tatoeba-cmn-eng" / "valid.jsonl"
    dataset, _ = open_translation_source(
        data_file=str(path), dataset_name=None, dataset_config_name=None, split="train", source_lang="en",
        target_lang="zh",
    )  # fmt: skip

    def stream(opened: list[int]) -> TranslationBatchStream:
        def for_epoch(epoch: int):
            opened.append(epoch)
            return dataset

        return stream_for(path, bpe_tokenizer, dataset=for_epoch)

    opened: list[int] = []
    states = [json.loads(json.dumps(state)) for _, state in islice(stream(opened), 60)]
    assert opened == list(range(states[-1]["epoch"] + 1)) and len(opened) >= 2
    saved = next(state for state in states if state["epoch"] == 1 and state["dataset"] is not None)
    reopened: list[int] = []
    resumed = stream(reopened)
    resumed.load_state_dict(saved)
    list(islice(resumed, 20))
    assert reopened[0] == 1


def test_a_state_saved_in_another_file_order_is_refused(shared_data, bpe_tokenizer):
    path = shared_data / "tatoeba-cmn-eng" / "valid.jsonl"
    _, state = next(iter(stream_for(path, bpe_tokenizer, epoch_order=lambda epoch: [1, 0])))
    assert state["file_order"] == [1, 0]
    stream_for(path, bpe_tokenizer, epoch_order=lambda epoch: [1, 0]).load_state_dict(state)
    with pytest.raises(DataSourceError, match=r"read epoch 0's training files in the order \[1, 0\], this run reads "
                       r"them in file order: resume with the checkpoint's --seed"):  # fmt: skip
        stream_for(path, bpe_tokenizer).load_state_dict(state)
    del state["file_order"]  # a checkpoint from before the shard order: file order
    stream_for(path, bpe_tokenizer).load_state_dict(state)
    with pytest.raises(DataSourceError, match=r"files in file order, this run reads them in the order \[1, 0\]"):
        stream_for(path, bpe_tokenizer, epoch_order=lambda epoch: [1, 0]).load_state_dict(state)


def test_overlong_pairs_truncated_or_dropped(tmp_path, bpe_tokenizer):
    long = " ".join(["word"] * 100)
    rows = [{"translation": {"en": "Hi.", "zh": "嗨。"}}, {"translation": {"en": long, "zh": "长"}}]
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")

    batch, state = next(iter(stream_for(path, bpe_tokenizer, overlong="truncate")))
    assert state["counters"]["truncated_overlong"] == 1 and batch["input_ids"].shape[1] <= 32
    assert (batch["input_ids"] == bpe_tokenizer.eos_token_id).sum() == 2  # truncated sources still end with </s>
    batch, state = next(iter(stream_for(path, bpe_tokenizer, overlong="drop")))
    assert state["counters"]["dropped_overlong"] == 1 and batch["input_ids"].shape[0] == 1


def test_a_very_long_row_is_counted_without_the_tokenizers_length_warning(
    tmp_path, bpe_tokenizer_dir, transformers_warnings
):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(bpe_tokenizer_dir)  # fresh: its once-only warning not yet spent
    long = " ".join(f"word{i % 97}" for i in range(1500))  # ~3000 tokens, past model_max_length (1024)
    rows = [{"translation": {"en": "Hi.", "zh": "嗨。"}}, {"translation": {"en": long, "zh": "长" * 2000}}]
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    batch, state = next(iter(stream_for(path, tokenizer, overlong="truncate")))
    assert state["counters"]["truncated_overlong"] == 1 and batch["input_ids"].shape[1] == 32
    for key in ("input_ids", "labels"):  # truncated rows still end with </s>
        assert (batch[key] == tokenizer.eos_token_id).sum() == 2, key
    assert not [m for m in transformers_warnings if "longer than the specified maximum" in m], transformers_warnings


def test_tsv_with_header_and_missing_file(tmp_path, bpe_tokenizer):
    path = tmp_path / "pairs.tsv"
    path.write_text("zh\ten\n你好。\tHello.\nonly one column\n谢谢。\tThanks.\n", encoding="utf-8")
    batch, state = next(iter(stream_for(path, bpe_tokenizer)))
    assert batch["input_ids"].shape[0] == 2
    assert {k: v for k, v in state["counters"].items() if v} == {
        "rows": 4,
        "malformed: rows with too few columns": 1,
        "pairs": 2,
    }
    decoded = set(bpe_tokenizer.batch_decode(batch["input_ids"], skip_special_tokens=True))
    assert decoded == {"Hello.", "Thanks."}  # the header named the columns: English is the source
    with pytest.raises(DataSourceError, match="file not found"):
        stream_for(tmp_path / "missing.jsonl", bpe_tokenizer)


def test_shipped_metric_equals_sacrebleu(shared_data):
    import evaluate
    import sacrebleu
    from nanoformer.training.mt_evaluation import SACREBLEU_METRIC_PATH

    rows = [json.loads(line) for line in (shared_data / "tatoeba-cmn-eng" / "valid.jsonl").open(encoding="utf-8")]
    refs = [r["translation"]["zh"] for r in rows[:200]]
    hyps = [r[: max(1, len(r) * 2 // 3)] + ("的" if i % 3 else "") for i, r in enumerate(refs)]  # imperfect copies
    ours = evaluate.load(SACREBLEU_METRIC_PATH).compute(predictions=hyps, references=[[r] for r in refs], chrf=True)
    bleu = sacrebleu.metrics.BLEU(tokenize="zh")
    direct = bleu.corpus_score(hyps, [refs])
    assert 5 < direct.score < 95
    assert ours["score"] == pytest.approx(direct.score, abs=1e-9)
    assert ours["signature"] == str(bleu.get_signature())
    assert ours["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score, abs=1e-9)


def test_zh_script_applies_to_training_targets(tmp_path, bpe_tokenizer):
    from nanoformer.training.mt_evaluation import zh_script_converter

    assert zh_script_converter("as-is") is None
    assert zh_script_converter("simplified")("我們學習漢語。") == "我们学习汉语。"
    assert zh_script_converter("traditional")("我们学习汉语。") == "我們學習漢語。"
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"translation": {"en": "We study Chinese.", "zh": "我們學習漢語。"}}) + "\n")
    batch, _ = next(iter(stream_for(path, bpe_tokenizer, target_transform=zh_script_converter("simplified"))))
    labels = batch["labels"][0][batch["labels"][0] != -100]
    assert bpe_tokenizer.decode(labels, skip_special_tokens=True) == "我们学习汉语。"

"""How the shared BPE cuts Chinese: tokens per sentence and single-token coverage, ours vs GPT-2's pre-tokenizer.

Two byte-level BPEs are trained side by side on the same text at each vocabulary size; they differ only in the
pre-tokenizer:

- ``cjk-isolated`` (nanoformer's, `nanoformer.tokenization.train_bpe_tokenizer`): every CJK character is its own
  pre-token, so Chinese is one token per character (bytes for characters too rare to get a token);
- ``gpt2-regex`` (the previous default, built here as the peer): digits split, then GPT-2's regex, under which a
  run of Chinese between punctuation is one "word" and BPE learns multi-character Chinese words.

Vocabulary 8k is trained on Tatoeba train (both sides). Tatoeba alone has too few distinct words for 37k, so the
37k tokenizers are trained on Tatoeba train + WMT newstest2018 (both sides): newstest2019 and Tatoeba valid, the
evaluation sets, are never trained on.

    python bench/tokenizer_stats.py            # prints a Markdown table

Columns, per evaluation set: tokens per sentence (source English, target Chinese, specials excluded); the share of
Han characters (counted with repetition) that have a token of their own in the vocabulary; and the share that the
tokenizer actually cuts out as one token in context (under ``gpt2-regex`` most characters sit inside multi-character
tokens instead).
"""

from __future__ import annotations

import json
import sys
import time
import unicodedata
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data"

from nanoformer.tokenization import bpe  # noqa: E402
from nanoformer.tokenization.corpus import read_translation_pairs  # noqa: E402
from tokenizers import pre_tokenizers  # noqa: E402

EVAL_SETS = {
    "Tatoeba valid": DATA / "tatoeba-cmn-eng" / "valid.jsonl",
    "newstest2019": DATA / "wmt-newstest-zh-en" / "newstest2019.en-zh.jsonl",
}
TRAIN_SETS = {
    8000: [DATA / "tatoeba-cmn-eng" / "train.jsonl"],
    37000: [DATA / "tatoeba-cmn-eng" / "train.jsonl", DATA / "wmt-newstest-zh-en" / "newstest2018.en-zh.jsonl"],
}


def gpt2_regex_pre_tokenizer(split_digits: bool) -> pre_tokenizers.PreTokenizer:
    """The peer: the pre-tokenizer nanoformer used before CJK isolation (digits, then GPT-2's regex)."""
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])


def is_han(char: str) -> bool:
    """A Han ideograph (unified, any extension, or compatibility)."""
    return unicodedata.name(char, "").startswith(("CJK UNIFIED IDEOGRAPH", "CJK COMPATIBILITY IDEOGRAPH"))


def texts(paths):
    for path in paths:
        for source, target in read_translation_pairs(path, "en", "zh"):
            yield source
            yield target


def train(kind: str, vocab_size: int):
    ours = bpe._bpe_pre_tokenizer
    if kind == "gpt2-regex":
        bpe._bpe_pre_tokenizer = gpt2_regex_pre_tokenizer  # the only difference between the two
    try:
        size = vocab_size
        while True:  # the largest size the text supports, at most vocab_size
            try:
                return bpe.train_bpe_tokenizer(texts(TRAIN_SETS[vocab_size]), vocab_size=size)
            except ValueError as error:
                if "only supports" not in str(error):
                    raise
                size = int(str(error).split("supports ")[1].split()[0])
    finally:
        bpe._bpe_pre_tokenizer = ours


def stats(tokenizer, path: Path) -> dict:
    pairs = list(read_translation_pairs(path, "en", "zh"))
    en = tokenizer([s for s, _ in pairs], add_special_tokens=False)["input_ids"]
    zh = tokenizer([t for _, t in pairs], add_special_tokens=False)["input_ids"]
    han = [c for _, t in pairs for c in t if is_han(c)]
    single = {c: len(tokenizer(c, add_special_tokens=False)["input_ids"]) == 1 for c in set(han)}
    # In context: the Han characters that come out as a token of their own (not inside a multi-character token).
    alone = 0
    for _, target in pairs:
        offsets = tokenizer(target, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        spans = Counter(map(tuple, offsets))  # a rare character cut into bytes gives several tokens with its span
        alone += sum(1 for (start, end), n in spans.items() if n == 1 and end - start == 1 and is_han(target[start]))
    return {
        "han_alone_in_context": alone / len(han),
        "en_tokens_per_sentence": sum(map(len, en)) / len(pairs),
        "zh_tokens_per_sentence": sum(map(len, zh)) / len(pairs),
        "zh_tokens_per_char": sum(map(len, zh)) / sum(len(t) for _, t in pairs),
        "han_single_token_coverage": sum(single[c] for c in han) / len(han),
    }


def main() -> None:
    rows = []
    for vocab_size in TRAIN_SETS:
        for kind in ("cjk-isolated", "gpt2-regex"):
            start = time.perf_counter()
            tokenizer = train(kind, vocab_size)
            seconds = time.perf_counter() - start
            multi_char = sum(
                1 for token in tokenizer.get_vocab() if sum(map(is_han, tokenizer.convert_tokens_to_string([token]))) > 1
            )
            row = {"kind": kind, "vocab": len(tokenizer), "train_seconds": seconds, "multi_han_tokens": multi_char}
            row.update({name: stats(tokenizer, path) for name, path in EVAL_SETS.items()})
            rows.append(row)
            print(json.dumps(row), flush=True)
    header = "| pre-tokenizer | vocab | tokens with ≥2 Han chars |"
    for name in EVAL_SETS:
        header += f" {name}: en tok/sent | zh tok/sent | zh tok/char | Han chars with a token | Han chars cut alone |"
    lines = [header, "|---" * (3 + 5 * len(EVAL_SETS)) + "|"]
    for row in rows:
        line = f"| {row['kind']} | {row['vocab']} | {row['multi_han_tokens']} |"
        for name in EVAL_SETS:
            s = row[name]
            line += (
                f" {s['en_tokens_per_sentence']:.2f} | {s['zh_tokens_per_sentence']:.2f} | {s['zh_tokens_per_char']:.3f}"
                f" | {s['han_single_token_coverage']:.1%} | {s['han_alone_in_context']:.1%} |"
            )
        lines.append(line)
    print("\n".join(lines))


if __name__ == "__main__":
    main()

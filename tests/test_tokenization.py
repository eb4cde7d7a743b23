"""The shared EN–ZH byte-level BPE and the char tokenizer (issue: tokenization).

The 8k BPE comes from the session fixture `bpe_tokenizer` (trained from a generator over Tatoeba train, both sides,
saved and loaded back with AutoTokenizer), so these tests check the tokenizer as every other test and user sees it.
"""

import json
import subprocess
import sys
import unicodedata

import pytest
from nanoformer.tokenization import SPECIAL_TOKENS, build_char_tokenizer, train_bpe_tokenizer
from nanoformer.tokenization.bpe import CJK_RANGES
from nanoformer.tokenization.corpus import read_translation_pairs
from transformers import AutoTokenizer
from transformers.convert_slow_tokenizer import bytes_to_unicode

ODD_INPUTS = {
    "empty": "",
    "chinese": "我们今天去北京吧，好吗？他說：「這是繁體字。」",
    "full_width": "ＡＢＣ１２３！？（全角）　　、。・",
    "emoji": "I ❤️ 🐍 and 👩🏽‍💻 🇨🇳 😀😀😀",
    "tabs_newlines": "a\tb\t\tc\nd\n\n\ne\r\nf\rg",
    "space_runs": "   leading, inner     spaces, trailing   ",
    "spaces_before_punctuation": "Hello , world ! Isn ' t it ? ( yes )",
    "control_chars": "\x00\x01\x07\x1b[31m\x7f\u200b\u200d\ufeff\u2028end",
    "literal_specials": "<s> </s> <pad> <unk> are plain text here",
    "mixed_scripts": "Café naïve résumé Ελληνικά русский 한국어 日本語のテキスト عربى",
    "combining": "e\u0301 (decomposed) vs \u00e9 (composed); ﬁ ligature; Ⅻ",
    "digits": "In 2019, 3.14159 ≈ π and 1,000,000 ≠ ١٢٣",
    "long_line": ("这是一个很长的句子，" + "The quick brown fox jumps over the lazy dog. ") * 120,
    "long_chinese_word": "我们今天去北京看长城" * 500,  # 5,000 characters with no space or punctuation
    # Han outside the BMP (extensions B, C, G, H; never in the training text, so cut into bytes), compatibility
    # ideographs, kana, Hangul, radicals, vertical and enclosed forms.
    "rare_han": "𠀀𠮷𪜀𫝀𬺰𰀀𱍐 豈﨩 かなカナ 한글ᄀ ⺀⼀ ︐﹏ ㈠㍿ 㐀䶵",
}


def _split_pairs(path):
    pairs = list(read_translation_pairs(path, "en", "zh"))
    return [en for en, _ in pairs], [zh for _, zh in pairs]


@pytest.fixture(scope="module")
def tatoeba_valid(shared_data):
    return _split_pairs(shared_data / "tatoeba-cmn-eng" / "valid.jsonl")


# --- BPE: ids, template, padding ------------------------------------------------------------------------------------


def test_bpe_special_tokens_and_size(bpe_tokenizer):
    assert len(bpe_tokenizer) == 8000
    assert [bpe_tokenizer.convert_ids_to_tokens(i) for i in range(4)] == list(SPECIAL_TOKENS)
    assert (bpe_tokenizer.pad_token_id, bpe_tokenizer.unk_token_id) == (0, 1)
    assert (bpe_tokenizer.bos_token_id, bpe_tokenizer.eos_token_id) == (2, 3)
    assert bpe_tokenizer.padding_side == "right"
    assert bpe_tokenizer.model_max_length == 1024


def test_bpe_source_and_labels_end_with_eos(bpe_tokenizer):
    batch = bpe_tokenizer(["Hi.", "How are you today?"], text_target=["嗨。", "你今天好吗？"], padding=True)
    for ids, mask in zip(batch["input_ids"], batch["attention_mask"]):
        real = [i for i, m in zip(ids, mask) if m]
        assert real[-1] == bpe_tokenizer.eos_token_id
        assert bpe_tokenizer.bos_token_id not in real  # <s> only comes from decoder_start_token_id
        assert ids[len(real) :] == [bpe_tokenizer.pad_token_id] * (len(ids) - len(real))  # right padding
    assert batch["attention_mask"][0][0] == 1 and batch["attention_mask"][0][-1] == 0
    label_lengths = set()
    for labels in batch["labels"]:
        real = labels[: len(labels) - next(i for i, t in enumerate(reversed(labels)) if t != bpe_tokenizer.pad_token_id)]
        assert real[-1] == bpe_tokenizer.eos_token_id  # then right padding (DataCollatorForSeq2Seq uses -100)
        assert labels.count(bpe_tokenizer.eos_token_id) == 1
        label_lengths.add(len(real))
    assert len(label_lengths) == 2  # the two targets differ in length, so the padding above was exercised
    # Truncation keeps the </s>: the template's specials are counted in max_length.
    cut = bpe_tokenizer("a b c d e f g h", text_target="我们今天去北京看长城", max_length=4, truncation=True)
    assert len(cut["input_ids"]) == len(cut["labels"]) == 4
    assert cut["input_ids"][-1] == cut["labels"][-1] == bpe_tokenizer.eos_token_id


def test_bpe_empty_string_is_just_eos(bpe_tokenizer):
    assert bpe_tokenizer("")["input_ids"] == [bpe_tokenizer.eos_token_id]
    assert bpe_tokenizer.decode([bpe_tokenizer.eos_token_id], skip_special_tokens=True) == ""


# --- BPE: lossless --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ODD_INPUTS))
def test_bpe_odd_inputs_round_trip(bpe_tokenizer, name):
    text = ODD_INPUTS[name]
    ids = bpe_tokenizer(text)["input_ids"]
    assert bpe_tokenizer.unk_token_id not in ids
    assert ids[-1] == bpe_tokenizer.eos_token_id and ids.count(bpe_tokenizer.eos_token_id) == 1
    assert bpe_tokenizer.decode(ids, skip_special_tokens=True) == text
    assert bpe_tokenizer.decode(ids[:-1]) == text  # also without skipping: no clean-up of spaces


@pytest.mark.parametrize("name", ["long_line", "long_chinese_word"])
def test_bpe_long_lines_round_trip(bpe_tokenizer, name):
    text = ODD_INPUTS[name]
    assert len(text) >= 5000
    ids = bpe_tokenizer(text, truncation=False)["input_ids"]
    assert len(ids) > bpe_tokenizer.model_max_length  # not silently truncated
    assert bpe_tokenizer.decode(ids, skip_special_tokens=True) == text


@pytest.mark.parametrize(
    "relative_path",
    [
        "tatoeba-cmn-eng/train.jsonl",
        "tatoeba-cmn-eng/valid.jsonl",
        "wmt-newstest-zh-en/newstest2018.en-zh.jsonl",
        "wmt-newstest-zh-en/newstest2019.en-zh.jsonl",
    ],
)
def test_bpe_real_sentences_round_trip_without_unk(bpe_tokenizer, shared_data, relative_path):
    english, chinese = _split_pairs(shared_data / relative_path)
    assert len(english) >= 1000
    for sentences in (english, chinese):
        encoded = bpe_tokenizer(sentences)["input_ids"]
        assert not any(bpe_tokenizer.unk_token_id in ids for ids in encoded)
        decoded = bpe_tokenizer.batch_decode(encoded, skip_special_tokens=True)
        mismatches = [(s, d) for s, d in zip(sentences, decoded) if s != d]
        assert not mismatches, f"{len(mismatches)} sentences changed, e.g. {mismatches[:3]}"


# --- BPE: compact, and how Chinese is split --------------------------------------------------------------------------


def _tokens_without_specials(tokenizer, sentences):
    return sum(len(ids) for ids in tokenizer(sentences, add_special_tokens=False)["input_ids"])


def test_bpe_compactness_on_tatoeba_valid(bpe_tokenizer, tatoeba_valid):
    english, chinese = tatoeba_valid
    per_word = _tokens_without_specials(bpe_tokenizer, english) / sum(len(s.split()) for s in english)
    per_char = _tokens_without_specials(bpe_tokenizer, chinese) / sum(len(s) for s in chinese)
    # SentencePiece BPE 8k on the same data: 1.449 tokens/word. Chinese is one token per character, bytes only for
    # characters too rare to have a token: measured 1.34 tokens/word and 1.009 tokens/character.
    assert per_word <= 1.45, per_word
    assert 1.0 <= per_char <= 1.03, per_char


def _is_cjk(char: str) -> bool:
    return any(lo <= ord(char) <= hi for lo, hi in CJK_RANGES)


def test_bpe_chinese_is_cut_into_characters(bpe_tokenizer):
    pieces = [p for p, _ in bpe_tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str("我们今天去北京，好吗？")]
    assert len(pieces) == 11  # every character and full-width mark is its own pre-token
    ids = bpe_tokenizer("我们今天去北京，好吗？", add_special_tokens=False)["input_ids"]
    assert bpe_tokenizer.convert_ids_to_tokens(ids) == [
        bpe_tokenizer.convert_ids_to_tokens(bpe_tokenizer(c, add_special_tokens=False)["input_ids"])[0]
        for c in "我们今天去北京，好吗？"
    ]
    # English is untouched: words and their leading space are still merged ("Ġworld").
    assert len(bpe_tokenizer(" world", add_special_tokens=False)["input_ids"]) == 1


def test_bpe_no_token_spans_two_cjk_characters(bpe_tokenizer):
    byte_of = {char: byte for byte, char in bytes_to_unicode().items()}
    offenders = []
    for token, token_id in bpe_tokenizer.get_vocab().items():
        if token_id < len(SPECIAL_TOKENS):
            continue
        text = bytes(byte_of[c] for c in token).decode("utf-8", errors="replace")
        cjk = [c for c in text if _is_cjk(c)]
        # A token holding a CJK character is exactly that character (or a byte fragment of one: no CJK char).
        if cjk and text != cjk[0]:
            offenders.append(text)
    assert not offenders, offenders[:10]


def test_bpe_covers_tatoeba_valid_han_characters(bpe_tokenizer, tatoeba_valid):
    _, chinese = tatoeba_valid
    han = [c for s in chinese for c in s if unicodedata.name(c, "").startswith("CJK UNIFIED IDEOGRAPH")]
    assert len(han) > 8000
    single = {c: len(bpe_tokenizer(c, add_special_tokens=False)["input_ids"]) == 1 for c in set(han)}
    coverage = sum(single[c] for c in han) / len(han)
    assert coverage >= 0.95, coverage  # measured 98.7% at 8k (the GPT-2 regex cut only 34% of them alone)


def test_bpe_digits_are_split_one_per_token(bpe_tokenizer):
    ids = bpe_tokenizer("2019", add_special_tokens=False)["input_ids"]
    assert bpe_tokenizer.convert_ids_to_tokens(ids) == ["2", "0", "1", "9"]


# --- BPE: training ----------------------------------------------------------------------------------------------------


def test_bpe_trains_from_streaming_dataset_column_to_exact_size(shared_data):
    datasets = pytest.importorskip("datasets")
    stream = datasets.load_dataset(
        "json", data_files=str(shared_data / "tatoeba-cmn-eng" / "train.jsonl"), split="train", streaming=True
    )
    column = stream.map(lambda row: {"text": row["translation"]["zh"]})["text"]  # an IterableColumn, never a list
    tokenizer = train_bpe_tokenizer(column, vocab_size=1000)
    assert len(tokenizer) == 1000
    text = "你好，世界！"
    assert tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True) == text


def test_bpe_rejects_impossible_sizes():
    with pytest.raises(ValueError, match="at least 260"):
        train_bpe_tokenizer(["hello"], vocab_size=100)
    with pytest.raises(ValueError, match="only supports"):
        train_bpe_tokenizer(["hello world", "你好"], vocab_size=1000)


# --- save / load without nanoformer -----------------------------------------------------------------------------------

FRESH_PROCESS = """
import json, sys
sys.modules["nanoformer"] = None  # prove no custom code is needed
from transformers import AutoTokenizer
texts = json.loads(sys.argv[3])
bpe, char = AutoTokenizer.from_pretrained(sys.argv[1]), AutoTokenizer.from_pretrained(sys.argv[2])
print(json.dumps([bpe(texts)["input_ids"], bpe(texts, text_target=texts)["labels"], char(texts)["input_ids"],
                  bpe.batch_decode(bpe(texts)["input_ids"], skip_special_tokens=True), char.padding_side]))
"""


def test_saved_tokenizers_load_in_fresh_process_without_nanoformer(bpe_tokenizer_dir, char_tokenizer, tmp_path):
    texts = ["Hello , world!", "我们今天去北京。", "  two\nlines\t", ""]
    char_dir = tmp_path / "char"
    char_tokenizer.save_pretrained(char_dir)
    assert {"tokenizer.json", "tokenizer_config.json"} <= {p.name for p in char_dir.iterdir()}
    out = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, str(bpe_tokenizer_dir), str(char_dir), json.dumps(texts)],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env={"HF_HUB_OFFLINE": "1", "PATH": ""},
    )
    bpe_ids, labels, char_ids, decoded, padding_side = json.loads(out.stdout.strip().splitlines()[-1])
    bpe = AutoTokenizer.from_pretrained(bpe_tokenizer_dir)
    assert bpe_ids == bpe(texts)["input_ids"] and labels == bpe_ids
    assert char_ids == char_tokenizer(texts)["input_ids"]
    assert decoded == texts and padding_side == "left"


# --- char tokenizer ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shakespeare(shared_data):
    return (shared_data / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")


def test_char_tokenizer_one_id_per_character(char_tokenizer, shakespeare):
    chars = sorted(set(shakespeare))
    assert len(chars) == 65
    # nanoGPT's ids: the i-th character in sorted order gets id i; specials come after.
    assert [char_tokenizer.convert_tokens_to_ids(c) for c in chars] == list(range(65))
    assert char_tokenizer("".join(chars))["input_ids"] == list(range(65))
    assert len(char_tokenizer) == 67
    assert char_tokenizer.unk_token_id == 65
    assert char_tokenizer.eos_token_id == char_tokenizer.pad_token_id == 66


def test_char_tokenizer_round_trips_whole_file(char_tokenizer, shakespeare):
    ids = char_tokenizer(shakespeare)["input_ids"]
    assert len(ids) == len(shakespeare)  # no BOS/EOS added, one token per character
    assert max(ids) < 65
    assert char_tokenizer.decode(ids) == shakespeare


def test_char_tokenizer_left_padding_and_unknown_characters(char_tokenizer):
    batch = char_tokenizer(["ab", "  a\n"], padding=True)
    assert batch["input_ids"][0][:2] == [char_tokenizer.pad_token_id] * 2
    assert batch["attention_mask"] == [[0, 0, 1, 1], [1, 1, 1, 1]]
    # Characters absent from the text map to <unk>; a typed "<unk>" stays five characters (none of which is <unk>).
    assert char_tokenizer("é")["input_ids"] == [char_tokenizer.unk_token_id]
    ids = char_tokenizer("<unk>")["input_ids"]
    assert len(ids) == 5 and ids[1:4] == char_tokenizer("unk")["input_ids"]


def test_char_tokenizer_rejects_empty_text():
    with pytest.raises(ValueError, match="empty"):
        build_char_tokenizer("")

"""A shared English–Chinese byte-level BPE, trained with the Hugging Face `tokenizers` library.

Why byte-level: every string is first mapped to its UTF-8 bytes (each byte shown as one printable character, as in
GPT-2), and the 256 bytes are all in the base vocabulary. So no input can produce `<unk>`, nothing is normalised, and
`decode(encode(s)) == s` for any string. Frequent byte sequences are merged, so a common Chinese character (3 bytes in
UTF-8) and common multi-character words become single tokens.

How text is pre-tokenized (split into "words" that merges never cross), in order:
1. digits are isolated, one per piece (like the SentencePiece `split_digits=True` recipe of the seed), so numbers do
   not eat vocabulary and "2019" is always 4 tokens;
2. GPT-2's regex: ` ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+` (plus English contractions). Chinese
   characters are letters (`\\p{L}`), so a run of Chinese between punctuation marks is one word and merges across
   characters are learned ("我们今天去北京" is one piece; "，" and "？" are separate pieces).
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

# Fixed ids shared with the translator config: pad_token_id=0, bos_token_id=2 (= decoder_start_token_id), eos_token_id=3.
SPECIAL_TOKENS = ("<pad>", "<unk>", "<s>", "</s>")
BYTE_ALPHABET_SIZE = 256


def _bpe_pre_tokenizer(split_digits: bool) -> pre_tokenizers.PreTokenizer:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if not split_digits:
        return byte_level
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])


def train_bpe_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 37000,
    *,
    split_digits: bool = True,
    model_max_length: int = 1024,
    length: int | None = None,
    show_progress: bool = False,
) -> PreTrainedTokenizerFast:
    """Train a lossless byte-level BPE tokenizer from an iterable of strings.

    Args:
        texts: any iterable of strings (a generator, a streaming `datasets` column...); it is consumed once and
            never held in memory as a whole. For translation, yield both the source and the target side.
        vocab_size: exact size of the result, specials included (`len(tokenizer) == vocab_size`).
        split_digits: put every digit in its own token.
        model_max_length: the length `truncation=True` cuts to. 1024 covers long news sentences (the longest WMT19
            sentence is ~300 tokens) with room to spare; the translator's sinusoidal positions have no hard limit, so
            set it to the model's `max_position_embeddings` if that is smaller.
        length: number of texts, if known (only used by the trainer's own progress display).
        show_progress: show the `tokenizers` trainer progress bars.

    Returns:
        A `PreTrainedTokenizerFast` with `<pad>`, `<unk>`, `<s>`, `</s>` = ids 0, 1, 2, 3; encoding appends `</s>`
        (also to `text_target` labels); right padding; `<s>` is never added (the decoder starts from it through
        `decoder_start_token_id`).

    Raises:
        ValueError: if `vocab_size` is smaller than the 260 base tokens, or the corpus is too small to learn
            `vocab_size - 260` merges (the message says how many tokens it supports).
    """
    base = len(SPECIAL_TOKENS) + BYTE_ALPHABET_SIZE
    if vocab_size < base:
        raise ValueError(f"vocab_size must be at least {base} (4 special tokens + 256 bytes), got {vocab_size}")

    tokenizer = Tokenizer(models.BPE())  # no unk_token: every byte is in the vocabulary
    tokenizer.pre_tokenizer = _bpe_pre_tokenizer(split_digits)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),  # ids 0..3, in this order
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes, even those absent from the corpus
        show_progress=show_progress,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer, length=length)

    learned = tokenizer.get_vocab_size()
    if learned != vocab_size:
        raise ValueError(
            f"the training text only supports {learned} tokens (every word is already a single token), fewer than "
            f"vocab_size={vocab_size}: lower vocab_size to at most {learned} or train on more text"
        )
    return _wrap(tokenizer, model_max_length)


def _wrap(tokenizer: Tokenizer, model_max_length: int) -> PreTrainedTokenizerFast:
    pad, unk, bos, eos = SPECIAL_TOKENS
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=pad,
        unk_token=unk,
        bos_token=bos,
        eos_token=eos,
        # transformers builds the TemplateProcessing post-processor "$A </s>" from this flag, on creation and on load.
        add_bos_token=False,
        add_eos_token=True,
        padding_side="right",  # sinusoidal positions start at the first real token
        model_max_length=model_max_length,
        # The default clean-up removes spaces before punctuation ("a ." -> "a."): it would break the round trip.
        clean_up_tokenization_spaces=False,
        # A literal "</s>" typed in the text is encoded as text, not as the special token, so decoding with
        # skip_special_tokens=True gives it back.
        split_special_tokens=True,
    )

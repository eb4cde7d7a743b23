"""A character-level tokenizer like nanoGPT's `shakespeare_char`: one id per distinct character of the training text."""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

# Specials get the ids right after the characters, so character ids are exactly nanoGPT's (0..n-1, sorted).
UNK_TOKEN = "<unk>"  # a character absent from the training text (only ever seen in user prompts)
EOS_TOKEN = "<|endoftext|>"  # eos for generate(), also used as the pad token (GPT-2 convention)


def build_char_tokenizer(text: str, *, model_max_length: int = 1024) -> PreTrainedTokenizerFast:
    """Build a character tokenizer whose vocabulary is the sorted set of characters in `text`.

    Character `c` gets id `sorted(set(text)).index(c)`, as in nanoGPT; `<unk>` and `<|endoftext|>` follow. Plain
    text is encoded with no special tokens, decoding concatenates characters (so spaces and newlines round-trip
    exactly), and padding is on the left, as a decoder-only model's batched generation needs.

    `model_max_length` should match the model's block size (nanoGPT's shakespeare_char uses 256); 1024 is GPT-2's.
    """
    chars = sorted(set(text))
    if not chars:
        raise ValueError("cannot build a character tokenizer from an empty text")
    if UNK_TOKEN in chars or EOS_TOKEN in chars:  # impossible for one-character strings; guards a future edit
        raise ValueError("special token collides with a character")
    vocab = {c: i for i, c in enumerate(chars)}
    vocab[UNK_TOKEN] = len(vocab)
    vocab[EOS_TOKEN] = len(vocab)

    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK_TOKEN))
    # Every character, newline included, is its own piece; nothing is stripped or normalised.
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()  # join tokens with no separator (the default decoder joins with spaces)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token=UNK_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        add_bos_token=False,
        add_eos_token=False,
        padding_side="left",
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
        split_special_tokens=True,  # a literal "<unk>" in a prompt stays five characters
    )

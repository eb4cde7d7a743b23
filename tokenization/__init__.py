"""Tokenizers for nanoformer: a shared English–Chinese byte-level BPE and a char tokenizer."""

from .bpe import SPECIAL_TOKENS, train_bpe_tokenizer
from .char import build_char_tokenizer
from .limits import match_model_max_length
from .saving import LOAD_LEFTOVERS, clean_tokenizer_files, save_tokenizer

__all__ = [
    "LOAD_LEFTOVERS",
    "SPECIAL_TOKENS",
    "build_char_tokenizer",
    "clean_tokenizer_files",
    "match_model_max_length",
    "save_tokenizer",
    "train_bpe_tokenizer",
]

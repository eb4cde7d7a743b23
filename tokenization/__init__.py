"""Tokenizers for nanoformer: a shared English–Chinese byte-level BPE and a char tokenizer."""

from .bpe import SPECIAL_TOKENS, train_bpe_tokenizer
from .char import build_char_tokenizer
from .limits import match_model_max_length

__all__ = ["SPECIAL_TOKENS", "build_char_tokenizer", "match_model_max_length", "train_bpe_tokenizer"]

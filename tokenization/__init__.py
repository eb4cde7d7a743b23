"""Tokenizers for nanoformer: a shared English–Chinese byte-level BPE and a char tokenizer."""

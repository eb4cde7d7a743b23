"""Training, evaluation and sampling scripts for nanoformer models."""

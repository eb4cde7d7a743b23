"""A tokenizer's `model_max_length` made to say what the model it is saved with can take."""

from __future__ import annotations

from typing import Any


def match_model_max_length(tokenizer: Any, config: Any) -> Any:
    """Set ``tokenizer.model_max_length`` to the model's position table (``config.max_position_embeddings``: the
    translator's 512 by default, NanoGPT's `block_size`) and return the tokenizer; a config without one leaves it.

    A freshly trained tokenizer says 1024 whatever model it serves; saved like that, `truncation=True` would cut
    past the model's end and the "sequence length is longer than the specified maximum" warning would name a
    limit that is not the model's.
    """
    limit = getattr(config, "max_position_embeddings", None)
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        tokenizer.model_max_length = limit
    return tokenizer

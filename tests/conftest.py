"""Shared fixtures. Tests run offline against ../shared/data (skipped with a reason when it is absent)."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("NANOFORMER_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


def pytest_configure(config):
    # Marks of transformers' common model tests (tests/test_transformers_common.py), so that pytest knows them.
    for mark in ("accelerate_tests", "flash_attn_test", "flash_attn_3_test", "flash_attn_4_test", "torch_compile_test"):
        config.addinivalue_line("markers", f"{mark}: a mark of transformers' common model tests")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of real public data laid beside the checkout (see its README)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder not found at {SHARED_DATA} (set NANOFORMER_SHARED_DATA)")
    return SHARED_DATA


# Tokenizers shared by every test that needs one (built once per session, in seconds).
@pytest.fixture(scope="session")
def bpe_tokenizer_dir(shared_data, tmp_path_factory) -> Path:
    """A folder holding the shared EN–ZH byte-level BPE (vocab 8000, trained on Tatoeba train, both sides)."""
    from nanoformer.tokenization import train_bpe_tokenizer
    from nanoformer.tokenization.corpus import read_translation_pairs

    def texts():
        for source, target in read_translation_pairs(shared_data / "tatoeba-cmn-eng" / "train.jsonl", "en", "zh"):
            yield source
            yield target

    folder = tmp_path_factory.mktemp("bpe_tokenizer")
    train_bpe_tokenizer(texts(), vocab_size=8000).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def bpe_tokenizer(bpe_tokenizer_dir):
    """The shared EN–ZH BPE tokenizer, loaded back with AutoTokenizer from `bpe_tokenizer_dir`."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(bpe_tokenizer_dir)


@pytest.fixture(scope="session")
def char_tokenizer(shared_data):
    """A character tokenizer built from tiny Shakespeare (65 characters, then <unk> and <|endoftext|>)."""
    from nanoformer.tokenization import build_char_tokenizer

    return build_char_tokenizer((shared_data / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8"))


@pytest.fixture
def transformers_warnings():
    """The messages transformers logs at WARNING or above while the test runs (its loggers do not propagate to
    pytest's caplog). `warning_once` messages are forgotten first, so one logged by an earlier test shows again."""
    import logging

    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    once = getattr(logging.Logger, "warning_once", None)  # transformers' lru_cache'd method
    if hasattr(once, "cache_clear"):
        once.cache_clear()
    handler = Collect(level=logging.WARNING)
    library_root = logging.getLogger("transformers")
    library_root.addHandler(handler)
    try:
        yield messages
    finally:
        library_root.removeHandler(handler)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Torch on one intra-op thread for a module: tiny models gain nothing from more, and on a busy 2-core machine
    spinning threads make each op ~10x slower."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)

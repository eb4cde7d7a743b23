"""TranslatorPipeline in-process, and a saved folder loaded as remote code where nanoformer is not importable."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from nanoformer.modeling import TranslatorConfig, TranslatorForConditionalGeneration, TranslatorPipeline
from transformers import AutoTokenizer

TEXTS = ["Tom is reading a book.", "It's raining again today, isn't it?"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tokenizer(bpe_tokenizer_dir):
    return AutoTokenizer.from_pretrained(bpe_tokenizer_dir)


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    config = TranslatorConfig(
        vocab_size=len(tokenizer), d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        qk_norm=True,
    )
    assert (config.pad_token_id, config.eos_token_id) == (tokenizer.pad_token_id, tokenizer.eos_token_id)
    return TranslatorForConditionalGeneration(config).eval()


def reference(model, tokenizer, text, **generate_kwargs) -> str:
    ids = model.generate(**tokenizer(text, return_tensors="pt"), **generate_kwargs)[0]
    return tokenizer.decode(ids, skip_special_tokens=True)


def test_pipeline_equals_generate_then_decode(model, tokenizer):
    translator = TranslatorPipeline(model=model, tokenizer=tokenizer)
    # No arguments: the model's own generation config (beam 4, lp 0.6, source length + 50), nothing added.
    assert translator(TEXTS[0]) == [{"translation_text": reference(model, tokenizer, TEXTS[0])}]
    # Per-call arguments reach generate() unchanged.
    assert translator(TEXTS[1], num_beams=1, max_new_tokens=7) == [
        {"translation_text": reference(model, tokenizer, TEXTS[1], num_beams=1, max_new_tokens=7)}
    ]
    # Arguments given at construction apply to every call.
    greedy = TranslatorPipeline(model=model, tokenizer=tokenizer, num_beams=1, max_new_tokens=5)
    assert greedy(TEXTS[0])[0]["translation_text"] == reference(model, tokenizer, TEXTS[0], num_beams=1, max_new_tokens=5)


def test_pipeline_batches(model, tokenizer):
    translator = TranslatorPipeline(model=model, tokenizer=tokenizer, max_new_tokens=6)
    singles = [translator(text) for text in TEXTS]
    assert all(len(single) == 1 for single in singles)  # a string: [{"translation_text": ...}]
    # A list: one dict per input, as transformers 4's translation pipeline returned.
    assert translator(TEXTS) == [single[0] for single in singles]
    # Padded batches (right padding, masked source) give the same translations as one at a time.
    assert translator(TEXTS, batch_size=2) == [single[0] for single in singles]
    assert translator(TEXTS[:1]) == singles[0]


def test_pipeline_list_with_several_sequences_per_input_stays_nested(model, tokenizer):
    translator = TranslatorPipeline(model=model, tokenizer=tokenizer, max_new_tokens=6, num_beams=3)
    results = translator(TEXTS, num_return_sequences=2)
    assert [len(r) for r in results] == [2, 2]
    assert all(set(d) == {"translation_text"} for r in results for d in r)
    assert results[0] == translator(TEXTS[0], num_return_sequences=2)


def test_pipeline_rejects_empty_and_overlong_text(model, tokenizer):
    translator = TranslatorPipeline(model=model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="empty"):
        translator("   ")
    with pytest.raises(ValueError, match="max_position_embeddings=64"):
        translator(" ".join(["word"] * 100))


REMOTE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.modules["nanoformer"] = None  # the package must not be importable: everything comes from the folder
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

    torch.set_num_threads(1)
    folder, texts = sys.argv[1], json.loads(sys.argv[2])
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    decoder_input_ids = torch.tensor([[2, 100, 200, 300]] * len(texts))
    with torch.no_grad():
        logits = model(**batch, decoder_input_ids=decoder_input_ids).logits
    translator = pipeline("translation", model=folder, trust_remote_code=True)
    print(json.dumps({
        "module": type(model).__module__,
        "pipeline_class": type(translator).__name__,
        "tied": model.lm_head.weight is model.get_input_embeddings().weight,
        "logits": logits.tolist(),
        "greedy": model.generate(**batch, num_beams=1, max_new_tokens=8).tolist(),
        "beam": model.generate(**batch, max_new_tokens=8).tolist(),
        "pipeline": translator(texts[0]),
        "pipeline_list": translator(texts),
    }))
    """
)


def test_saved_folder_works_as_remote_code_without_nanoformer(model, tokenizer, tmp_path):
    folder = tmp_path / "translator"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        [sys.executable, "-c", REMOTE_SCRIPT, str(folder), json.dumps(TEXTS)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    remote = json.loads(result.stdout.strip().splitlines()[-1])

    assert remote["module"].startswith("transformers_modules.")
    assert remote["pipeline_class"] == "TranslatorPipeline"
    assert remote["tied"]
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    decoder_input_ids = torch.tensor([[2, 100, 200, 300]] * len(TEXTS))
    with torch.no_grad():
        logits = model(**batch, decoder_input_ids=decoder_input_ids).logits
    torch.testing.assert_close(torch.tensor(remote["logits"]), logits, rtol=1e-5, atol=1e-5)
    assert remote["greedy"] == model.generate(**batch, num_beams=1, max_new_tokens=8).tolist()
    assert remote["beam"] == model.generate(**batch, max_new_tokens=8).tolist()
    assert remote["pipeline"] == [{"translation_text": reference(model, tokenizer, TEXTS[0])}]
    # pipeline("translation", ...) on a list: one dict per input (not [[{...}], [{...}]]).
    assert remote["pipeline_list"] == [{"translation_text": reference(model, tokenizer, text)} for text in TEXTS]

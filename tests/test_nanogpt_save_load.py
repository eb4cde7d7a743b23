"""save_pretrained / from_pretrained for NanoGPT: Auto classes, safetensors, self-contained remote code."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from nanoformer.modeling import NanoGPTConfig, NanoGPTForCausalLM, NanoGPTModel
from nanogpt_helpers import VARIANTS, prompts, sharp_model
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

VARIANT_FIELDS = ("norm_type", "mlp_type", "position_embedding_type", "intermediate_size", "activation_function")


@pytest.fixture(scope="module", params=list(VARIANTS))
def saved(request, tmp_path_factory):
    """A sharp model of each variant, with RoPE scaling on the LLaMA-style one, saved once per module."""
    extra = {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}} if request.param == "llama" else {}
    model = sharp_model(request.param, **extra)
    folder = tmp_path_factory.mktemp(f"nanogpt_{request.param}")
    model.save_pretrained(folder)
    return model, folder


def test_auto_model_for_causal_lm_round_trip(saved):
    model, folder = saved
    loaded = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert type(loaded) is NanoGPTForCausalLM
    x = prompts(2, 12)
    with torch.no_grad():
        assert torch.equal(model(x).logits, loaded(x).logits)
    for field in (*VARIANT_FIELDS, "rope_parameters", "rope_theta", "block_size", "n_layer", "n_head", "n_embd",
                  "sliding_window"):
        # (learned positions have no `rope_parameters` at all)
        assert getattr(loaded.config, field, None) == getattr(model.config, field, None), field


def test_embedding_stored_once_and_still_tied(saved):
    model, folder = saved
    with safe_open(folder / "model.safetensors", framework="pt") as f:
        keys = set(f.keys())
    assert "transformer.wte.weight" in keys and "lm_head.weight" not in keys
    loaded = AutoModelForCausalLM.from_pretrained(folder)
    assert loaded.lm_head.weight.data_ptr() == loaded.transformer.wte.weight.data_ptr()


def test_base_model_loads_from_lm_checkpoint(saved):
    model, folder = saved
    base = AutoModel.from_pretrained(folder).eval()
    assert type(base) is NanoGPTModel
    x = prompts(1, 6)
    with torch.no_grad():
        assert torch.equal(base(x).last_hidden_state, model.transformer(x).last_hidden_state)


def test_folder_is_self_contained(saved):
    _, folder = saved
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "nanogpt"
    assert config["auto_map"] == {
        "AutoConfig": "configuration_nanogpt.NanoGPTConfig",
        "AutoModelForCausalLM": "modeling_nanogpt.NanoGPTForCausalLM",
    }
    for name in ("configuration_nanogpt.py", "modeling_nanogpt.py", "layers.py"):
        assert (folder / name).is_file(), name


REMOTE_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.modules["nanoformer"] = None  # `import nanoformer` now raises ImportError
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    folder, io = sys.argv[1], sys.argv[2]
    try:
        import nanoformer.modeling  # noqa: F401
        raise SystemExit("nanoformer is importable, the test would prove nothing")
    except ImportError:
        pass
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
    assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
    x = load_file(io + "/inputs.safetensors")["input_ids"]
    with torch.no_grad():
        logits = model(x).logits
    tokens = model.generate(x, max_new_tokens=20, do_sample=False, pad_token_id=0)
    save_file({"logits": logits.contiguous(), "tokens": tokens}, io + "/outputs.safetensors")
    """
)


def test_loads_with_trust_remote_code_without_nanoformer(saved, tmp_path):
    model, folder = saved
    x = prompts(2, 12)
    save_file({"input_ids": x}, tmp_path / "inputs.safetensors")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "hf_home"),
        "HF_MODULES_CACHE": str(tmp_path / "hf_modules"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": "",
    }
    result = subprocess.run(
        [sys.executable, "-c", REMOTE_SCRIPT, str(folder), str(tmp_path)],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = load_file(tmp_path / "outputs.safetensors")
    with torch.no_grad():
        assert torch.equal(outputs["logits"], model(x).logits)
    assert torch.equal(outputs["tokens"], model.generate(x, max_new_tokens=20, do_sample=False, pad_token_id=0))


def test_rope_scaling_round_trips_through_config_json(tmp_path):
    config = NanoGPTConfig(position_embedding_type="rope", rope_scaling={"rope_type": "dynamic", "factor": 4.0})
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert loaded.rope_parameters == {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0}
    assert loaded.rope_theta == 10000.0

"""`bash bench/gpu_check.sh --smoke`: the GPU benchmark's code path, on the CPU with tiny sizes (issue 14).

Checks only that it runs and writes its table and JSON with the expected rows and keys; no figure is asserted beyond
being a positive number (speed is never tested here).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "gpu_check.sh"


def _env(**extra) -> dict:
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **extra}
    env.pop("OUT", None)  # the device machine's carry-back folder: not this test's business
    return env


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gpu_check")
    result = subprocess.run(
        ["bash", str(SCRIPT), "--smoke", "--out", str(out)], cwd=REPO, env=_env(), capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return out


def test_smoke_writes_table_json_and_log(smoke):
    for name in ("gpu_check.md", "gpu_check.json", "gpu_check.log"):
        assert (smoke / name).stat().st_size > 0, name


def test_smoke_json_holds_every_section_and_positive_figures(smoke):
    data = json.loads((smoke / "gpu_check.json").read_text())
    assert data["meta"]["mode"] == "smoke"
    assert set(data["sections"]) == {"lm_train", "lm_compiled", "mt_decode", "mt_train", "lm_compiled_llama"}
    assert all(section["status"] == "ok" for section in data["sections"].values()), data["sections"]

    lm = data["results"]["lm_train"]
    for model in ("nanogpt", "gpt2", "gpt2-stock", "nanogpt-llama", "llama"):
        for precision in ("fp32", "bf16"):
            assert lm[f"{model} {precision}"]["value"] > 0
    assert data["results"]["lm_compiled"]["nanogpt bf16+compile"]["value"] > 0
    assert data["results"]["lm_compiled"]["gpt2 bf16+compile"]["value"] > 0
    assert data["results"]["mt_train"]["ours bf16"]["value"] > 0
    decode = data["results"]["mt_decode"]
    for setting in ("greedy b4", "beam4 b1", "beam4 b2"):
        for name in ("ours", "ours-nocache", "marian"):
            for precision in ("fp32", "bf16"):
                assert decode[f"{setting} {name} {precision}"]["value"] > 0
    # which SDPA kernel ran, from the profiler, for every contestant
    for entries in data["results"].values():
        for name, entry in entries.items():
            assert entry["sdpa"] and "profiler failed" not in entry["sdpa"][0], name
    assert lm["nanogpt fp32"]["sdpa"] != ["none (no SDPA call)"]
    assert data["backends"]["lm_train: nanogpt bf16"]["MATH"] == "ok"

    ratios = data["ratios"]
    for key in (
        "train nanogpt/gpt2 fp32", "train nanogpt/gpt2 bf16", "train nanogpt/gpt2 bf16+compile",
        "train nanogpt bf16+compile / gpt2 bf16", "train nanogpt-llama/llama bf16", "mt train ours/marian bf16",
        "mt greedy b4 bf16 cache/no-cache", "mt beam4 b1 bf16 cache/no-cache", "mt beam4 b1 fp32 ours/marian",
    ):  # fmt: skip
        assert ratios[key] > 0, key
    targets = data["targets"]
    assert targets["nanogpt_vs_gpt2"]["bar"] == 1.5 and targets["translator_cache_beam4"]["bar"] == 2.5
    for target in targets.values():
        assert target["met"] in (True, False)
        assert all(row["ratio"] > 0 for row in target["rows"])


def test_smoke_table_marks_the_two_targets(smoke):
    table = (smoke / "gpu_check.md").read_text()
    assert "## Open targets" in table and "Smoke run" in table
    assert "| NanoGPT training vs GPT2LMHeadModel | bf16 autocast + torch.compile, both compiled |" in table
    assert "| Translator cached vs uncached beam-4 | beam4 b1, bf16 |" in table
    assert "no verdict from a smoke run" in table
    for section in ("lm_train", "lm_compiled", "mt_decode", "mt_train"):
        assert f"## {section}:" in table


def test_without_cuda_one_clear_line_and_nonzero_exit(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    result = subprocess.run(
        ["bash", str(SCRIPT), "--out", str(tmp_path)], cwd=REPO, env=_env(), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode != 0
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "no CUDA device" in lines[0] and "--smoke" in lines[0], lines

"""Hub export, model cards, push_to_hub, and loading through a real Hub-API server (olah).

- The exported folders load in a fresh process where `import nanoformer` fails (trust_remote_code) and reproduce
  the in-process model's tokens, logits and pipeline text.
- The same repos are served by olah (a self-hosted Hub mirror, offline mode, 127.0.0.1) and downloaded with
  `from_pretrained("user/repo")` through `HF_ENDPOINT`.
- Uploads are SIMULATED: no local server implements the Hub's upload API, so huggingface_hub's `create_repo` /
  `create_commit` are intercepted at the boundary, the exact files and bytes are checked, written into an olah repo,
  and loaded back through olah.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from hub_load_check import model_outputs
from nanoformer.hub import HubPushError, check_no_pickles, check_remote_code, export_for_hub, push_to_hub
from nanoformer.hub.export import PICKLE_SUFFIXES
from nanoformer.modeling import (
    NanoGPTConfig,
    NanoGPTForCausalLM,
    TranslatorConfig,
    TranslatorForConditionalGeneration,
    TranslatorPipeline,
)
from olah_server import OlahServer, OlahUnavailable, ensure_olah, git_lfs_available, publish_git_repo

TESTS = Path(__file__).resolve().parent
USER = "nanoformer-test"
LM_TEXTS = ["ROMEO:", "First Citizen:\nWe are"]
MT_TEXTS = ["The weather is nice today.", "I love you."]
SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:zh|smooth:exp|version:2.6.0"
METRICS = {
    "lm": {"eval_loss": 1.4821337, "accuracy": 0.5123},
    "translator": {"bleu": 21.3456789, "chrf": 19.87, "eval_loss": 3.25},
}


def _sharpen(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Large random matrices make the outputs depend strongly on the weights and the context (tiny init barely does)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    return model.eval()


@pytest.fixture(scope="module")
def models(char_tokenizer, bpe_tokenizer):
    lm = NanoGPTForCausalLM(NanoGPTConfig(
        vocab_size=len(char_tokenizer), block_size=64, n_layer=2, n_head=2, n_embd=32,
        norm_type="rmsnorm", mlp_type="swiglu", position_embedding_type="rope",  # RoPE buffers: a meta-device trap
    ))
    translator = TranslatorForConditionalGeneration(TranslatorConfig(
        vocab_size=len(bpe_tokenizer), d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
    ))
    return {"lm": (_sharpen(lm, 1), char_tokenizer), "translator": (_sharpen(translator, 2), bpe_tokenizer)}


@pytest.fixture(scope="module")
def figure(tmp_path_factory) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = tmp_path_factory.mktemp("figures") / "loss_curve.png"
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([3.0, 2.1, 1.7, 1.5])
    fig.savefig(path)
    plt.close(fig)
    return path


@pytest.fixture(scope="module")
def exports(models, figure, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exports")
    lm, lm_tok = models["lm"]
    translator, mt_tok = models["translator"]
    return {
        "lm": export_for_hub(
            lm, lm_tok, root / "tiny-nanogpt", metrics=METRICS["lm"], repo_id=f"{USER}/tiny-nanogpt",
            training_args={"learning_rate": 1e-3, "max_steps": 5000, "batch_size": 64}, figures=[figure],
        ),
        "translator": export_for_hub(
            translator, mt_tok, root / "tiny-translator", metrics=METRICS["translator"],
            sacrebleu_signature=SIGNATURE, repo_id=f"{USER}/tiny-translator",
            datasets=["Helsinki-NLP/tatoeba", "wmt/wmt19"],
            eval_dataset={"type": "tatoeba", "name": "Tatoeba cmn-eng valid", "split": "validation"},
            training_args={"lr_schedule": "noam", "warmup_steps": 4000, "label_smoothing": 0.1,
                           "hub_token": "hf_secret_value"},
        ),
    }


@pytest.fixture(scope="module")
def reference(models) -> dict[str, dict]:
    """What the in-process models produce (same code path as the fresh-process check)."""
    from transformers import pipeline

    lm, lm_tok = models["lm"]
    translator, mt_tok = models["translator"]
    return {
        "lm": model_outputs(lm, lm_tok, pipeline("text-generation", model=lm, tokenizer=lm_tok), "text-generation",
                            LM_TEXTS),
        "translator": model_outputs(translator, mt_tok, TranslatorPipeline(model=translator, tokenizer=mt_tok),
                                    "translation", MT_TEXTS),
    }


def _jobs(sources: dict[str, str]) -> list[dict]:
    """One load job per name; the name starts with the model kind ("lm…" / "translator…")."""
    jobs = []
    for name, source in sources.items():
        is_mt = name.startswith("translator")
        jobs.append({"name": name, "source": source, "task": "translation" if is_mt else "text-generation",
                     "texts": MT_TEXTS if is_mt else LM_TEXTS, "pin_revision": not Path(source).is_absolute()})
    return jobs


def _run_fresh(sources: dict[str, str], workdir: Path, **env_overrides: str) -> dict:
    """Run hub_load_check.py in a fresh interpreter: cwd elsewhere, fresh HF_HOME, nanoformer blocked."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "HF_ENDPOINT", "HF_TOKEN"}}
    env.update(HF_HOME=str(workdir / "hf_home"), HF_HUB_OFFLINE="1", HF_HUB_DISABLE_XET="1", OMP_NUM_THREADS="1",
               TRANSFORMERS_VERBOSITY="error", TOKENIZERS_PARALLELISM="false")
    env.update(env_overrides)
    done = subprocess.run(
        [sys.executable, str(TESTS / "hub_load_check.py"), json.dumps(_jobs(sources))],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, f"fresh-process load failed:\n{done.stderr[-3000:]}"
    payload = json.loads(done.stdout.strip().splitlines()[-1])
    assert payload["nanoformer_modules"] == []
    return payload["results"]


def _assert_same_outputs(got: dict, want: dict) -> None:
    assert got["ids"] == want["ids"]
    assert got["pipeline"] == want["pipeline"]
    for got_logits, want_logits in zip(got["logits"], want["logits"], strict=True):
        torch.testing.assert_close(torch.tensor(got_logits), torch.tensor(want_logits), rtol=1e-5, atol=1e-5)
    # The classes came from the repo's copied files, not from an installed package.
    assert got["model_module"].startswith("transformers_modules.")


def _front_matter(readme: Path) -> dict:
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n", 2)[1])


# --------------------------------------------------------------------------------------------- the exported folder


@pytest.mark.parametrize("kind", ["lm", "translator"])
def test_export_folder_is_a_complete_safetensors_repo(exports, kind):
    folder = exports[kind]
    files = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
    assert not [f for f in files if f.endswith(PICKLE_SUFFIXES)]
    assert {"README.md", "config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json", "layers.py"} <= files
    config = json.loads((folder / "config.json").read_text())
    if kind == "lm":
        assert config["auto_map"] == {"AutoConfig": "configuration_nanogpt.NanoGPTConfig",
                                      "AutoModelForCausalLM": "modeling_nanogpt.NanoGPTForCausalLM"}
        assert "figures/loss_curve.png" in files
    else:
        assert config["auto_map"] == {
            "AutoConfig": "configuration_translator.TranslatorConfig",
            "AutoModelForSeq2SeqLM": "modeling_translator.TranslatorForConditionalGeneration",
        }
        assert config["custom_pipelines"]["translation"]["impl"] == "pipeline_translator.TranslatorPipeline"
        assert "pipeline_translator.py" in files
    # Every copied module only imports its siblings with single-dot imports.
    assert set(check_remote_code(folder)) == {f for f in files if f.endswith(".py")}


@pytest.mark.parametrize("kind", ["lm", "translator"])
def test_model_card_front_matter_and_body(exports, kind):
    meta = _front_matter(exports[kind] / "README.md")
    assert meta["license"] == "mit"
    assert meta["library_name"] == "transformers"
    assert meta["pipeline_tag"] == ("translation" if kind == "translator" else "text-generation")
    assert meta["language"] == (["en", "zh"] if kind == "translator" else ["en"])
    assert "nanoformer" in meta["tags"] and "custom_code" in meta["tags"]
    assert meta["datasets"]
    [entry] = meta["model-index"]
    published = {m["type"]: m for result in entry["results"] for m in result["metrics"]}
    for name, value in METRICS[kind].items():  # every metric, unchanged
        assert published[name]["value"] == value
    body = (exports[kind] / "README.md").read_text(encoding="utf-8").split("---\n", 2)[2]
    assert "trust_remote_code=True" in body and "## Training recipe" in body and "## Licence" in body
    if kind == "translator":
        assert published["bleu"]["args"] == {"signature": SIGNATURE}
        assert SIGNATURE in body
        assert meta["datasets"] == ["Helsinki-NLP/tatoeba", "wmt/wmt19"]
        assert "CC-BY 2.0 FR" in body and "WMT" in body and "Shakespeare" not in body
        assert 'pipeline("translation", model=repo, trust_remote_code=True)' in body
        assert "| `num_beams` | 4 |" in body  # decoding defaults from generation_config.json
        assert "hf_secret_value" not in body and "| `hub_token` | (redacted) |" in body
    else:
        assert published["perplexity"]["value"] == pytest.approx(math.exp(METRICS["lm"]["eval_loss"]))
        assert "public domain" in body and "Tatoeba" not in body
        assert "![loss curve](figures/loss_curve.png)" in body
        assert "| `max_steps` | 5000 |" in body


def test_export_refuses_bad_input(models, tmp_path):
    lm, tok = models["lm"]
    with pytest.raises(TypeError, match="metrics\\['bleu_signature'\\] must be a number.*sacrebleu_signature"):
        export_for_hub(lm, tok, tmp_path / "a", metrics={"bleu_signature": SIGNATURE})
    with pytest.raises(ValueError, match="not finite"):
        export_for_hub(lm, tok, tmp_path / "b", metrics={"eval_loss": float("nan")})
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not empty"):
        export_for_hub(lm, tok, tmp_path / "c", overwrite=True)
    assert (tmp_path / "c" / "notes.txt").read_text() == "keep me"


def test_checks_catch_pickles_and_non_portable_imports(exports, tmp_path):
    folder = shutil.copytree(exports["lm"], tmp_path / "copy")
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04.")
    with pytest.raises(RuntimeError, match="pytorch_model.bin"):
        check_no_pickles(folder)
    code = (folder / "modeling_nanogpt.py").read_text()
    (folder / "modeling_nanogpt.py").write_text(code.replace("from .layers import", "from nanoformer.modeling.layers import"))
    with pytest.raises(RuntimeError, match="absolute `nanoformer` import"):
        check_remote_code(folder)
    (folder / "modeling_nanogpt.py").write_text(code.replace("from .layers import", "from ..layers import"))
    with pytest.raises(RuntimeError, match="single dot"):
        check_remote_code(folder)


def test_export_cli_from_a_checkpoint(models, tmp_path):
    from nanoformer.hub.__main__ import main

    translator, tok = models["translator"]
    translator.save_pretrained(tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    rc = main(["export", str(tmp_path / "ckpt"), str(tmp_path / "out"), "--metric", "bleu=12.5",
               "--sacrebleu_signature", SIGNATURE, "--repo_id", "me/en-zh"])
    assert rc == 0
    meta = _front_matter(tmp_path / "out" / "README.md")
    assert meta["model-index"][0]["results"][0]["metrics"][0] == {
        "type": "bleu", "value": 12.5, "name": "BLEU", "args": {"signature": SIGNATURE}}
    assert "me/en-zh" in (tmp_path / "out" / "README.md").read_text()


# --------------------------------------------------------------------------- loading without nanoformer installed


def test_exported_folders_load_without_nanoformer(exports, reference, tmp_path_factory):
    """Fresh interpreter, cwd elsewhere, fresh HF_HOME, `import nanoformer` blocked: same tokens, logits, pipelines."""
    results = _run_fresh({"lm": str(exports["lm"]), "translator": str(exports["translator"])},
                         tmp_path_factory.mktemp("fresh-local"))
    for kind in ("lm", "translator"):
        _assert_same_outputs(results[kind], reference[kind])
    assert results["translator"]["pipeline_class"].endswith("pipeline_translator.TranslatorPipeline")


# ------------------------------------------------------------------ a real Hub-API server (olah) and simulated push


@pytest.fixture(scope="module")
def olah(tmp_path_factory, exports):
    """olah (own venv, outside the clone) serving the exported folders as `nanoformer-test/tiny-*` git repos.

    The LM repo stores its weights as plain git blobs; the translator repo uses git-LFS when it is installed,
    so both ways olah serves weights are exercised.
    """
    try:
        cli = ensure_olah()
    except OlahUnavailable as err:
        pytest.skip(f"olah (a local Hub-API server) could not be installed: {err}")
    server = OlahServer(cli, tmp_path_factory.mktemp("olah"))
    publish_git_repo(exports["lm"], server.mirrors, f"{USER}/tiny-nanogpt", use_lfs=False)
    publish_git_repo(exports["translator"], server.mirrors, f"{USER}/tiny-translator")
    try:
        server.start(ready_repo=f"{USER}/tiny-nanogpt")
    except OlahUnavailable as err:
        pytest.skip(f"olah could not be started: {err}")
    with server:
        yield server


class _RecordingHub:
    """SIMULATED upload: stands in for the Hub's upload-side HTTP calls and records what would be sent.

    `upload_folder` makes three kinds of request, all intercepted here at HfApi's boundary: `create_repo`,
    `_validate_yaml` (POST /api/validate-yaml, the Hub's check of README.md metadata before a commit; simulated
    with a local YAML parse) and `create_commit` (the files themselves).
    """

    def __init__(self):
        self.repos: list[dict] = []
        self.validated_cards: list[str] = []
        self.commits: list[dict] = []

    def install(self, monkeypatch):
        from huggingface_hub import CommitInfo, CommitOperationAdd, HfApi, RepoUrl

        recorder = self

        def create_repo(api, repo_id, *, token=None, private=None, exist_ok=False, repo_type=None, **kwargs):
            recorder.repos.append({"repo_id": repo_id, "endpoint": api.endpoint, "private": private,
                                   "exist_ok": exist_ok, "repo_type": repo_type, "token": token or api.token})
            return RepoUrl(f"{api.endpoint}/{repo_id}", endpoint=api.endpoint)

        def validate_yaml(api, content, *, repo_type=None, token=None):
            metadata = yaml.safe_load(content.split("---\n", 2)[1])
            if not isinstance(metadata, dict) or "model-index" not in metadata:
                raise ValueError("Invalid metadata in README.md.")
            recorder.validated_cards.append(content)

        def create_commit(api, repo_id, operations, *, commit_message, token=None, **kwargs):
            files = {}
            for op in operations:
                assert isinstance(op, CommitOperationAdd), f"unexpected operation {op!r}"
                source = op.path_or_fileobj
                files[op.path_in_repo] = Path(source).read_bytes() if isinstance(source, (str, Path)) else bytes(source)
            recorder.commits.append({"repo_id": repo_id, "endpoint": api.endpoint, "message": commit_message,
                                     "token": token or api.token, "files": files})
            return CommitInfo(commit_url=f"{api.endpoint}/{repo_id}/commit/0", commit_message=commit_message,
                              commit_description="", oid="0" * 40, _endpoint=api.endpoint)

        monkeypatch.setattr(HfApi, "create_repo", create_repo)
        monkeypatch.setattr(HfApi, "_validate_yaml", validate_yaml)
        monkeypatch.setattr(HfApi, "create_commit", create_commit)


def _online(monkeypatch, endpoint: str) -> None:
    """Point huggingface_hub at `endpoint`, online. Xet is disabled as for any non-HF server, so that
    `upload_folder` takes its single-commit path (`create_commit`) instead of Xet's pipelined upload."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setenv("HF_ENDPOINT", endpoint)


@pytest.fixture(scope="module")
def simulated_uploads(exports, olah):
    """SIMULATED push of both exports: intercept the commit, then write exactly what was sent into olah repos."""
    recorder = _RecordingHub()
    with pytest.MonkeyPatch.context() as monkeypatch:
        _online(monkeypatch, olah.endpoint)
        recorder.install(monkeypatch)
        for kind, name in (("lm", "uploaded-nanogpt"), ("translator", "uploaded-translator")):
            push_to_hub(exports[kind], f"{USER}/{name}", token="hf_simulated", commit_message=f"Upload {kind}")
    staging = olah.workdir / "staging"
    for commit in recorder.commits:
        folder = staging / commit["repo_id"]
        for path, data in commit["files"].items():
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_bytes(data)
        publish_git_repo(folder, olah.mirrors, commit["repo_id"])
    return recorder


@pytest.fixture(scope="module")
def olah_results(olah, simulated_uploads, tmp_path_factory):
    """One fresh process downloads all four repos from olah with from_pretrained("user/repo")."""
    workdir = tmp_path_factory.mktemp("fresh-olah")
    sources = {"lm": f"{USER}/tiny-nanogpt", "translator": f"{USER}/tiny-translator",
               "lm_uploaded": f"{USER}/uploaded-nanogpt", "translator_uploaded": f"{USER}/uploaded-translator"}
    results = _run_fresh(sources, workdir, HF_ENDPOINT=olah.endpoint, HF_HUB_OFFLINE="0")
    return results, workdir / "hf_home" / "hub"


def _cached_file(hub_cache: Path, repo_id: str, filename: str) -> Path:
    [path] = (hub_cache / f"models--{repo_id.replace('/', '--')}" / "snapshots").glob(f"*/{filename}")
    return path


@pytest.mark.parametrize("kind", ["lm", "translator"])
def test_download_through_olah_hub_server(olah_results, reference, exports, kind):
    results, hub_cache = olah_results
    _assert_same_outputs(results[kind], reference[kind])
    repo = f"{USER}/tiny-nanogpt" if kind == "lm" else f"{USER}/tiny-translator"
    # The weights really came over HTTP into the fresh cache, byte for byte.
    downloaded = _cached_file(hub_cache, repo, "model.safetensors").read_bytes()
    assert downloaded == (exports[kind] / "model.safetensors").read_bytes()


def test_olah_serves_weights_through_git_lfs_when_available(olah):
    repo = olah.mirrors / "models" / USER / "tiny-translator"
    attributes = repo / ".gitattributes"
    if not git_lfs_available():
        pytest.skip("git-lfs is not installed (apt-get install git-lfs); weights were served as plain git blobs")
    assert "*.safetensors filter=lfs" in attributes.read_text()
    pointer = subprocess.run(["git", "cat-file", "-p", "HEAD:model.safetensors"], cwd=repo, capture_output=True)
    assert pointer.stdout.startswith(b"version https://git-lfs.github.com/spec/v1")


def test_simulated_upload_sends_exactly_the_export(simulated_uploads, exports, olah):
    """SIMULATED upload: the operations huggingface_hub would send are the export's files, byte for byte."""
    assert [r["repo_id"] for r in simulated_uploads.repos] == [f"{USER}/uploaded-nanogpt", f"{USER}/uploaded-translator"]
    for repo in simulated_uploads.repos:
        assert repo == {"repo_id": repo["repo_id"], "endpoint": olah.endpoint, "private": False, "exist_ok": True,
                        "repo_type": "model", "token": "hf_simulated"}
    for commit, kind in zip(simulated_uploads.commits, ("lm", "translator"), strict=True):
        folder = exports[kind]
        expected = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        assert sorted(commit["files"]) == sorted(expected)
        for path, data in commit["files"].items():
            assert hashlib.sha256(data).digest() == hashlib.sha256(expected[path]).digest(), path
        assert commit["message"] == f"Upload {kind}" and commit["endpoint"] == olah.endpoint
        assert commit["token"] == "hf_simulated"
    assert simulated_uploads.validated_cards == [(exports[k] / "README.md").read_text() for k in ("lm", "translator")]


@pytest.mark.parametrize("kind", ["lm", "translator"])
def test_simulated_upload_loads_back_through_olah(olah_results, reference, kind):
    results, _ = olah_results
    _assert_same_outputs(results[f"{kind}_uploaded"], reference[kind])


# ------------------------------------------------------------------------------------------ push failures are clear


def test_push_offline_fails_with_one_line_cli_error(exports):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_TOKEN": "hf_unused"}
    done = subprocess.run([sys.executable, "-m", "nanoformer.hub", "push", str(exports["lm"]), f"{USER}/x"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "HF_HUB_OFFLINE" in errors[0]
    assert "Traceback" not in done.stderr


def test_push_without_token_fails_before_any_request(exports, monkeypatch, tmp_path, capsys):
    from huggingface_hub import HfApi, constants
    from nanoformer.hub.__main__ import main

    _online(monkeypatch, "http://127.0.0.1:9")
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(HfApi, "create_repo", lambda *a, **k: pytest.fail("a request was attempted"))
    with pytest.raises(HubPushError, match="no Hugging Face token"):
        push_to_hub(exports["lm"], f"{USER}/x")
    assert main(["push", str(exports["lm"]), f"{USER}/x"]) == 2
    assert "error: cannot push" in capsys.readouterr().err


def test_push_to_a_server_that_refuses_uploads_is_a_clear_error(exports, olah, monkeypatch):
    """olah implements no upload API: the real HTTP refusal surfaces as one HubPushError naming the status."""
    _online(monkeypatch, olah.endpoint)
    with pytest.raises(HubPushError, match=r"push to nanoformer-test/x at http://127\.0\.0\.1:\d+ failed \(HTTP \d+\)"):
        push_to_hub(exports["lm"], f"{USER}/x", token="hf_fake")


def test_push_refuses_a_folder_with_pickles(exports, tmp_path):
    folder = shutil.copytree(exports["lm"], tmp_path / "copy")
    (folder / "training_args.bin").write_bytes(b"\x80\x04.")
    with pytest.raises(HubPushError, match="training_args.bin"):
        push_to_hub(folder, f"{USER}/x", token="hf_fake")

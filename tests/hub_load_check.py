"""Outputs of an exported model, computed the same way in-process and in a fresh process without nanoformer.

Run as a script (by test_hub.py): `python hub_load_check.py JOBS_JSON` loads each job's `source` (a folder or a
`user/repo` id served through HF_ENDPOINT) with AutoModel… / AutoTokenizer / pipeline and `trust_remote_code=True`,
after making `import nanoformer` impossible, and prints one JSON line of results.
"""

from __future__ import annotations

import json
import sys
from typing import Any

MAX_NEW_TOKENS = 8


def model_outputs(model: Any, tokenizer: Any, pipe: Any, task: str, texts: list[str]) -> dict[str, Any]:
    """Greedy/beam token ids (the model's generation_config), last-position logits, and the pipeline's text."""
    import torch

    out: dict[str, Any] = {"ids": [], "logits": [], "pipeline": []}
    for text in texts:
        enc = tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            if task == "translation":
                start = torch.tensor([[model.config.decoder_start_token_id]])
                logits = model(**enc, decoder_input_ids=start).logits[0, -1]
                ids = model.generate(**enc, max_new_tokens=MAX_NEW_TOKENS)
                text_out = pipe(text, max_new_tokens=MAX_NEW_TOKENS)[0]["translation_text"]
            else:
                logits = model(**enc).logits[0, -1]
                ids = model.generate(**enc, max_new_tokens=MAX_NEW_TOKENS, do_sample=False)
                text_out = pipe(text, max_new_tokens=MAX_NEW_TOKENS, do_sample=False)[0]["generated_text"]
        out["ids"].append(ids[0].tolist())
        out["logits"].append(logits.tolist())
        out["pipeline"].append(text_out)
    return out


def load_and_run(source: str, task: str, texts: list[str], pin_revision: bool) -> dict[str, Any]:
    from huggingface_hub import HfApi
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

    # A Hub repo is loaded at the commit `main` points to, as recommended with trust_remote_code (and needed by
    # olah, see tests/olah_server.py: publish_git_repo).
    revision = HfApi().model_info(source, revision="main").sha if pin_revision else None
    auto_model = AutoModelForSeq2SeqLM if task == "translation" else AutoModelForCausalLM
    tokenizer = AutoTokenizer.from_pretrained(source, revision=revision, trust_remote_code=True)
    model = auto_model.from_pretrained(source, revision=revision, trust_remote_code=True).eval()
    pipe = pipeline(task, model=source, revision=revision, trust_remote_code=True)
    result = model_outputs(model, tokenizer, pipe, task, texts)
    result["revision"] = revision
    result["model_module"] = type(model).__module__
    result["pipeline_class"] = f"{type(pipe).__module__}.{type(pipe).__name__}"
    return result


def main() -> None:
    sys.modules["nanoformer"] = None  # `import nanoformer…` now raises ImportError: the repo must stand alone
    try:
        import nanoformer.modeling  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("nanoformer is still importable; the check would prove nothing")
    import torch

    torch.manual_seed(0)
    jobs = json.loads(sys.argv[1])
    results = {job["name"]: load_and_run(job["source"], job["task"], job["texts"], job["pin_revision"]) for job in jobs}
    leaked = sorted(name for name, module in sys.modules.items() if name.startswith("nanoformer") and module)
    print(json.dumps({"results": results, "nanoformer_modules": leaked}))


if __name__ == "__main__":
    main()

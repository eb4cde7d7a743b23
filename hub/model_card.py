"""Model cards (README.md with YAML front matter) for exported nanoformer models.

The front matter is built with huggingface_hub's `ModelCardData` / `EvalResult`, so the Hub reads the licence,
pipeline tag, languages, datasets and `model-index` results exactly as it does for any transformers model.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

LICENSE = "mit"  # the project's licence (LICENSE at the repository root)


@dataclass(frozen=True)
class ModelKind:
    """What differs between the two nanoformer model families on the Hub."""

    auto_class: str  # the AutoModel… class named in config.json's auto_map
    pipeline_tag: str
    languages: tuple[str, ...]
    datasets: tuple[str, ...]  # default training datasets (Hub ids) for the front matter
    eval_dataset: Mapping[str, str]  # default `dataset` block of the model-index results
    tags: tuple[str, ...]
    summary: str
    example_input: str


TRANSLATOR = ModelKind(
    auto_class="AutoModelForSeq2SeqLM",
    pipeline_tag="translation",
    languages=("en", "zh"),
    datasets=("Helsinki-NLP/tatoeba",),
    eval_dataset={"type": "tatoeba", "name": "Tatoeba cmn-eng (validation split)", "split": "validation"},
    tags=("nanoformer", "translation", "encoder-decoder", "custom_code"),
    summary=(
        'A small "Attention Is All You Need" encoder–decoder Transformer that translates English into Chinese '
        "(sinusoidal positions, one shared EN–ZH byte-level BPE vocabulary and embedding, tied output projection)."
    ),
    example_input="The weather is nice today.",
)

CAUSAL_LM = ModelKind(
    auto_class="AutoModelForCausalLM",
    pipeline_tag="text-generation",
    languages=("en",),
    datasets=("karpathy/tiny_shakespeare",),
    eval_dataset={"type": "tiny_shakespeare", "name": "tiny Shakespeare (held-out split)", "split": "validation"},
    tags=("nanoformer", "nanogpt", "causal-lm", "custom_code"),
    summary="A nanoGPT-style decoder-only Transformer language model (GPT-2 blocks, optional LLaMA-style parts).",
    example_input="ROMEO:",
)

# Attribution shown in every card whose training or evaluation data matches the key (case-insensitive substring).
DATA_ATTRIBUTION = {
    "tatoeba": (
        "**Tatoeba** English–Mandarin sentence pairs (the manythings.org `cmn-eng` export of the "
        "[Tatoeba project](https://tatoeba.org)), © Tatoeba contributors, licensed under "
        "[CC-BY 2.0 FR](https://creativecommons.org/licenses/by/2.0/fr/)."
    ),
    "shakespeare": (
        "**tiny Shakespeare** (Andrej Karpathy's `input.txt` from [char-rnn](https://github.com/karpathy/char-rnn)): "
        "works of William Shakespeare, in the public domain."
    ),
    "wmt": (
        "**WMT news translation** data (e.g. newstest2018/2019 en–zh) from the "
        "[Conference on Machine Translation](https://www.statmt.org/), released by the WMT organisers for research "
        "use; cite the WMT findings papers when reporting results on them."
    ),
}

_PRETTY_METRIC_NAMES = {"bleu": "BLEU", "chrf": "chrF", "loss": "Eval loss", "perplexity": "Perplexity"}
# Training-args values never published in a card: a name with one of these words (`hub_token`, `wandb_api_key`;
# not `tokenizer_name` or `max_tokens_per_batch`).
_SECRET_WORDS = frozenset({"token", "secret", "password", "key", "credentials"})
_TASK_NAMES = {"translation": "Translation", "text-generation": "Text Generation"}


def _pretty_metric_name(name: str) -> str:
    return _PRETTY_METRIC_NAMES.get(name.removeprefix("eval_"), name)


def _is_secret(key: str) -> bool:
    return bool(_SECRET_WORDS & set(key.lower().replace("-", "_").split("_")))


def _redact(training_args: Mapping[str, Any]) -> dict[str, Any]:
    return {key: "(redacted)" if _is_secret(key) and value else value for key, value in training_args.items()}


def check_metrics(metrics: Mapping[str, Any] | None) -> dict[str, float | int]:
    """Validate a flat name → number dict (numpy/torch scalars become Python numbers, the value is unchanged)."""
    checked: dict[str, float | int] = {}
    for name, value in (metrics or {}).items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"metric names must be non-empty strings, got {name!r}")
        if hasattr(value, "item") and not isinstance(value, numbers.Number):
            value = value.item()  # 0-d numpy array / torch tensor
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            hint = " (pass a sacreBLEU signature as sacrebleu_signature=...)" if isinstance(value, str) else ""
            raise TypeError(f"metrics[{name!r}] must be a number, got {type(value).__name__} {value!r}{hint}")
        checked[name] = int(value) if isinstance(value, numbers.Integral) else float(value)
        if not math.isfinite(checked[name]):
            raise ValueError(f"metrics[{name!r}] is not finite ({value!r}); refusing to publish it in a model card")
    return checked


def _fmt(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _table(rows: Sequence[tuple[Any, Any]], header: tuple[str, str], *, code_keys: bool = True) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "| --- | --- |"]
    for key, value in rows:
        name = f"`{key}`" if code_keys else str(key)
        text = _fmt(value).replace("|", "\\|")  # a `|` in a value (a sacreBLEU signature) would split the cell
        lines.append(f"| {name} | {text} |")
    return "\n".join(lines)


def _usage_snippet(kind: ModelKind, repo_id: str) -> str:
    if kind.pipeline_tag == "translation":
        return f"""```python
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

repo = "{repo_id}"
translator = pipeline("translation", model=repo, trust_remote_code=True)
print(translator("{kind.example_input}"))

# or step by step
tokenizer = AutoTokenizer.from_pretrained(repo, trust_remote_code=True)
model = AutoModelForSeq2SeqLM.from_pretrained(repo, trust_remote_code=True)
inputs = tokenizer(["{kind.example_input}"], return_tensors="pt")
outputs = model.generate(**inputs)  # beam search and length limits come from generation_config.json
print(tokenizer.batch_decode(outputs, skip_special_tokens=True))
```"""
    return f"""```python
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

repo = "{repo_id}"
generator = pipeline("text-generation", model=repo, trust_remote_code=True)
print(generator("{kind.example_input}", max_new_tokens=100, do_sample=True, top_k=50)[0]["generated_text"])

# or step by step
tokenizer = AutoTokenizer.from_pretrained(repo, trust_remote_code=True)
model = AutoModelForCausalLM.from_pretrained(repo, trust_remote_code=True)
inputs = tokenizer("{kind.example_input}", return_tensors="pt")
outputs = model.generate(**inputs, max_new_tokens=100, do_sample=True, top_k=50)
print(tokenizer.decode(outputs[0], skip_special_tokens=True))
```"""


def _attributions(names: Sequence[str]) -> list[str]:
    found = [text for key, text in DATA_ATTRIBUTION.items() if any(key in name.lower() for name in names)]
    known = [key for key in DATA_ATTRIBUTION]
    others = [name for name in names if not any(key in name.lower() for key in known)]
    found += [f"`{name}`: see its dataset card for the licence and terms." for name in dict.fromkeys(others)]
    return found


def build_model_card(
    kind: ModelKind,
    *,
    model_name: str,
    repo_id: str,
    metrics: Mapping[str, Any] | None = None,
    sacrebleu_signature: str | None = None,
    datasets: Sequence[str] | None = None,
    eval_dataset: Mapping[str, str] | None = None,
    languages: Sequence[str] | None = None,
    tags: Sequence[str] | None = None,
    architecture: Mapping[str, Any] | None = None,
    generation: Mapping[str, Any] | None = None,
    num_parameters: int | None = None,
    training_args: Mapping[str, Any] | None = None,
    recipe: Sequence[tuple[str, str]] | None = None,
    training_args_source: str | None = None,
    notes: Sequence[str] | None = None,
    figures: Sequence[str] | None = None,
    description: str | None = None,
) -> ModelCard:
    """Build the card: front matter (licence, pipeline tag, languages, datasets, model-index) plus a body with usage,
    architecture, training recipe, results, figures, data attribution and licence.

    Every entry of `metrics` appears in `model-index` with its name as `type` and its value unchanged; the sacreBLEU
    signature, if given, is attached to the BLEU entries (`args.signature`) and printed in the body. `recipe`
    (setting → text rows, e.g. from `run_card.card_from_run`) is the recipe table; with it, `training_args` is shown
    in full below it, folded (`training_args_source` names the file they came from). `notes` are paragraphs under
    the results.
    """
    metrics = check_metrics(metrics)
    datasets = list(datasets) if datasets is not None else list(kind.datasets)
    eval_dataset = dict(eval_dataset or kind.eval_dataset)
    if not {"type", "name"} <= eval_dataset.keys():
        raise ValueError(f"eval_dataset needs 'type' and 'name' keys, got {sorted(eval_dataset)}")

    eval_results = []
    for name, value in metrics.items():
        is_bleu = "bleu" in name.lower()
        eval_results.append(
            EvalResult(
                task_type=kind.pipeline_tag,
                task_name=_TASK_NAMES.get(kind.pipeline_tag),
                dataset_type=eval_dataset["type"],
                dataset_name=eval_dataset["name"],
                dataset_split=eval_dataset.get("split"),
                dataset_config=eval_dataset.get("config"),
                metric_type=name,
                metric_name=_pretty_metric_name(name),
                metric_value=value,
                metric_args={"signature": sacrebleu_signature} if is_bleu and sacrebleu_signature else None,
            )
        )
    card_data = ModelCardData(
        model_name=model_name,
        license=LICENSE,
        library_name="transformers",
        pipeline_tag=kind.pipeline_tag,
        language=list(languages or kind.languages),
        tags=list(dict.fromkeys([*kind.tags, *(tags or [])])),
        datasets=datasets or None,
        eval_results=eval_results or None,
    )

    body = [f"# {model_name}", "", description or kind.summary, ""]
    body += ["Built with nanoformer. The modelling code ships in this repository, so it loads with plain "
             "`transformers` and `trust_remote_code=True` (no nanoformer install needed).", ""]
    body += ["## Usage", "", _usage_snippet(kind, repo_id), ""]

    body += ["## Model", ""]
    if num_parameters is not None:
        body += [f"Parameters: {num_parameters:,}.", ""]
    if architecture:
        body += [_table(list(architecture.items()), ("config", "value")), ""]
    if generation:
        body += ["Decoding defaults (`generation_config.json`, used by `generate()` and the pipeline):", "",
                 _table(list(generation.items()), ("generation", "value")), ""]

    body += ["## Training recipe", ""]
    if recipe:
        body += [_table(list(recipe), ("setting", "value"), code_keys=False), ""]
        if training_args:
            source = f" (`{training_args_source}`)" if training_args_source else ""
            body += ["<details>", f"<summary>All training arguments{source}</summary>", "",
                     _table(list(_redact(training_args).items()), ("argument", "value")), "", "</details>", ""]
    elif training_args:
        body += [_table(list(_redact(training_args).items()), ("setting", "value")), ""]
    else:
        body += ["Not recorded for this export.", ""]

    body += ["## Results", ""]
    if metrics:
        split = f"; split: {eval_dataset['split']}" if eval_dataset.get("split") else ""
        body += [f"Evaluated on {eval_dataset['name']}{split}.", "",
                 _table([(_pretty_metric_name(k), v) for k, v in metrics.items()], ("metric", "value"),
                        code_keys=False), ""]  # fmt: skip
    else:
        body += ["No evaluation results were recorded for this export.", ""]
    if sacrebleu_signature:
        body += [f"sacreBLEU signature: `{sacrebleu_signature}`", ""]
    for note in notes or []:
        body += [note, ""]

    if figures:
        body += ["## Figures", ""]
        body += [f"![{path.rsplit('/', 1)[-1].rsplit('.', 1)[0].replace('_', ' ')}]({path})" for path in figures]
        body += [""]

    body += ["## Training data and attribution", ""]
    credits = _attributions([*datasets, eval_dataset["type"], eval_dataset["name"]])
    body += [f"- {text}" for text in credits] or ["- Not recorded."]
    body += ["", "## Licence", "",
             "The model weights and code are released under the MIT licence. The training data keeps its own licence "
             "(see above); reuse of outputs may be subject to those terms.", ""]

    card = ModelCard(f"---\n{card_data.to_yaml()}\n---\n\n" + "\n".join(body))
    _check_card(card, metrics, sacrebleu_signature)
    return card


def _check_card(card: ModelCard, metrics: Mapping[str, float | int], signature: str | None) -> None:
    """Re-parse the card and make sure every metric survived the round trip unchanged."""
    parsed = ModelCard(str(card))
    published = {(r.metric_type, r.metric_value) for r in parsed.data.eval_results or []}
    missing = [name for name, value in metrics.items() if (name, value) not in published]
    if missing:
        raise RuntimeError(f"model card lost metrics {missing} on a YAML round trip")
    if signature and any("bleu" in r.metric_type.lower() for r in parsed.data.eval_results or []):
        signatures = {(r.metric_args or {}).get("signature") for r in parsed.data.eval_results if "bleu" in r.metric_type.lower()}
        if signatures != {signature}:
            raise RuntimeError("model card lost the sacreBLEU signature on a YAML round trip")

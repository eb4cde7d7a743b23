"""`export_for_hub`: write a trained model + tokenizer as a complete, self-contained Hugging Face Hub model repo.

The folder holds safetensors weights (never pickles), `config.json` with an `auto_map` for `trust_remote_code`, the
model's own `.py` files (flat, single-dot relative imports only, so they load where nanoformer is not installed),
the tokenizer files (without loading leftovers, see `nanoformer.tokenization.saving`), `generation_config.json`, and a
model card `README.md`. Given the trainer's output folder (`run_dir`, or `export_run`), the card is built from what
the run recorded (see `run_card`): its scores, recipe and training curves.
"""

from __future__ import annotations

import ast
import json
import logging
import math
import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from nanoformer.tokenization import match_model_max_length, save_tokenizer
from transformers import PreTrainedConfig, PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from .model_card import CAUSAL_LM, TRANSLATOR, ModelKind, build_model_card, check_metrics
from .run_card import canonical_metric, card_from_run, read_run

logger = logging.getLogger(__name__)

# Files that can only be read by unpickling; a Hub repo of ours must never contain one.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib", ".npy", ".npz")


def model_kind(model: PreTrainedModel) -> ModelKind:
    """Encoder–decoder models are published as translators, decoder-only ones as causal LMs."""
    if getattr(model.config, "is_encoder_decoder", False):
        return TRANSLATOR
    if not hasattr(model, "generate"):
        raise TypeError(f"{type(model).__name__} cannot generate; export a …ForCausalLM / …ForConditionalGeneration")
    return CAUSAL_LM


@contextmanager
def _registered_for_auto_classes(model: PreTrainedModel, auto_class: str) -> Iterator[None]:
    """Register the config and model classes for `auto_map` while saving, then restore what was there before.

    `save_pretrained` writes `auto_map` and copies the defining `.py` files only for registered classes.
    """
    classes = [(type(model.config), "AutoConfig"), (type(model), auto_class)]
    missing = object()
    saved = [(cls, cls.__dict__.get("_auto_class", missing)) for cls, _ in classes]
    try:
        for cls, name in classes:
            cls.register_for_auto_class(name)
        yield
    finally:
        for cls, previous in saved:
            if previous is missing:
                del cls._auto_class
            else:
                cls._auto_class = previous


def check_no_pickles(folder: Path) -> None:
    """Raise if any file under `folder` could only be loaded by unpickling it."""
    found = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.suffix.lower() in PICKLE_SUFFIXES)
    if found:
        raise RuntimeError(f"{folder} contains pickle-based files {found}; a Hub export must use safetensors only")
    if not any(folder.glob("*.safetensors")):
        raise RuntimeError(f"{folder} has no .safetensors weights")


def check_remote_code(folder: Path) -> list[str]:
    """Check that the copied `.py` files form a self-contained, flat module set; return their names.

    transformers copies and resolves only `from .module import X` (single dot); `from . import x`, `from ..x` and
    absolute imports of our own package would fail on a machine without nanoformer.
    """
    config = json.loads((folder / "config.json").read_text())
    modules = {spec.split(".")[0] for spec in config.get("auto_map", {}).values()}
    modules |= {spec["impl"].split(".")[0] for spec in (config.get("custom_pipelines") or {}).values()}
    problems = [f"{name}.py (named in config.json) is missing" for name in sorted(modules)
                if not (folder / f"{name}.py").is_file()]
    py_files = sorted(folder.glob("*.py"))
    for path in py_files:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                if node.level > 1 or node.module is None:
                    problems.append(f"{path.name}:{node.lineno}: use `from .module import name` (single dot)")
                elif not (folder / f"{node.module.replace('.', '/')}.py").is_file():
                    problems.append(f"{path.name}:{node.lineno}: imports .{node.module}, which was not copied")
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                if any(name and name.split(".")[0] == "nanoformer" for name in names):
                    problems.append(f"{path.name}:{node.lineno}: absolute `nanoformer` import breaks remote code")
    if problems:
        raise RuntimeError(f"remote code in {folder} is not self-contained: " + "; ".join(problems))
    return [p.name for p in py_files]


def _architecture(config: PreTrainedConfig) -> dict[str, Any]:
    """The model-specific config fields (those a plain PreTrainedConfig does not have), for the card."""
    generic = set(PreTrainedConfig().to_dict()) | {"auto_map", "custom_pipelines", "architectures", "dtype"}
    return {key: value for key, value in config.to_dict().items()
            if key not in generic and isinstance(value, (int, float, str, bool))}


def _generation_defaults(folder: Path) -> dict[str, Any]:
    """The decoding settings saved in generation_config.json (token ids and version stamps left out)."""
    saved = json.loads((folder / "generation_config.json").read_text())
    return {key: value for key, value in saved.items()
            if not key.endswith("token_id") and key != "transformers_version" and not isinstance(value, (dict, list))}


def check_output_dir(output_dir: str | Path, overwrite: bool, *, overwrite_hint: str = "overwrite=True") -> None:
    """Raise FileExistsError unless `output_dir` is absent, empty, or a previous export that `overwrite` replaces;
    the message names `overwrite_hint` (the CLI passes ``--overwrite``)."""
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise FileExistsError(f"{output_dir} exists and is not a folder")
    if output_dir.is_dir() and any(output_dir.iterdir()):
        if not overwrite:
            raise FileExistsError(f"{output_dir} is not empty; pass {overwrite_hint} to replace a previous export")
        if not (output_dir / "config.json").is_file() or not (output_dir / "README.md").is_file():
            raise FileExistsError(f"{output_dir} is not empty and does not look like a previous export; not deleting it")


def _prepare_output_dir(output_dir: Path, overwrite: bool) -> None:
    check_output_dir(output_dir, overwrite)
    if output_dir.exists():
        shutil.rmtree(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)


def _merge_metrics(kind: ModelKind, from_run: Mapping[str, float], given: Mapping[str, float]) -> dict[str, float]:
    """The run's metrics, then the given ones (`eval_bleu` replaces the run's `bleu`, and so on). A new `eval_loss`
    without a new perplexity drops the run's perplexity (recomputed below for a causal LM)."""
    merged = dict(from_run)
    given = {canonical_metric(name): value for name, value in given.items()}
    if "eval_loss" in given and "perplexity" not in given:
        merged.pop("perplexity", None)
    merged.update(given)
    if kind is CAUSAL_LM and "eval_loss" in merged and "perplexity" not in merged:
        merged["perplexity"] = math.exp(merged["eval_loss"])
    return merged


def export_for_hub(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    output_dir: str | Path,
    *,
    run_dir: str | Path | None = None,
    metrics: Mapping[str, float] | None = None,
    datasets: Sequence[str] | None = None,
    sacrebleu_signature: str | None = None,
    eval_dataset: Mapping[str, str] | None = None,
    training_args: Mapping[str, Any] | None = None,
    figures: Sequence[str | Path] | None = None,
    repo_id: str | None = None,
    model_name: str | None = None,
    tags: Sequence[str] | None = None,
    description: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write `model` and `tokenizer` to `output_dir` as a complete Hub model repo and return the folder.

    Args:
        model: a nanoformer `NanoGPTForCausalLM` or `TranslatorForConditionalGeneration` (any transformers model with
            its own `.py` files works); encoder–decoder models are published as `translation`, others as
            `text-generation`.
        tokenizer: the tokenizer to ship (its files are saved next to the weights).
        output_dir: the folder to write; it must be empty or absent (or a previous export, with `overwrite=True`).
        run_dir: the trainer's output folder the model came from (`train_mt.py` / `train_lm.py --output_dir`, or
            an `average_checkpoints` output). The card is then built from what it recorded: `all_results.json`
            (BLEU with its sacreBLEU signature, eval loss, perplexity, steps, speed, data counts, final model),
            `training_args.json` (or the newest checkpoint's arguments), `log_history.json` and
            `training_curves.png` (copied and shown). The arguments below add to it or override it.
        metrics: flat name → number dict (e.g. `{"bleu": 21.3}` or `{"eval_loss": 1.47}`), added to the run's
            metrics or replacing them (`eval_bleu` and `bleu` name the same metric, as do `eval_ppl` and
            `perplexity`). Every entry appears unchanged in the card's `model-index`; for a causal LM with
            `eval_loss` and no `perplexity`, the perplexity `exp(eval_loss)` is added.
        datasets: Hub ids of the training data for the card (default: the run's, else Tatoeba for the translator,
            tiny Shakespeare for the LM); also selects the attribution paragraphs.
        sacrebleu_signature: the sacreBLEU signature of the BLEU score, attached to the BLEU entry (default: the
            run's).
        eval_dataset: `{"type", "name", "split"?, "config"?}` of the evaluation set used for `metrics` (default: the
            run's validation data).
        training_args: the training arguments (name → value) shown in the card, merged over the run's.
        figures: image files (e.g. loss curves) copied to `figures/` and shown in the card, after the run's curves.
        repo_id: the Hub id used in the card's usage snippet (default `your-username/<folder name>`).
        model_name, tags, description: card title, extra tags, and summary paragraph.
        overwrite: replace a previous export at `output_dir`.
    """
    output_dir = Path(output_dir)
    kind = model_kind(model)
    metrics = check_metrics(metrics)
    run = None
    if run_dir is not None:
        if not Path(run_dir).is_dir():
            raise FileNotFoundError(f"run folder {run_dir} does not exist")
        run = read_run(run_dir)
    from_run = card_from_run(run, kind, config=model.config.to_dict(), num_parameters=model.num_parameters()) \
        if run is not None else None  # fmt: skip
    if from_run is not None:
        metrics = _merge_metrics(kind, from_run.metrics, metrics)
        sacrebleu_signature = sacrebleu_signature or from_run.sacrebleu_signature
        eval_dataset = eval_dataset or from_run.eval_dataset
        datasets = datasets if datasets is not None else from_run.datasets
        training_args = {**from_run.training_args, **(training_args or {})}
    elif kind is CAUSAL_LM and "eval_loss" in metrics and "perplexity" not in metrics:
        metrics["perplexity"] = math.exp(metrics["eval_loss"])
    figures = [*(from_run.figures if from_run else []), *(Path(f) for f in figures or [])]
    for figure in figures:
        if not figure.is_file():
            raise FileNotFoundError(f"figure {figure} does not exist")
    repo_id = repo_id or f"your-username/{output_dir.resolve().name}"
    _prepare_output_dir(output_dir, overwrite)

    with _registered_for_auto_classes(model, kind.auto_class):
        model.save_pretrained(output_dir)
    saved_limit = tokenizer.model_max_length
    try:  # the model's real limit, and no `local_files_only`, `max_length`, ... left from loading or calls
        save_tokenizer(match_model_max_length(tokenizer, model.config), output_dir)
    finally:
        tokenizer.model_max_length = saved_limit  # the caller's tokenizer is left as it was
    if not (output_dir / "generation_config.json").is_file():
        model.generation_config.save_pretrained(output_dir)

    config = json.loads((output_dir / "config.json").read_text())
    auto_map = config.get("auto_map", {})
    for auto_class in ("AutoConfig", kind.auto_class):
        if auto_class not in auto_map:
            raise RuntimeError(f"config.json auto_map lacks {auto_class}: {auto_map}")
    if kind is TRANSLATOR and "translation" not in (config.get("custom_pipelines") or {}):
        raise RuntimeError("the translator's config.json has no custom_pipelines['translation']")
    check_remote_code(output_dir)
    check_no_pickles(output_dir)

    figure_paths: list[str] = []
    for figure in figures:
        if f"figures/{figure.name}" in figure_paths:
            continue  # the run's curves, also passed as a figure
        (output_dir / "figures").mkdir(exist_ok=True)
        shutil.copy2(figure, output_dir / "figures" / figure.name)
        figure_paths.append(f"figures/{figure.name}")

    card = build_model_card(
        kind,
        model_name=model_name or repo_id.split("/")[-1],
        repo_id=repo_id,
        metrics=metrics,
        sacrebleu_signature=sacrebleu_signature,
        datasets=datasets,
        eval_dataset=eval_dataset,
        tags=tags,
        architecture=_architecture(model.config),
        generation=_generation_defaults(output_dir),
        num_parameters=model.num_parameters(),
        training_args=training_args,
        recipe=from_run.recipe if from_run else None,
        training_args_source=from_run.training_args_source if from_run else None,
        notes=from_run.notes if from_run else None,
        figures=figure_paths,
        description=description,
    )
    card.save(output_dir / "README.md")
    logger.info("exported %s (%s) to %s", type(model).__name__, kind.pipeline_tag, output_dir)
    return output_dir


def load_for_export(
    model_dir: str | Path, tokenizer_dir: str | Path | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a saved nanoformer model (encoder–decoder or causal LM, by its config) and its tokenizer with
    nanoformer's own classes, never the folder's copied code (`trust_remote_code=False`)."""
    import nanoformer.modeling  # noqa: F401  (registers the nanoformer classes with the Auto classes)
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    config = AutoConfig.from_pretrained(model_dir, trust_remote_code=False)
    auto_model = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
    model = auto_model.from_pretrained(model_dir, trust_remote_code=False)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir or model_dir, trust_remote_code=False)
    return model, tokenizer


def export_run(
    run_dir: str | Path,
    output_dir: str | Path,
    *,
    tokenizer_dir: str | Path | None = None,
    **card: Any,
) -> Path:
    """Export the model a trainer saved in `run_dir` (its ``--output_dir``, or an `average_checkpoints` output)
    with the card built from the run; `card`: more `export_for_hub` arguments (`repo_id`, `metrics`, `overwrite`…).

        export_run("out/tatoeba", "out/tatoeba-hub", repo_id="you/nanoformer-en-zh")
    """
    run_dir = Path(run_dir)
    if not (run_dir / "config.json").is_file():
        raise FileNotFoundError(f"{run_dir} holds no saved model (config.json); pass a trainer's --output_dir")
    check_output_dir(output_dir, bool(card.get("overwrite")))  # before loading the model
    model, tokenizer = load_for_export(run_dir, tokenizer_dir)
    return export_for_hub(model, tokenizer, output_dir, run_dir=run_dir, **card)

"""Translation evaluation shared by `train_mt.py` and `score_mt.py`: batched decoding, sacreBLEU, validation loss.

BLEU goes through `evaluate` with the metric module this package ships (`metrics/sacrebleu_zh.py`, loaded by path, so
it works offline); it wraps `sacrebleu` with the ``zh`` tokenizer and returns the sacreBLEU signature with the score.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from accelerate.logging import get_logger
from nanoformer.modeling import decoding_budget, encode_sources

logger = get_logger(__name__)  # logs on the main process only
SACREBLEU_METRIC_PATH = str(Path(__file__).resolve().parent / "metrics" / "sacrebleu_zh.py")
ZH_SCRIPTS = ("as-is", "simplified", "traditional")


def zh_script_converter(zh_script: str) -> Callable[[str], str] | None:
    """An OpenCC converter for ``--zh_script``: "simplified" (t2s), "traditional" (s2t) or None for "as-is"."""
    if zh_script not in ZH_SCRIPTS:
        raise ValueError(f"--zh_script must be one of {ZH_SCRIPTS}, got {zh_script!r}")
    if zh_script == "as-is":
        return None
    import opencc

    return opencc.OpenCC("t2s" if zh_script == "simplified" else "s2t").convert


def load_bleu_metric():
    """The shipped sacreBLEU metric as an `evaluate` module (loaded from its file path: no network needed)."""
    import evaluate

    return evaluate.load(SACREBLEU_METRIC_PATH)


def compute_bleu(
    hypotheses: Sequence[str], references: Sequence[str], *, tokenize: str = "zh", chrf: bool = False
) -> dict[str, Any]:
    """Corpus BLEU (and chrF with ``chrf=True``) of `hypotheses` against one reference each, with the signature."""
    metric = load_bleu_metric()
    return metric.compute(
        predictions=list(hypotheses), references=[[r] for r in references], tokenize=tokenize, chrf=chrf
    )


def position_limit(model) -> int | None:
    """The longest sequence the model's position table takes (`max_position_embeddings`), or None."""
    return getattr(model.config, "max_position_embeddings", None)


@torch.no_grad()
def translate(
    model,
    tokenizer,
    sources: Sequence[str],
    *,
    num_beams: int | None = 4,
    batch_size: int = 64,
    max_source_length: int | None = None,
    max_target_length: int | None = None,
    device: torch.device | str | None = None,
    counters: Counter | None = None,
) -> list[str]:
    """Translate `sources` in batches of similar length (sorted, then restored to the input order).

    The translator's length rule (`nanoformer.modeling.encode_sources` / `decoding_budget`, the ones `generate()`
    uses): sources are cut to `max_source_length` tokens, never more than the model's position table holds, and
    ``counters["truncated_sources"]`` counts the cut ones; each batch decodes at most ``source length + 50`` new
    tokens, capped to fit the position table and at `max_target_length`. So no input line can make decoding fail.
    `num_beams` None: the model's generation config decides.
    """
    if not sources:
        return []
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    positions = position_limit(model)
    limits = [n for n in (max_source_length, positions) if n is not None]
    encoded, n_cut = encode_sources(tokenizer, list(sources), min(limits) if limits else None)
    if counters is not None:
        counters["truncated_sources"] += n_cut
    order = sorted(range(len(sources)), key=lambda i: len(encoded[i]))
    outputs: list[str] = [""] * len(sources)
    beams = {} if num_beams is None else {"num_beams": num_beams}
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        batch = tokenizer.pad({"input_ids": [encoded[i] for i in idx]}, return_tensors="pt").to(device)
        max_new = decoding_budget(batch["input_ids"].shape[1], positions)
        if max_target_length is not None:
            max_new = min(max_new, max_target_length)
        generated = model.generate(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            max_new_tokens=max_new,
            do_sample=False,
            **beams,
        )
        for i, text in zip(idx, tokenizer.batch_decode(generated, skip_special_tokens=True)):
            outputs[i] = text.strip()
    model.train(was_training)
    return outputs


@torch.no_grad()
def nll_sums(model, batch: dict[str, torch.Tensor]) -> tuple[float, int]:
    """Summed (not label-smoothed) negative log-likelihood of a batch's labels, and the number of label tokens."""
    labels = batch["labels"]
    unwrapped = getattr(model, "module", model)
    decoder_input_ids = unwrapped.prepare_decoder_input_ids_from_labels(labels)
    logits = model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=decoder_input_ids
    ).logits
    loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100, reduction="sum")
    return float(loss), int(labels.ne(-100).sum())


def perplexity(loss: float) -> float:
    """exp(loss), inf on overflow."""
    try:
        return math.exp(loss)
    except OverflowError:
        return float("inf")


def _gather_objects(accelerator, items: list) -> list:
    if accelerator.num_processes == 1:
        return items
    from accelerate.utils import gather_object

    return gather_object(items)


def evaluate_translation(
    accelerator,
    model,
    tokenizer,
    pairs: Sequence[tuple[str, str]],
    batches: Sequence[dict[str, torch.Tensor]],
    *,
    with_bleu: bool,
    num_beams: int = 4,
    batch_size: int = 64,
    max_source_length: int | None = None,
    max_target_length: int | None = None,
    num_samples: int = 0,
) -> dict[str, Any]:
    """Validation loss/perplexity (plain NLL over `batches`) and, with `with_bleu`, sacreBLEU of beam search over
    `pairs`, both shared out across processes; `num_samples` sample translations are returned with them."""
    model.eval()
    rank, world = accelerator.process_index, accelerator.num_processes
    monitor = hasattr(model, "set_attention_logit_monitor")
    if monitor:
        model.set_attention_logit_monitor(True)
    loss_sum, n_tokens = 0.0, 0
    for batch in batches[rank::world]:
        with accelerator.autocast():
            s, n = nll_sums(model, {k: v.to(accelerator.device) for k, v in batch.items()})
        loss_sum, n_tokens = loss_sum + s, n_tokens + n
    results: dict[str, Any] = {}
    if monitor:
        stats = model.attention_logit_stats()
        model.set_attention_logit_monitor(False)
        if stats:
            results["attn_logit_max"] = max(float(v.max()) for v in stats.values())
            results["attn_logit_max_per_layer"] = {k: round(float(v.max()), 2) for k, v in stats.items()}
    totals = accelerator.reduce(torch.tensor([loss_sum, n_tokens], dtype=torch.float64, device=accelerator.device))
    results["eval_loss"] = float(totals[0] / totals[1]) if totals[1] > 0 else float("nan")
    results["eval_ppl"] = perplexity(results["eval_loss"])
    if with_bleu:
        mine = list(range(rank, len(pairs), world))
        cut: Counter = Counter()
        with accelerator.autocast():
            hyps = translate(
                model,
                tokenizer,
                [pairs[i][0] for i in mine],
                num_beams=num_beams,
                batch_size=batch_size,
                max_source_length=max_source_length,
                max_target_length=max_target_length,
                counters=cut,
            )
        hypotheses = [h for _, h in sorted(_gather_objects(accelerator, list(zip(mine, hyps))))]
        truncated = int(accelerator.reduce(torch.tensor(cut["truncated_sources"], device=accelerator.device), "sum"))
        if truncated:  # reported only when it happens: most validation sets have no source that long
            results["eval_truncated_sources"] = truncated
            logger.warning(f"evaluation: {truncated} source(s) longer than the length limit were truncated")
        bleu = compute_bleu(hypotheses, [t for _, t in pairs])
        results["eval_bleu"] = bleu["score"]
        results["bleu_signature"] = bleu["signature"]
        results["samples"] = [
            {"source": pairs[i][0], "reference": pairs[i][1], "hypothesis": hypotheses[i]}
            for i in range(min(num_samples, len(pairs)))
        ]
    model.train()
    return results


def make_evaluate(args, accelerator, tokenizer, pairs, batches, state):
    """``evaluate(model, step, counters=None, with_bleu=True) -> results``: validation loss (and BLEU), logged to the
    console, the trackers and ``state.history`` (`state`: the trainer's `LoopState`)."""
    from nanoformer.training.data import describe_counters, reduce_counters, skipped_rows

    def evaluate(model, step: int, counters=None, with_bleu: bool = True) -> dict:
        results = evaluate_translation(
            accelerator, accelerator.unwrap_model(model), tokenizer, pairs, batches, with_bleu=with_bleu,
            num_beams=args.num_beams, batch_size=args.per_device_eval_batch_size,
            max_source_length=args.max_source_length, max_target_length=args.max_target_length,
            num_samples=args.num_sample_translations,
        )  # fmt: skip
        counters = reduce_counters(accelerator, counters or {})
        record = {"step": step, **{k: v for k, v in results.items() if isinstance(v, float | int)}}
        record["skipped_rows"] = skipped_rows(counters)
        state.history.append(record)
        msg = f"eval step {step}: loss {results['eval_loss']:.4f} ppl {results['eval_ppl']:.2f}"
        if "eval_bleu" in results:
            msg += f" BLEU {results['eval_bleu']:.2f} ({results['bleu_signature']}, {len(pairs)} pairs)"
        logger.info(f"{msg}; data: {describe_counters(counters)}")
        if "attn_logit_max_per_layer" in results:
            logger.info(f"attention logit max |QK^T/sqrt(d)| per module: {results['attn_logit_max_per_layer']}")
        for sample in results.get("samples", []):
            logger.info(f"  src: {sample['source']}\n  ref: {sample['reference']}\n  hyp: {sample['hypothesis']}")
        if args.with_tracking:
            accelerator.log({f"eval/{k}": v for k, v in record.items() if k != "step"}, step=step)
        return results

    return evaluate

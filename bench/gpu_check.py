"""GPU check (issue 14): the speed figures a CPU cannot give, measured in one short run on one CUDA GPU.

Run it through `bash bench/gpu_check.sh` (it makes nanoformer importable from this checkout, installs carried wheels
and time-boxes the whole run); `bash bench/gpu_check.sh --smoke` runs the same code on the CPU with tiny sizes.

Sections, in this order (the two open targets first), each time-boxed, each written to disk as soon as it ends:
* lm_train: NanoGPT vs GPT2LMHeadModel (exact GELU; "gpt2-stock": tanh GELU) and NanoGPT LLaMA-style vs
  LlamaForCausalLM, training tokens/s (fwd + bwd + AdamW) at nanoGPT's GPU recipe size (n_layer 6, n_head 6,
  n_embd 384, block 256, batch 64, vocab 65), fp32 and bf16 autocast;
* lm_compiled: NanoGPT and GPT2LMHeadModel under bf16 autocast + torch.compile, with both eager bf16 models in the
  same rounds;
* mt_decode: the translator at Transformer-base size (d_model 512, 8 heads, FFN 2048, 6+6 layers, vocab 37000),
  `generate()` with exactly 32 new tokens: greedy at batch 32, beam 4 at batch 1 and 32; ours with and without the
  KV cache, MarianMTModel with it; fp32 and bf16 autocast;
* mt_train: translator vs MarianMTModel training target tokens/s at Transformer-base size, bf16 autocast, batches of
  ~25k target tokens (390 x 64, source 64);
* lm_compiled_llama: the LLaMA-style pair under bf16 + torch.compile, only when time is left.
Every contestant is also run once more (untimed) under the profiler: which SDPA kernel ran (the aten op names, and
kernel names on CUDA) and its peak memory (own weights and AdamW state + the run's extra peak over what was already
allocated). A few eager contestants are also run with each `torch.nn.attention.sdpa_kernel` backend alone.

Timing: medians over interleaved rounds (bench/timing.py), device synchronised around each timed run. Results go to
OUT_DIR/gpu_check.json (figures, ratios, targets, section status) and OUT_DIR/gpu_check.md (the table), and also
to $OUT when that is set (the device machine's carry-back folder).
"""

import argparse
import gc
import json
import math
import os
import platform
import signal
import sys
import time
import traceback
import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
NANOGPT_TARGET, CACHE_TARGET = 1.5, 2.5
T0 = time.perf_counter()


def log(message: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f}s] {message}", flush=True)


# ---------------------------------------------------------------------------------------------------- the plan


@dataclass
class Plan:
    """Everything that differs between the GPU run and the CPU smoke run (sizes, rounds, time budgets)."""

    mode: str
    device: str
    lm_size: object
    mt_size: object
    lm_rounds: int = 5
    lm_steps: int = 10
    mt_rounds: int = 3
    mt_steps: int = 3
    mt_batch: int = 390
    mt_src_len: int = 64
    mt_tgt_len: int = 64
    dec_rounds: int = 3
    dec_new_tokens: int = 32
    greedy_batch: int = 32
    beam_batches: tuple = (1, 32)
    dec_precisions: tuple = ("fp32", "bf16")
    compile_backend: str = "inductor"
    total_budget_s: float = 440.0
    # per section: (time box, least time worth starting it with)
    budgets: dict = field(
        default_factory=lambda: {
            "lm_train": (75, 20),
            "lm_compiled": (180, 60),
            "mt_decode": (90, 30),
            "mt_train": (60, 20),
            "lm_compiled_llama": (150, 90),
        }
    )


def make_plan(smoke: bool, budget: float | None) -> Plan:
    from bench_lm import GPU_RECIPE, LMSize
    from bench_translator import BASE, MTSize

    if not smoke:
        plan = Plan(mode="gpu", device="cuda", lm_size=GPU_RECIPE, mt_size=BASE, lm_steps=20)
    else:
        plan = Plan(
            mode="smoke", device="cpu",
            lm_size=LMSize(n_layer=2, n_head=2, n_embd=32, block=32, batch=4),
            mt_size=MTSize(vocab=512, d_model=32, heads=2, ffn=64, layers=2),
            lm_rounds=2, lm_steps=1, mt_rounds=2, mt_steps=1, mt_batch=8, mt_src_len=12, mt_tgt_len=12,
            dec_rounds=2, dec_new_tokens=3, greedy_batch=4, beam_batches=(1, 2),
            compile_backend="eager",  # dynamo traces the same graphs; inductor's C++ build would take minutes here
            total_budget_s=240.0,
            budgets={name: (60, 5) for name in ("lm_train", "lm_compiled", "mt_decode", "mt_train", "lm_compiled_llama")},
        )  # fmt: skip
    if budget is not None:
        plan.total_budget_s = budget
    return plan


# ---------------------------------------------------------------------------------------------------- time boxes


class SectionTimeout(Exception):
    """A section's time box ran out (the section stops; what it measured so far is kept)."""


class ContestantTimeout(Exception):
    """One contestant's build cap ran out (that contestant is left out; the section goes on)."""


@contextmanager
def time_box(seconds: float, error: type = SectionTimeout):
    """Raise `error` in the main thread after `seconds` (a long C call is interrupted when it returns).

    Boxes nest: an inner box never outlasts the outer one, raises the outer's SectionTimeout when the outer limit is
    the one that runs out, and gives the outer box back its remaining time when it ends.
    """
    outer_left = signal.getitimer(signal.ITIMER_REAL)[0]
    limit = seconds if not outer_left else min(seconds, outer_left)
    raised = error if not outer_left or seconds < outer_left else SectionTimeout

    def expire(signum, frame):
        raise raised(f"timed out after {limit:.3g}s")

    start = time.monotonic()
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(limit, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_left:
            left = outer_left - (time.monotonic() - start)
            if left > 0.05:
                signal.setitimer(signal.ITIMER_REAL, left)
            elif sys.exc_info()[0] is None:
                raise SectionTimeout("timed out")


def release_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------------- inspection

SDPA_OPS = {  # substring of an aten op name -> kernel
    "flash_attention_for_cpu": "flash (cpu)",
    "flash_attention": "flash",
    "efficient_attention": "efficient",
    "cudnn_attention": "cudnn",
    "attention_math": "math",
    "fused_attention_overrideable": "overrideable",
}


def sdpa_kernels(event_names: set[str]) -> list[str]:
    """Which SDPA kernels ran, from profiler event names: aten ops first, CUDA kernel names as a fallback."""
    found = set()
    for name in event_names:
        if name.startswith("aten::"):
            for key, kernel in SDPA_OPS.items():
                if key in name:
                    found.add(kernel)
                    break
    if not found:
        for name in event_names:
            lowered = name.lower()
            if "flash_fwd" in lowered or "flash_bwd" in lowered or "pytorch_flash" in lowered:
                found.add("flash")
            elif "fmha_cutlass" in lowered or "efficient_attention" in lowered:
                found.add("efficient")
            elif "cudnn" in lowered and ("sdpa" in lowered or "fmha" in lowered):
                found.add("cudnn")
    return sorted(found) or ["none (no SDPA call)"]


def own_bytes(contestant) -> int:
    """Bytes of the contestant's weights and (for trainers) AdamW state."""
    tensors = list(contestant.model.parameters())
    optimizer = getattr(contestant, "optimizer", None)
    if optimizer is not None:
        tensors += [t for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t)]
    return sum(t.numel() * t.element_size() for t in tensors)


def once(contestant) -> None:
    """One untimed unit of work: a training step or a generate() call."""
    if hasattr(contestant, "step"):
        contestant.step()
    else:
        contestant.run()


def inspect(contestant, device: torch.device) -> dict:
    """Run `once` under the profiler: SDPA kernels seen, and (on CUDA) peak memory in MiB."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    with profile(activities=activities) as prof:
        once(contestant)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    out = {"sdpa": sdpa_kernels({event.name for event in prof.events()})}
    if device.type == "cuda":
        extra = torch.cuda.max_memory_allocated(device) - before
        out["peak_mib"] = round((extra + own_bytes(contestant)) / 2**20, 1)
    return out


def try_backends(contestant) -> dict[str, str]:
    """Run `once` with each SDPA backend alone: "ok", or "no: <reason>"."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    results = {}
    for label in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"):
        backend = getattr(SDPBackend, label, None)
        if backend is None:
            results[label] = "no: not in this torch"
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with sdpa_kernel(backend):
                    once(contestant)
                results[label] = "ok"
            except SectionTimeout:
                raise
            except Exception as error:  # noqa: BLE001 - recorded, not raised
                # CUDA warns why each kernel was refused ("... kernel not used because:", then the reasons)
                reasons = [str(w.message).strip().splitlines()[0] for w in caught]
                reason = "; ".join(dict.fromkeys(r for r in reasons if r)) or str(error).splitlines()[0]
                if reason.startswith("No viable backend"):
                    reason = "no viable kernel for these inputs"
                results[label] = f"no: {reason[:240]}"
        optimizer = getattr(contestant, "optimizer", None)
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
    return results


# ---------------------------------------------------------------------------------------------------- the report


class Report:
    """Results so far; `write()` renders the JSON and the Markdown table into every output folder."""

    def __init__(self, out_dirs: list[Path], plan: Plan):
        self.out_dirs = out_dirs
        self.plan = plan
        self.data = {"meta": {}, "sections": {}, "results": {}, "backends": {}, "ratios": {}, "targets": {}}

    def entry(self, section: str, name: str) -> dict:
        return self.data["results"].setdefault(section, {}).setdefault(name, {})

    def value(self, section: str, name: str) -> float | None:
        return self.data["results"].get(section, {}).get(name, {}).get("value")

    def write(self) -> None:
        self.data["meta"]["wall_s"] = round(time.perf_counter() - T0, 1)
        self.data["ratios"] = compute_ratios(self)
        self.data["targets"] = compute_targets(self.data["ratios"], self.plan)
        text = json.dumps(self.data, indent=2, default=str)
        table = render(self)
        for folder in self.out_dirs:
            folder.mkdir(parents=True, exist_ok=True)
            for filename, content in (("gpu_check.json", text), ("gpu_check.md", table)):
                tmp = folder / f".{filename}.tmp"
                tmp.write_text(content)
                os.replace(tmp, folder / filename)


def ratio(report: Report, section_a: str, a: str, section_b: str, b: str) -> float | None:
    x, y = report.value(section_a, a), report.value(section_b, b)
    return round(x / y, 3) if x and y else None


def compute_ratios(report: Report) -> dict[str, float]:
    r = {}
    for precision in ("fp32", "bf16"):
        for ours, peer in (("nanogpt", "gpt2"), ("nanogpt", "gpt2-stock"), ("nanogpt-llama", "llama")):
            r[f"train {ours}/{peer} {precision}"] = ratio(
                report, "lm_train", f"{ours} {precision}", "lm_train", f"{peer} {precision}"
            )
    r["train nanogpt bf16 / nanogpt fp32"] = ratio(report, "lm_train", "nanogpt bf16", "lm_train", "nanogpt fp32")
    r["train gpt2 bf16 / gpt2 fp32"] = ratio(report, "lm_train", "gpt2 bf16", "lm_train", "gpt2 fp32")
    for section, ours, peer in (("lm_compiled", "nanogpt", "gpt2"), ("lm_compiled_llama", "nanogpt-llama", "llama")):
        c = "bf16+compile"
        r[f"train {ours}/{peer} {c}"] = ratio(report, section, f"{ours} {c}", section, f"{peer} {c}")
        r[f"train {ours} {c} / {peer} bf16"] = ratio(report, section, f"{ours} {c}", section, f"{peer} bf16")
        r[f"train {ours}/{peer} bf16 (same rounds)"] = ratio(report, section, f"{ours} bf16", section, f"{peer} bf16")
        for name in (ours, peer):
            r[f"train {name} {c} / {name} bf16"] = ratio(report, section, f"{name} {c}", section, f"{name} bf16")
    r["mt train ours/marian bf16"] = ratio(report, "mt_train", "ours bf16", "mt_train", "marian bf16")
    for setting in decode_settings(report.plan):
        for precision in report.plan.dec_precisions:
            key = f"{setting} {precision}"
            r[f"mt {key} cache/no-cache"] = ratio(
                report, "mt_decode", f"{setting} ours {precision}", "mt_decode", f"{setting} ours-nocache {precision}"
            )
            r[f"mt {key} ours/marian"] = ratio(
                report, "mt_decode", f"{setting} ours {precision}", "mt_decode", f"{setting} marian {precision}"
            )
    return {key: value for key, value in r.items() if value is not None}


def compute_targets(ratios: dict[str, float], plan: Plan) -> dict:
    """The two open targets; each is met when any of its counted rows reaches the bar."""

    def target(bar: float, counted: dict[str, str], info: dict[str, str], rule: str) -> dict:
        rows = [
            {"label": label, "key": key, "ratio": ratios.get(key), "counted": True,
             "met": None if ratios.get(key) is None else ratios[key] >= bar}
            for key, label in counted.items()
        ] + [{"label": label, "key": key, "ratio": ratios.get(key), "counted": False, "met": None}
             for key, label in info.items()]  # fmt: skip
        measured = [row for row in rows if row["counted"] and row["ratio"] is not None]
        met = None if not measured else any(row["met"] for row in measured)
        return {"bar": bar, "rule": rule, "met": met, "rows": rows}

    beam_rows = {
        f"mt {setting} {precision} cache/no-cache": f"{setting}, {precision}"
        for setting in decode_settings(plan)
        if setting.startswith("beam4")
        for precision in plan.dec_precisions
    }
    return {
        "nanogpt_vs_gpt2": target(
            NANOGPT_TARGET,
            {
                "train nanogpt/gpt2 bf16": "bf16 autocast, both eager",
                "train nanogpt/gpt2 bf16+compile": "bf16 autocast + torch.compile, both compiled",
            },
            {
                "train nanogpt bf16+compile / gpt2 bf16": "NanoGPT compiled vs GPT-2 eager, bf16 (info)",
                "train nanogpt/gpt2 fp32": "fp32, both eager (info)",
            },
            "NanoGPT training tokens/s over GPT2LMHeadModel's, like for like (same precision, both eager or both "
            "compiled); met if bf16 or bf16+compile reaches the bar",
        ),
        "translator_cache_beam4": target(
            CACHE_TARGET,
            beam_rows,
            {
                f"mt greedy b{plan.greedy_batch} {precision} cache/no-cache": f"greedy b{plan.greedy_batch}, {precision} (info)"
                for precision in plan.dec_precisions
            },
            "translator beam-4 new tokens/s with the KV cache over use_cache=False; met if any beam-4 row reaches the bar",
        ),
    }


def decode_settings(plan: Plan) -> dict[str, tuple[int, int]]:
    settings = {f"greedy b{plan.greedy_batch}": (plan.greedy_batch, 1)}
    settings.update({f"beam4 b{batch}": (batch, 4) for batch in plan.beam_batches})
    return settings


def fmt(value, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float) and value >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


TITLES = {
    "nanogpt_vs_gpt2": "NanoGPT training vs GPT2LMHeadModel",
    "translator_cache_beam4": "Translator cached vs uncached beam-4",
}


def targets_table(report: Report) -> list[str]:
    """The two open targets, each counted row marked met / not met, then one verdict line per target."""
    lines = [
        "## Open targets",
        "",
        "| target | measured as | ratio | needed | status |",
        "| --- | --- | --- | --- | --- |",
    ]
    smoke = report.plan.mode == "smoke"
    for key, target in report.data["targets"].items():
        for row in target["rows"]:
            if not row["counted"]:
                status = "info"
            elif row["met"] is None:
                status = "not measured"
            elif smoke:
                status = "(smoke: no verdict)"
            else:
                status = "**met**" if row["met"] else "not met"
            bar = f"≥ {target['bar']}" if row["counted"] else ""
            lines.append(f"| {TITLES[key]} | {row['label']} | {fmt(row['ratio'])} | {bar} | {status} |")
    lines.append("")
    for key, target in report.data["targets"].items():
        verdict = "not measured" if target["met"] is None else ("MET" if target["met"] else "NOT MET")
        verdict = "no verdict from a smoke run" if smoke else verdict
        lines.append(f"- **{TITLES[key]}: {verdict}** (rule: {target['rule']}).")
    return lines


def sections_table(report: Report) -> list[str]:
    lines = ["## Sections", "", "| section | status | seconds | note |", "| --- | --- | --- | --- |"]
    for section, s in report.data["sections"].items():
        lines.append(f"| {section} | {s.get('status')} | {fmt(s.get('seconds'), 1)} | {s.get('error', '')} |")
    return lines


def render(report: Report) -> str:
    d, plan = report.data, report.plan
    meta = d["meta"]
    lines = [
        f"# GPU check ({plan.mode})",
        "",
        f"{meta.get('device_name', '?')} · torch {meta.get('torch', '?')} · transformers {meta.get('transformers', '?')}"
        f" · CUDA {meta.get('cuda', '—')} · {meta.get('started_utc', '?')} · {meta.get('wall_s', '?')} s wall."
        " Ratios are of medians over interleaved rounds measured in this run."
        + (" **Smoke run: tiny models on the CPU, a check of the code path; its figures mean nothing.**"
           if plan.mode == "smoke" else ""),
        "",
        *targets_table(report),
    ]  # fmt: skip
    units = {
        "lm_train": "training tokens/s (fwd + bwd + AdamW)",
        "lm_compiled": "training tokens/s (fwd + bwd + AdamW)",
        "lm_compiled_llama": "training tokens/s (fwd + bwd + AdamW)",
        "mt_train": "training target tokens/s (fwd + bwd + AdamW)",
        "mt_decode": "new tokens/s of generate()",
    }
    for section, entries in d["results"].items():
        lines += [
            "",
            f"## {section}: {units.get(section, '')}",
            "",
            d["sections"].get(section, {}).get("about", ""),
            "",
        ]
        lines += [
            "| contestant | value | peak MiB | SDPA kernel | setup s | note |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for name, e in entries.items():
            note = e.get("error", "")
            lines.append(
                f"| {name} | {fmt(e.get('value'))} | {fmt(e.get('peak_mib'), 0)} | {', '.join(e.get('sdpa', [])) or '—'}"
                f" | {fmt(e.get('setup_s'), 1)} | {note} |"
            )
    if d["backends"]:
        lines += ["", "## SDPA backends tried alone (one untimed run each)", ""]
        lines += ["| contestant | flash | efficient | cudnn | math |", "| --- | --- | --- | --- | --- |"]
        for name, tries in d["backends"].items():
            cells = [tries.get(k, "—") for k in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")]
            lines.append(f"| {name} | " + " | ".join(cell.replace("|", "/") for cell in cells) + " |")
    lines += ["", "## All ratios", "", "| ratio | value |", "| --- | --- |"]
    lines += [f"| {key} | {value:.2f} |" for key, value in d["ratios"].items()]
    lines += ["", *sections_table(report)]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------- races


def race(
    report: Report, section: str, builders: dict, rounds: int, measure, device: torch.device, backends=(),
    build_cap: float | None = None,
):  # fmt: skip
    """Build each contestant, time them in interleaved rounds, then inspect each once (kernels, memory).

    A contestant that fails, or whose build (with its warm-up: compilation) outlasts `build_cap` seconds, is recorded
    and left out; a time-out of the section keeps every measurement completed so far.
    """
    from timing import interleaved, medians

    contestants, samples, broken = {}, {}, set()
    try:
        for name, make in builders.items():
            entry = report.entry(section, name)
            start = time.perf_counter()
            try:
                with time_box(build_cap or 1e6, ContestantTimeout):
                    contestants[name] = make()
            except SectionTimeout:
                entry["error"] = "build timed out"
                raise
            except Exception as error:  # noqa: BLE001 - recorded, the others still run
                entry["error"] = f"build failed: {type(error).__name__}: {str(error).splitlines()[0][:200]}"
                log(f"  {name}: {entry['error']}")
                release_memory(device)
                continue
            entry["setup_s"] = round(time.perf_counter() - start, 2)
            log(f"  built {name} ({entry['setup_s']:.1f}s incl. warm-up)")

        def guarded(name):
            if name in broken:
                return float("nan")
            try:
                return measure(contestants[name])
            except SectionTimeout:
                raise
            except Exception as error:  # noqa: BLE001
                broken.add(name)
                report.entry(section, name)["error"] = f"run failed: {type(error).__name__}: {str(error)[:200]}"
                return float("nan")

        log(f"  timing {len(contestants)} contestants, {rounds} interleaved rounds")
        interleaved({name: name for name in contestants}, rounds, guarded, samples)
    finally:
        clean = {name: [v for v in values if not math.isnan(v)] for name, values in samples.items()}
        for name, value in medians(clean).items():
            entry = report.entry(section, name)
            entry["value"] = round(value, 2)
            entry["samples"] = [round(v, 2) for v in clean[name]]
            log(f"  {name:32s} {value:12,.1f}")
    for name, contestant in contestants.items():
        if name in broken:
            continue
        entry = report.entry(section, name)
        try:
            entry.update(inspect(contestant, device))
        except SectionTimeout:
            raise
        except Exception as error:  # noqa: BLE001
            entry["sdpa"] = [f"profiler failed: {type(error).__name__}"]
    for name in backends:
        if name in contestants and name not in broken:
            report.data["backends"][f"{section}: {name}"] = try_backends(contestants[name])
            log(f"  backends alone, {name}: {report.data['backends'][f'{section}: {name}']}")
    return contestants


def lm_section(report: Report, section: str, specs: list[tuple[str, str]], rounds: int, steps: int, backends=()):
    """LM training contestants; a compiled one may take at most 45% of the section's time box to build."""
    from bench_lm import Trainer

    plan, device = report.plan, torch.device(report.plan.device)

    def builder(model, mode):
        compiled = mode.endswith("+compile")
        precision = mode.split("+")[0]
        return lambda: Trainer(
            model, precision, compile_model=compiled, size=plan.lm_size, device=plan.device,
            compile_backend=plan.compile_backend,
        )  # fmt: skip

    builders = {f"{model} {mode}": builder(model, mode) for model, mode in specs}
    cap = 0.45 * plan.budgets[section][0] if any(mode.endswith("+compile") for _, mode in specs) else None
    try:
        race(report, section, builders, rounds, lambda trainer: trainer.run(steps), device, backends, cap)
    finally:
        if any(mode.endswith("+compile") for _, mode in specs):
            torch._dynamo.reset()
        release_memory(device)


def sec_lm_train(report: Report) -> None:
    from bench_lm import MODELS

    specs = [(model, precision) for precision in ("fp32", "bf16") for model in MODELS]
    lm_section(report, "lm_train", specs, report.plan.lm_rounds, report.plan.lm_steps, ("nanogpt bf16", "gpt2 bf16"))


def sec_lm_compiled(report: Report, pair=("nanogpt", "gpt2"), section="lm_compiled") -> None:
    specs = [(model, "bf16+compile") for model in pair] + [(model, "bf16") for model in pair]
    lm_section(report, section, specs, report.plan.lm_rounds, report.plan.lm_steps)


def sec_lm_compiled_llama(report: Report) -> None:
    sec_lm_compiled(report, ("nanogpt-llama", "llama"), "lm_compiled_llama")


def sec_mt_train(report: Report) -> None:
    from bench_translator import Trainer

    plan, device = report.plan, torch.device(report.plan.device)
    builders = {
        f"{name} bf16": (
            lambda name=name: Trainer(
                name, "bf16", plan.mt_batch, plan.mt_src_len, plan.mt_tgt_len, size=plan.mt_size, device=plan.device
            )
        )
        for name in ("ours", "marian")
    }
    try:
        race(report, "mt_train", builders, plan.mt_rounds, lambda t: t.run(plan.mt_steps), device, list(builders))
    finally:
        release_memory(device)


def sec_mt_decode(report: Report) -> None:
    from bench_translator import Decoder, build

    plan, device = report.plan, torch.device(report.plan.device)
    models = {name: build(name, plan.mt_size).eval().to(device) for name in ("ours", "marian")}
    try:
        for setting, (batch, beams) in decode_settings(plan).items():
            log(f" {setting}")
            builders = {}
            for precision in plan.dec_precisions:
                for label, model, cache in (("ours", "ours", True), ("ours-nocache", "ours", False),
                                            ("marian", "marian", True)):  # fmt: skip
                    builders[f"{setting} {label} {precision}"] = (
                        lambda model=model, precision=precision, cache=cache, batch=batch, beams=beams: Decoder(
                            model, precision, batch, beams, cache, plan.dec_new_tokens, size=plan.mt_size,
                            device=plan.device, model=models[model],
                        )
                    )  # fmt: skip
            backends = [f"{setting} ours bf16"] if setting == f"beam4 b{plan.beam_batches[0]}" else []
            race(report, "mt_decode", builders, plan.dec_rounds, lambda decoder: decoder.run(), device, backends)
            report.write()
    finally:
        models.clear()
        release_memory(device)


SECTIONS = {
    "lm_train": (sec_lm_train, "NanoGPT vs GPT2LMHeadModel / LlamaForCausalLM, eager, fp32 and bf16 autocast."),
    "lm_compiled": (sec_lm_compiled, "bf16 autocast + torch.compile, with the eager bf16 pair in the same rounds."),
    "mt_decode": (sec_mt_decode, "generate() with exactly N new tokens; ours with and without the KV cache."),
    "mt_train": (sec_mt_train, "Translator vs MarianMTModel, bf16 autocast."),
    "lm_compiled_llama": (sec_lm_compiled_llama, "LLaMA-style pair, bf16 autocast + torch.compile (if time is left)."),
}


# ---------------------------------------------------------------------------------------------------- main


def environment(plan: Plan) -> dict:
    import transformers

    meta = {
        "mode": plan.mode,
        "started_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "argv": sys.argv[1:],
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "transformers_path": str(Path(transformers.__file__).parent),
        "cuda": torch.version.cuda,
        "plan": {
            key: (asdict(value) if hasattr(value, "__dataclass_fields__") else value)
            for key, value in vars(plan).items()
        },  # fmt: skip
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
    import nanoformer.modeling

    meta["nanoformer_modeling"] = str(Path(nanoformer.modeling.__file__).resolve().parent)
    if plan.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        meta.update(
            device_name=props.name, capability=f"{props.major}.{props.minor}", gpu_memory_gib=round(props.total_memory / 2**30, 1),
            multiprocessors=props.multi_processor_count, cudnn=torch.backends.cudnn.version(),
            sdpa_enabled={"flash": torch.backends.cuda.flash_sdp_enabled(),
                          "efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
                          "cudnn": torch.backends.cuda.cudnn_sdp_enabled(), "math": torch.backends.cuda.math_sdp_enabled()},
        )  # fmt: skip
    else:
        meta.update(device_name=f"CPU ({platform.machine()}, {torch.get_num_threads()} torch threads)")
    return meta


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny sizes, same code path (about a minute)")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "gpu_check"), help="output folder")
    parser.add_argument("--budget", type=float, default=None, help="total seconds for all sections (GPU: 440)")
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated subset, in this order")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (smoke default: 1)")
    args = parser.parse_args()

    if not args.smoke and not torch.cuda.is_available():
        print("gpu_check: no CUDA device is visible to torch; run with --smoke for the CPU check", file=sys.stderr)
        return 2
    try:  # transformers / nanoformer problems: one clear line, not a traceback
        import nanoformer.modeling  # noqa: F401
        from transformers.utils import logging
    except Exception as error:  # noqa: BLE001
        print(f"gpu_check: cannot import nanoformer.modeling: {type(error).__name__}: {error}", file=sys.stderr)
        return 3
    logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning)
    if args.smoke:
        torch.set_num_threads(args.threads or 1)  # steadiest on a CPU shared with other jobs
    elif args.threads:
        torch.set_num_threads(args.threads)

    plan = make_plan(args.smoke, args.budget)
    out_dirs = [Path(args.out)]
    if os.environ.get("OUT") and Path(os.environ["OUT"]).resolve() != Path(args.out).resolve():
        out_dirs.append(Path(os.environ["OUT"]))
    report = Report(out_dirs, plan)
    report.data["meta"] = environment(plan)
    meta = report.data["meta"]
    log(f"gpu_check {plan.mode}: {meta['device_name']}, torch {meta['torch']}, transformers {meta['transformers']}")
    log(f"nanoformer.modeling from {meta['nanoformer_modeling']}, transformers from {meta['transformers_path']}")
    log(f"writing to {', '.join(map(str, out_dirs))}")
    from packaging.version import Version

    if Version(meta["transformers"]) < Version("5.24"):
        log(
            "WARNING: transformers is older than nanoformer's pin (>=5.24): carry the wheel (bench/gpu_check.sh --help)"
        )
    if not meta["nanoformer_modeling"].startswith(str(REPO)):
        log(f"WARNING: nanoformer.modeling is not this checkout's ({REPO})")
    report.write()

    def on_term(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    deadline = T0 + plan.total_budget_s
    wanted = [name for name in args.sections.split(",") if name]
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        print(f"gpu_check: unknown sections {sorted(unknown)}; known: {list(SECTIONS)}", file=sys.stderr)
        return 2
    try:
        for name in wanted:
            function, about = SECTIONS[name]
            box, least = plan.budgets[name]
            left = deadline - time.perf_counter()
            status = report.data["sections"].setdefault(name, {"about": about})
            if left < least:
                status.update(status="skipped", error=f"{left:.0f}s of the {plan.total_budget_s:.0f}s budget left")
                log(f"== {name}: skipped ({status['error']})")
                continue
            box = min(box, left)
            log(f"== {name} (time box {box:.0f}s): {about}")
            start = time.perf_counter()
            try:
                with time_box(box):
                    function(report)
                status["status"] = "ok"
            except SectionTimeout as error:
                status.update(status="timed out", error=f"{error}; partial results kept")
            except Exception as error:  # noqa: BLE001 - the next section still runs
                status.update(status="failed", error=f"{type(error).__name__}: {str(error).splitlines()[0][:300]}")
                traceback.print_exc()
            release_memory(torch.device(plan.device))
            status["seconds"] = round(time.perf_counter() - start, 1)
            log(f"== {name}: {status['status']} in {status['seconds']:.0f}s {status.get('error', '')}")
            report.write()
    finally:
        report.write()
        # the full table, then the summary again: the device reply keeps only the output's last 12,000 characters
        print("\n" + render(report), flush=True)
        print("\n".join(["", *targets_table(report), "", *sections_table(report)]), flush=True)
    bad = [name for name, s in report.data["sections"].items() if s.get("status") not in ("ok", "skipped")]
    if bad:
        log(f"gpu_check: sections not ok: {', '.join(bad)} (partial results written)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

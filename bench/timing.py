"""Helpers shared by the benchmarks (imported as `from timing import interleaved` when a bench runs as a file)."""

import statistics
from collections.abc import Callable
from contextlib import nullcontext

import torch


def interleaved(contestants: dict, rounds: int, measure: Callable, samples: dict | None = None) -> dict[str, float]:
    """Median of `measure(contestant)` over `rounds`, visiting every contestant once per round (order rotates).

    Interleaving spreads the noise of a shared machine over all contestants instead of penalising whichever one
    happened to run during a busy spell. Pass a `samples` dict to keep the raw values as they come in (it is filled
    in place, name -> list), so a caller that is interrupted midway still has every completed measurement.
    """
    results = samples if samples is not None else {}
    for name in contestants:
        results.setdefault(name, [])
    names = list(contestants)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            results[name].append(measure(contestants[name]))
    return medians(results)


def medians(samples: dict[str, list[float]]) -> dict[str, float]:
    """Median of each non-empty list of samples."""
    return {name: statistics.median(values) for name, values in samples.items() if values}


def autocast(device: torch.device | str, precision: str):
    """bf16 autocast on `device`'s type for precision "bf16", nothing for "fp32"."""
    if precision == "bf16":
        return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    if precision == "fp32":
        return nullcontext()
    raise ValueError(f"precision must be fp32 or bf16, not {precision!r}")


def synchronize(device: torch.device | str) -> None:
    """Wait for queued device work (a no-op on the CPU), so a host clock read after it times the work itself."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)

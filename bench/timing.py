"""Timing helper shared by the benchmarks (imported as `from timing import interleaved` when a bench runs as a file)."""

import statistics
from collections.abc import Callable


def interleaved(contestants: dict, rounds: int, measure: Callable) -> dict[str, float]:
    """Median of `measure(contestant)` over `rounds`, visiting every contestant once per round (order rotates).

    Interleaving spreads the noise of a shared machine over all contestants instead of penalising whichever one
    happened to run during a busy spell.
    """
    results = {name: [] for name in contestants}
    names = list(contestants)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            results[name].append(measure(contestants[name]))
    return {name: statistics.median(values) for name, values in results.items()}

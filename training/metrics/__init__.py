"""Local `evaluate` metric modules (loaded by path, so they work offline)."""

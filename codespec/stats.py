"""Summary statistics shared by the server's stats, the benchmarks and the reliability drivers."""

from __future__ import annotations

from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation between the closest ranks (numpy's default;
    equal to `statistics.quantiles(method="inclusive")` at whole q); None when there is no data."""
    ordered = sorted(values)
    if not ordered:
        return None
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be within 0..100, got {q}")
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)

"""Percentiles for `Inspector.stats` (nearest rank: a value that was measured)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], p: float) -> float | None:
    """The nearest-rank `p`th percentile of `values`; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return float(ordered[rank - 1])

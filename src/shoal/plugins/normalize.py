"""Score normalisation helpers shared by plugins (kube's pluginhelper)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["default_normalize_score", "go_div"]


def go_div(a: NDArray[np.int64], b: NDArray[np.int64] | int) -> NDArray[np.int64]:
    """Integer division truncating toward zero, as Go's int64 `/` does."""
    q = np.abs(a) // np.abs(b)
    return np.where((np.sign(a) * np.sign(b)) < 0, -q, q).astype(np.int64)


def default_normalize_score(
    max_priority: int, reverse: bool, scores: NDArray[np.int64]
) -> NDArray[np.int64]:
    """Scale to 0..max_priority by the largest score; `reverse` flips high and low."""
    max_count = int(scores.max()) if scores.size else 0
    if max_count == 0:
        if reverse:
            return np.full_like(scores, max_priority)
        return scores
    out = go_div(max_priority * scores, max_count)
    return max_priority - out if reverse else out

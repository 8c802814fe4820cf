"""Prices of GPU shares from the bin-packing LP of the shares that arrive.

Pack n_s shares of each size s (milli-GPU of one device) into as few devices as
possible. The LP relaxation (Gilmore-Gomory) has a variable per *pattern* (a multiset of
sizes fitting one device) and its dual gives every size a price y_s: the part of a
device a share of that size "costs" in an optimal packing of this mix (810 -> 1 when
the small shares that could join it are too few, 470 -> 1/2, 320 -> 1/3, ...).
K(h), the most price a device with h milli free can still take (an unbounded knapsack
over the prices), is what that free room is worth. Placing a share of size s on a
device with h free loses

    L(h, s) = K(h) - y_s - K(h - s)  >= 0

devices' worth: 0 when s completes one of the optimal patterns (a 470 beside a 470, a
320 beside a 650 or in 1 000 fresh milli), more when it spoils one (a 320 beside a 470
leaves 210 milli no priced share fits: 1/2 - 1/3 - 0 = 1/6). This is the online
primal-dual view of stochastic bin packing (Gupta and Radovanovic, "Online Stochastic
Bin Packing", 2012): prices from the LP of the distribution seen, each item where it
loses least. FGD asks only whether a shape still fits the room left; the prices also
know how many of each size compete for it.

The LP is solved by column generation (scipy's HiGHS for the master, a knapsack by
dynamic programming for pricing) on sizes divided by their greatest common divisor, so
the usual 10-milli sizes make a 100-slot knapsack. Patterns are kept between refits,
so a refit on a slowly changing mix takes a few iterations.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

from shoal.api.gpu import GPU_MILLI

__all__ = ["SharePrices"]

_EPS = 1e-9
_MAX_ITERATIONS = 200


def _knapsack(
    sizes: NDArray[np.int64], prices: NDArray[np.float64], capacity: int
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """K[c]: the highest total price of a multiset of sizes fitting c (c = 0..capacity),
    and the last size index taken at c (-1: none; c - 1 is as good)."""
    best = np.zeros(capacity + 1)
    last = np.full(capacity + 1, -1, dtype=np.int64)
    size_list = [int(s) for s in sizes]
    price_list = [float(p) for p in prices]
    for c in range(1, capacity + 1):
        value, taken = best[c - 1], -1
        for i, size in enumerate(size_list):
            if size <= c and best[c - size] + price_list[i] > value + _EPS:
                value, taken = best[c - size] + price_list[i], i
        best[c], last[c] = value, taken
    return best, last


class SharePrices:
    """Prices of the share sizes of a mix and the loss of placing one on a device.

    `update(counts)` refits to a new mix {milli: count}; `loss(free, milli)` is
    L(free, milli) in milli-GPU (1 000 x devices) for an array of free values.
    Sizes not in the mix are priced as the knapsack values them: at the most priced
    multiset they could replace, i.e. K(s), which makes their loss K(h) - K(s) - K(h - s).
    """

    def __init__(self) -> None:
        self._patterns: list[tuple[int, ...]] = []
        self._pattern_sizes: tuple[int, ...] = ()
        self.prices: dict[int, float] = {}
        self.bins = 0.0
        """Devices the LP needs for the mix (its optimum, from the prices)."""
        self._worth = np.zeros(GPU_MILLI + 1)  # K per milli, 0..1000

    @property
    def fitted(self) -> bool:
        return bool(self.prices)

    def update(self, counts: Mapping[int, float]) -> None:
        mix = {int(s): float(c) for s, c in counts.items() if 0 < s < GPU_MILLI and c > 0}
        if not mix:
            self.prices = {}
            self.bins = 0.0
            self._worth = np.zeros(GPU_MILLI + 1)
            return
        # Imported here: scipy.optimize takes most of a second to import, and only
        # FragGuard with share prices on, once shares arrive, needs it.
        from scipy.optimize import linprog

        sizes = sorted(mix)
        unit = math.gcd(GPU_MILLI, *sizes)
        capacity = GPU_MILLI // unit
        scaled = np.array([s // unit for s in sizes], dtype=np.int64)
        demand = np.array([mix[s] for s in sizes])
        patterns = self._start_patterns(tuple(sizes), scaled, capacity)
        prices = np.zeros(len(sizes))
        worth = np.zeros(capacity + 1)
        for _ in range(_MAX_ITERATIONS):
            matrix = np.array(patterns, dtype=np.float64).T  # [sizes, patterns]
            result = linprog(
                np.ones(len(patterns)),
                A_ub=-matrix,
                b_ub=-demand,
                bounds=(0, None),
                method="highs",
            )
            if result.status != 0:  # pragma: no cover - the singleton patterns are feasible
                break
            prices = np.maximum(-np.asarray(result.ineqlin.marginals, dtype=np.float64), 0.0)
            worth, last = _knapsack(scaled, prices, capacity)
            if worth[capacity] <= 1.0 + 1e-7:
                break
            pattern = [0] * len(sizes)
            c = capacity
            while c > 0:
                i = int(last[c])
                if i < 0:
                    c -= 1
                    continue
                pattern[i] += 1
                c -= int(scaled[i])
            if tuple(pattern) in patterns:  # pragma: no cover - numerical stall
                break
            patterns.append(tuple(pattern))
        self._patterns = patterns
        self._pattern_sizes = tuple(sizes)
        self.bins = float(demand @ prices)  # the LP optimum (strong duality)
        self.prices = dict(zip(sizes, (float(p) for p in prices), strict=True))
        # K per milli: room between multiples of the unit is worth the multiple below.
        self._worth = worth[np.arange(GPU_MILLI + 1) // unit]

    def _start_patterns(
        self, sizes: tuple[int, ...], scaled: NDArray[np.int64], capacity: int
    ) -> list[tuple[int, ...]]:
        """Singleton patterns (as many copies as fit), plus the previous fit's patterns
        re-expressed over the new sizes (those holding a size no longer seen dropped)."""
        patterns = []
        for i, s in enumerate(scaled):
            pattern = [0] * len(sizes)
            pattern[i] = int(capacity // s)
            patterns.append(tuple(pattern))
        index = {s: i for i, s in enumerate(sizes)}
        for old in self._patterns:
            pattern = [0] * len(sizes)
            keep = True
            for size, copies in zip(self._pattern_sizes, old, strict=True):
                if copies:
                    if size not in index:
                        keep = False
                        break
                    pattern[index[size]] = copies
            if keep and tuple(pattern) not in patterns:
                patterns.append(tuple(pattern))
        return patterns

    def worth(self, free: NDArray[np.int64]) -> NDArray[np.float64]:
        """K(free) in devices."""
        result: NDArray[np.float64] = self._worth[np.minimum(np.maximum(free, 0), GPU_MILLI)]
        return result

    def price(self, milli: int) -> float:
        known = self.prices.get(milli)
        return known if known is not None else float(self._worth[milli])

    def loss(self, free: NDArray[np.int64], milli: int) -> NDArray[np.float64]:
        """L(free, milli) in milli-GPU (free >= milli assumed)."""
        lost = self.worth(free) - self.price(milli) - self.worth(free - milli)
        result: NDArray[np.float64] = np.maximum(lost, 0.0) * GPU_MILLI
        return result

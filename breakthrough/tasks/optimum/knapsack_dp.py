"""Optimal knapsack subsets counted by dynamic programming: the exact count for the knapsack
kind at sizes where model counting is slow (Ganak ran past 20 s on every one of eight 60-item
draws; this takes seconds).

Why it is exact: `ways[w, v]` is the number of subsets of the items seen so far with total
weight exactly w (at most the capacity) and total value exactly v; adding an item adds
`ways[w - weight, v - value]` to every cell. The optimum is the largest value some subset within
the capacity reaches, and the count is the sum of `ways[w, optimum]` over w, every optimal
subset counted once (its weight is one w). Values are capped at the fractional (LP) bound, which
no subset within the capacity exceeds, and weights at the capacity, so the table stays small.
Counts are at most 2^n, exact in uint64 for n <= 63. numpy only; it knows nothing of the
solvers, whose optimum it must equal (`exact`)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

MAX_ITEMS = 63  # 2^63 subsets at most: every count fits in uint64
MAX_CELLS = 40_000_000  # (capacity + 1) x (value bound + 1), 320 MB of uint64


def applies(inst: dict[str, Any]) -> bool:
    """Whether the table is the exact count here: non-negative integer data, n <= 63, and a
    table that fits in memory (otherwise the model counter counts)."""
    values, weights, cap = inst["values"], inst["weights"], inst["capacity"]
    if len(values) > MAX_ITEMS or cap < 0 or min(values) < 0 or min(weights) < 0:
        return False
    return (cap + 1) * (_value_bound(values, weights, cap) + 1) <= MAX_CELLS


def _value_bound(values: list[int], weights: list[int], cap: int) -> int:
    """The fractional knapsack's optimum, rounded down: no subset within `cap` is worth more
    (items of weight 0 are taken whole)."""
    total = sum(v for v, w in zip(values, weights, strict=True) if w == 0)
    room = Fraction(cap)
    ratio = sorted(
        ((Fraction(v, w), v, w) for v, w in zip(values, weights, strict=True) if w > 0),
        reverse=True,
    )
    bound = Fraction(total)
    for _r, v, w in ratio:
        if room <= 0:
            break
        take = min(Fraction(1), room / w)
        bound += take * v
        room -= take * w
    return int(bound)


def count_knapsack_optima(inst: dict[str, Any]) -> tuple[int, int]:
    """(optimum, exact number of optimal subsets) of a knapsack instance (`applies` first)."""
    values, weights, cap = inst["values"], inst["weights"], inst["capacity"]
    if not applies(inst):
        raise ValueError("the knapsack table does not apply to this instance")
    top = _value_bound(values, weights, cap)
    ways = np.zeros((cap + 1, top + 1), dtype=np.uint64)
    ways[0, 0] = 1
    for v, w in zip(values, weights, strict=True):
        if w > cap or v > top:
            continue  # no subset within the capacity holds it
        # numpy copies an overlapping right-hand side first: each subset takes the item once
        ways[w:, v:] += ways[: cap + 1 - w, : top + 1 - v]
    reached = np.flatnonzero(ways.any(axis=0))
    optimum = int(reached[-1])
    return optimum, sum(int(c) for c in ways[:, optimum])

"""Optimal assignments counted as perfect matchings: the exact count for the assignment kind at
sizes where model counting is slow (a 9x9 instance with 3,466 optima takes Ganak over
a minute, this a millisecond).

Why it is exact: the optimal assignments are the vertices of the optimal face of the (integral)
assignment polytope, so a perfect matching that uses only edges lying on some optimal
assignment is itself optimal (a strictly complementary dual makes exactly those edges tight),
and every optimal assignment uses only such edges. An edge (i, j) lies on an optimal assignment
iff C[i][j] plus the optimal cost of the matrix without row i and column j equals the optimum
(scipy's Hungarian solver). The count is then the permanent of that 0/1 edge matrix (Ryser's
formula over 2^n column subsets, exact in Python integers). numpy and scipy only."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from breakthrough.tasks.optimum.enumerator import _bits


def _min_cost(c: np.ndarray) -> int:
    rows, cols = linear_sum_assignment(c)
    return int(c[rows, cols].sum())


def optimal_edges(cost: Any) -> tuple[int, np.ndarray]:
    """(optimum, 0/1 matrix of the edges that lie on at least one optimal assignment)."""
    c = np.asarray(cost, dtype=np.int64)
    n = c.shape[0]
    opt = _min_cost(c)
    edges = np.zeros((n, n), dtype=np.int64)
    for i in range(n):
        for j in range(n):
            minor = np.delete(np.delete(c, i, axis=0), j, axis=1)
            rest = _min_cost(minor) if n > 1 else 0
            edges[i, j] = int(c[i, j] + rest == opt)
    return opt, edges


def permanent01(a: np.ndarray) -> int:
    """The permanent of a square 0/1 matrix (Ryser): the number of its perfect matchings."""
    n = a.shape[0]
    subsets = _bits(n)  # (2^n, n): column subsets S
    row_sums = subsets @ a.T  # (2^n, n): sum of A[i, j] over j in S, per row i
    prods = np.prod(row_sums.astype(object), axis=1)
    signs = np.where((n - subsets.sum(1)) % 2 == 0, 1, -1).astype(object)
    return int((signs * prods).sum())


def count_assignment_optima(cost: Any) -> tuple[int, int]:
    """(optimum, exact number of optimal assignments) of a cost matrix."""
    opt, edges = optimal_edges(cost)
    return opt, permanent01(edges)

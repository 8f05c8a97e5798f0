"""Exact vectorised enumerator (spec section 6): the optimum value, the exact number of optima
and the smallest optimal point of a UoO instance. Generation time only (numpy).

Binary families (n <= 20): every one of the 2^n points is evaluated with a split-half integer
quadratic (int64; all data are small integers, so values are exact and ties are exact).
Assignment (n <= 9): all n! permutations from a cached lexicographic table."""

from __future__ import annotations

import itertools
from functools import cache, lru_cache
from typing import Any

import numpy as np

from breakthrough.tasks.optimum.generator import SENSE


@cache
def _bits(k: int) -> np.ndarray:
    """(2^k, k) int64 matrix; row m holds the bits of m, least significant first."""
    return (
        (np.arange(1 << k, dtype=np.int64)[:, None] >> np.arange(k, dtype=np.int64)) & 1
    ).astype(np.int64)


def eval_quadratic(n: int, c: Any, q: Any) -> np.ndarray:
    """f(x) = sum_i c_i x_i + sum_{i<j} q_ij x_i x_j for all x, indexed by m = sum_i x_i 2^i.

    `c` may be a scalar 0 (no linear part), `q` a scalar 0 or an (n, n) matrix (only the strict
    upper triangle is used)."""
    c = np.broadcast_to(np.asarray(c, dtype=np.int64), (n,))
    qa = np.asarray(q, dtype=np.int64)
    qm = np.zeros((n, n), dtype=np.int64) if qa.ndim == 0 else np.triu(qa, 1)
    nl = n // 2
    bl, bh = _bits(nl), _bits(n - nl)
    fl = bl @ c[:nl] + ((bl @ qm[:nl, :nl]) * bl).sum(1)
    fh = bh @ c[nl:] + ((bh @ qm[nl:, nl:]) * bh).sum(1)
    e = fl[:, None] + fh[None, :] + (bl @ qm[:nl, nl:]) @ bh.T
    return e.T.ravel()


def popcount(n: int) -> np.ndarray:
    nl = n // 2
    return (_bits(nl).sum(1)[:, None] + _bits(n - nl).sum(1)[None, :]).T.ravel()


@lru_cache(maxsize=4)
def permutations_table(n: int) -> np.ndarray:
    """All permutations of range(n) in lexicographic order, (n!, n) int8."""
    return np.array(list(itertools.permutations(range(n))), dtype=np.int8)


def _binary_values(kind: str, inst: dict[str, Any]) -> tuple[np.ndarray, np.ndarray | None]:
    """(objective for every m, feasibility mask or None when all points are feasible)."""
    n = inst["n"]
    if kind == "subset":
        val = eval_quadratic(n, inst["values"], 0)
        a = np.zeros((n, n), dtype=np.int64)
        for i, j in inst["conflicts"]:
            a[min(i, j), max(i, j)] = 1
        feas = (popcount(n) == inst["k"]) & (eval_quadratic(n, 0, a) == 0)
        return val, feas
    if kind == "qubo":
        q = np.asarray(inst["Q"], dtype=np.int64)
        return eval_quadratic(n, np.diag(q), q), None
    if kind == "knapsack":
        val = eval_quadratic(n, inst["values"], 0)
        feas = eval_quadratic(n, inst["weights"], 0) <= inst["capacity"]
        return val, feas
    if kind == "portfolio":
        s = np.asarray(inst["sectors"], dtype=np.int64)
        pen = np.asarray(inst["P"], dtype=np.int64)
        lin = np.asarray(inst["mu"], dtype=np.int64) - np.asarray(inst["risk"], dtype=np.int64)
        val = eval_quadratic(n, lin, -pen[s[:, None], s[None, :]])
        feas = popcount(n) == inst["K"]
        return val, feas
    raise ValueError(f"unknown binary UoO kind {kind!r}")


def enumerate_instance(kind: str, inst: dict[str, Any]) -> tuple[int | None, int, list[int] | None]:
    """(optimum, number of optima, example optimum) for an instance.

    The example optimum is given in answer format: the 0/1 vector x_1..x_n of the smallest optimal
    m for binary families, or the 1-based task list of the lexicographically smallest optimal
    permutation for assignment. Optimum None (count 0) when no point is feasible."""
    n = inst["n"]
    if kind == "assignment":
        perms = permutations_table(n)
        cost = np.asarray(inst["C"], dtype=np.int64)[np.arange(n), perms].sum(1)
        opt = cost.min()
        hits = np.flatnonzero(cost == opt)
        return int(opt), int(hits.size), [int(t) + 1 for t in perms[hits[0]]]
    val, feas = _binary_values(kind, inst)
    if feas is not None:
        if not feas.any():
            return None, 0, None
        idx = np.flatnonzero(feas)
        val = val[idx]
    else:
        idx = None
    opt = val.max() if SENSE[kind] == "max" else val.min()
    hits = np.flatnonzero(val == opt)
    m = int(hits[0] if idx is None else idx[hits[0]])
    return int(opt), int(hits.size), [(m >> i) & 1 for i in range(n)]

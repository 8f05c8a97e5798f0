"""Deterministic, seeded UoO instance generator (spec sections 3, 4, 5.1, 5.2).

Independent of numpy and of the Python version: the PRNG is SplitMix64 written out in integer
arithmetic, seeds are derived with sha256, and the only floats are `random()` values that are
exact multiples of 2^-53 compared with (or multiplied by) literal constants, which IEEE-754
double arithmetic evaluates identically everywhere. The order of draws below is normative: it
fixes the instances.

Instances are plain JSON-serialisable dicts with 0-based indices; prompts number items from 1.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import Any

M64 = (1 << 64) - 1
GENERATOR_VERSION = "uoo-v1"
MASTER_SEED = 20260101

# Families in the order of spec table 3.2, with their optimisation sense.
KINDS: tuple[str, ...] = ("subset", "qubo", "assignment", "knapsack", "portfolio")
SENSE: dict[str, str] = {
    "subset": "max",
    "qubo": "min",
    "assignment": "min",
    "knapsack": "max",
    "portfolio": "max",
}

# Count bins (spec 3.1): id, label, inclusive count range. The >50 upper cap (10,000) is the spec's.
BINS: tuple[tuple[str, str, int, int], ...] = (
    ("b1", "1", 1, 1),
    ("b2", "2", 2, 2),
    ("b3_5", "3-5", 3, 5),
    ("b6_10", "6-10", 6, 10),
    ("b11_50", "11-50", 11, 50),
    ("b51p", ">50", 51, 10_000),
)
# The real-size cohort's bins: the spec's up to 50, then the >50 bin split where
# counts reach far past the spec's 10,000 cap (no upper cap: solvers count exactly).
LARGE_BINS: tuple[tuple[str, str, int, int], ...] = (
    *BINS[:5],
    ("b51_1000", "51-1,000", 51, 1_000),
    ("b1001_100k", "1,001-100,000", 1_001, 100_000),
    ("b100k_p", ">100,000", 100_001, 1 << 128),
)
BIN_IDS: tuple[str, ...] = tuple(b[0] for b in BINS)
BIN_LABELS: dict[str, str] = {b[0]: b[1] for b in BINS}
ALL_BIN_IDS: tuple[str, ...] = (*BIN_IDS, *(b[0] for b in LARGE_BINS[5:]))  # report order
ALL_BIN_LABELS: dict[str, str] = {**BIN_LABELS, **{b[0]: b[1] for b in LARGE_BINS}}

# Level ladders (spec 5.2); None = cell omitted (portfolio has no >50 bin).
LADDERS: dict[str, tuple[tuple[int, ...] | None, ...]] = {
    "subset": ((0, 1, 2, 3, 4), (1, 2, 3, 4), (2, 3, 4), (3, 4, 5), (4, 5), (5,)),
    "qubo": ((0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4), (3, 4, 5), (4, 5)),
    "assignment": ((0, 1, 2, 3), (1, 2, 3, 4), (1, 2, 3, 4), (2, 3, 4), (3, 4, 5), (5,)),
    "knapsack": (
        (0, 1, 2, 3, 4, 5),
        (1, 2, 3, 4, 5),
        (2, 3, 4, 5),
        (3, 4, 5),
        (4, 5, 6),
        (6,),
    ),
    "portfolio": ((0, 1, 2, 3, 4), (1, 2, 3, 4, 5), (1, 2, 3, 4, 5), (3, 4, 5), (3, 4, 5), None),
}


def bin_of(count: int | None) -> str | None:
    """The bin id of a count of optima, or None when it is out of every bin (0 or > 10,000)."""
    if count is None:
        return None
    for bid, _label, lo, hi in BINS:
        if lo <= count <= hi:
            return bid
    return None


def large_bin_of(count: int | None) -> str | None:
    """The LARGE_BINS id of a count of optima (None for 0 or None)."""
    for bid, _label, lo, hi in LARGE_BINS:
        if count is not None and lo <= count <= hi:
            return bid
    return None


# ---------------------------------------------------------------------------------------------
# PRNG (spec 5.1, normative)


class Rng:
    """SplitMix64 with unbiased integer draws; bit-for-bit the spec's reference."""

    __slots__ = ("s",)

    def __init__(self, seed: int) -> None:
        self.s = seed & M64

    def u64(self) -> int:
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def randint(self, a: int, b: int) -> int:
        """Uniform integer in [a, b] (inclusive), unbiased by rejection."""
        span = b - a + 1
        lim = (1 << 64) - ((1 << 64) % span)
        while True:
            u = self.u64()
            if u < lim:
                return a + u % span

    def random(self) -> float:
        """Uniform in [0, 1): a multiple of 2^-53 (exact in any IEEE double)."""
        return (self.u64() >> 11) / float(1 << 53)

    def sample(self, n: int, k: int) -> list[int]:
        """k distinct values of range(n), by a partial Fisher-Yates shuffle."""
        p = list(range(n))
        for i in range(k):
            j = self.randint(i, n - 1)
            p[i], p[j] = p[j], p[i]
        return p[:k]


def derive_seed(*parts: object) -> int:
    """sha256 of the '|'-joined parts; first 8 bytes, little-endian."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little")


def attempt_seed(
    kind: str, bin_index: int, rep: int, attempt: int, master: int = MASTER_SEED
) -> int:
    return derive_seed(GENERATOR_VERSION, master, kind, bin_index, rep, attempt)


# ---------------------------------------------------------------------------------------------
# Family generators (spec 4.1-4.5); each returns the instance dict.


def gen_subset(rng: Rng, level: int, size: int | None = None) -> dict[str, Any]:
    n = rng.randint(16, 20) if size is None else size
    k = rng.randint(4, 8)
    vmax = (60, 30, 12, 6, 4, 2)[level]
    values = [rng.randint(1, vmax) for _ in range(n)]
    m = rng.randint(n // 2, n)
    pairs: set[tuple[int, int]] = set()
    while len(pairs) < m:
        a, b = sorted(rng.sample(n, 2))
        pairs.add((a, b))
    return {"n": n, "k": k, "values": values, "conflicts": [list(p) for p in sorted(pairs)]}


QUBO_LEVELS = ((20, 0.50, 0), (6, 0.40, 0), (3, 0.35, 0), (2, 0.30, 1), (1, 0.25, 2), (1, 0.20, 4))


def gen_qubo(rng: Rng, level: int, size: int | None = None) -> dict[str, Any]:
    r, p, z = QUBO_LEVELS[level]
    n = rng.randint(16, 20) if size is None else size
    q = [[0] * n for _ in range(n)]
    for i in range(n):
        q[i][i] = rng.randint(-r, r)
        for j in range(i + 1, n):
            if rng.random() < p:
                v = 0
                while v == 0:
                    v = rng.randint(-r, r)
                q[i][j] = v
    for f in rng.sample(n, z):
        for t in range(n):
            q[f][t] = 0
            q[t][f] = 0
    return {"n": n, "Q": q}


# Per level, the chance that a cost entry gets no noise (level 0 draws uniform costs instead).
ASSIGN_D = {1: 0.12, 2: 0.18, 3: 0.25, 4: 0.35, 5: 0.50}


def gen_assignment(rng: Rng, level: int, size: int | None = None) -> dict[str, Any]:
    n = rng.randint(8, 9) if size is None else size
    if level == 0:
        cost = [[rng.randint(0, 99) for _ in range(n)] for _ in range(n)]
    else:
        d = ASSIGN_D[level]
        a = [rng.randint(0, 29) for _ in range(n)]
        b = [rng.randint(0, 29) for _ in range(n)]
        cost = []
        for i in range(n):
            row = []
            for j in range(n):
                noise = 0 if rng.random() < d else rng.randint(1, 9)
                row.append(a[i] + b[j] + noise)
            cost.append(row)
    return {"n": n, "C": cost}


KNAP_LEVELS = {
    1: (20, 20, 0, 1),
    2: (10, 10, 1, 2),
    3: (6, 8, 1, 3),
    4: (4, 6, 2, 3),
    5: (3, 5, 3, 4),
}


def gen_knapsack(rng: Rng, level: int, size: int | None = None) -> dict[str, Any]:
    n = rng.randint(16, 20) if size is None else size
    if level == 0:
        values = [rng.randint(10, 99) for _ in range(n)]
        weights = [rng.randint(10, 99) for _ in range(n)]
    elif level == 6:
        weights = [rng.randint(1, 7) for _ in range(n)]
        values = [2 * w - (1 if rng.random() < 0.3 else 0) for w in weights]
    else:
        vmax, wmax, zero, clones = KNAP_LEVELS[level]
        values = [rng.randint(1, vmax) for _ in range(n)]
        weights = [rng.randint(1, wmax) for _ in range(n)]
        for _ in range(clones):
            i, j = rng.sample(n, 2)
            values[j], weights[j] = values[i], weights[i]
        for i in rng.sample(n, zero):
            values[i] = 0
    capacity = math.floor((0.3 + 0.3 * rng.random()) * sum(weights))
    return {"n": n, "values": values, "weights": weights, "capacity": capacity}


PORT_LEVELS = ((40, 12, 0), (20, 8, 1), (12, 6, 2), (8, 4, 3), (6, 3, 4), (4, 2, 5))


def gen_portfolio(rng: Rng, level: int, size: int | None = None) -> dict[str, Any]:
    mu_max, r_max, clones = PORT_LEVELS[level]
    n = rng.randint(16, 20) if size is None else size
    k = rng.randint(3, 5)
    s_count = rng.randint(3, 5)
    sectors = [rng.randint(0, s_count - 1) for _ in range(n)]
    mu = [rng.randint(1, mu_max) for _ in range(n)]
    risk = [rng.randint(1, r_max) for _ in range(n)]
    for _ in range(clones):
        i, j = rng.sample(n, 2)
        sectors[j], mu[j], risk[j] = sectors[i], mu[i], risk[i]
    pen = [[0] * s_count for _ in range(s_count)]
    for s in range(s_count):
        pen[s][s] = rng.randint(3, 8)
        for t in range(s + 1, s_count):
            pen[s][t] = pen[t][s] = rng.randint(0, 3)
    return {"n": n, "K": k, "S": s_count, "sectors": sectors, "mu": mu, "risk": risk, "P": pen}


GENERATORS: dict[str, Callable[[Rng, int, int | None], dict[str, Any]]] = {
    "subset": gen_subset,
    "qubo": gen_qubo,
    "assignment": gen_assignment,
    "knapsack": gen_knapsack,
    "portfolio": gen_portfolio,
}


def generate_instance(kind: str, seed: int, level: int, size: int | None = None) -> dict[str, Any]:
    """One instance of `kind` at `level` from a fresh Rng(seed).

    `size` is the size dial (real sizes): None draws n as the spec does (16-20 binary, 8-9
    assignment; uoo-v1, so uoo87/uoo29 are unchanged), an integer fixes n and skips that one
    draw; every other draw, in the same order, is the spec's."""
    return GENERATORS[kind](Rng(seed), level, size)


# ---------------------------------------------------------------------------------------------
# Objective evaluation (spec 4.6): pure Python, used by the grader.


def evaluate(kind: str, instance: dict[str, Any], solution: list[int]) -> tuple[bool, int]:
    """(feasible, objective) of a normalised solution: a 0/1 list for binary families, a 0-based
    task list (sigma[i] = task of worker i) for assignment. The objective is computed even when
    the point is infeasible (it is only meaningful when feasible)."""
    n = instance["n"]
    if len(solution) != n:
        raise ValueError(f"solution has {len(solution)} entries, instance has n={n}")
    x = solution
    if kind == "subset":
        obj = sum(v for v, xi in zip(instance["values"], x, strict=True) if xi)
        ok = sum(x) == instance["k"] and not any(x[a] and x[b] for a, b in instance["conflicts"])
        return ok, obj
    if kind == "qubo":
        q = instance["Q"]
        on = [i for i in range(n) if x[i]]
        obj = 0
        for ai, i in enumerate(on):
            row = q[i]
            obj += row[i]
            for j in on[ai + 1 :]:
                obj += row[j]
        return True, obj
    if kind == "assignment":
        cost = instance["C"]
        ok = sorted(x) == list(range(n))
        obj = sum(cost[i][x[i]] for i in range(n) if 0 <= x[i] < n)
        return ok, obj
    if kind == "knapsack":
        obj = sum(v for v, xi in zip(instance["values"], x, strict=True) if xi)
        wt = sum(w for w, xi in zip(instance["weights"], x, strict=True) if xi)
        return wt <= instance["capacity"], obj
    if kind == "portfolio":
        s, pen = instance["sectors"], instance["P"]
        on = [i for i in range(n) if x[i]]
        obj = sum(instance["mu"][i] - instance["risk"][i] for i in on)
        for ai, i in enumerate(on):
            for j in on[ai + 1 :]:
                obj -= pen[s[i]][s[j]]
        return len(on) == instance["K"], obj
    raise ValueError(f"unknown UoO kind {kind!r}")

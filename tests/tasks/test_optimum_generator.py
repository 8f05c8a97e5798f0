"""UoO generator determinism, enumerator cross-checks on every shipped instance (independent
plain-Python solvers per family), and hand-made instances with known counts."""

from __future__ import annotations

import hashlib
import itertools
import json
from math import comb, factorial
from pathlib import Path

import numpy as np
import pytest

from breakthrough.tasks.optimum import recipes as uoo_recipes
from breakthrough.tasks.optimum.enumerator import enumerate_instance
from breakthrough.tasks.optimum.generator import (
    BIN_IDS,
    KINDS,
    LADDERS,
    Rng,
    bin_of,
    derive_seed,
    evaluate,
)
from breakthrough.tasks.optimum.prompts import EXPLICIT_PARAGRAPH, VARIANTS, render_prompt

REPO = Path(__file__).resolve().parents[2]
COHORTS = REPO / "cohorts"


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (COHORTS / f"{name}.jsonl").read_text().splitlines()]


FULL = _rows("uoo87")


@pytest.fixture(scope="module")
def rebuilt() -> dict[str, bytes]:
    """File bytes of every UoO cohort, regenerated from the seeded generator."""
    return {
        name: uoo_recipes.render_jsonl(rows) for name, rows in uoo_recipes.cohort_rows().items()
    }


# ------------------------------------------------------------------ determinism


@pytest.mark.parametrize("name", uoo_recipes.COHORT_NAMES)
def test_regeneration_is_byte_identical(rebuilt: dict[str, bytes], name: str) -> None:
    assert rebuilt[name] == (COHORTS / f"{name}.jsonl").read_bytes()


def test_splitmix64_reference_values() -> None:
    # SplitMix64 from seed 0: published reference outputs.
    r = Rng(0)
    assert [r.u64() for _ in range(3)] == [
        0xE220A8397B1DCDAF,
        0x6E789E6AA1B965F4,
        0x06C45D188009454F,
    ]
    r = Rng(1)
    draws = [r.randint(1, 6) for _ in range(2000)]
    assert set(draws) == set(range(1, 7))
    s = Rng(7).sample(10, 10)
    assert sorted(s) == list(range(10))
    assert derive_seed("a", 1) == int.from_bytes(hashlib.sha256(b"a|1").digest()[:8], "little")


def test_cohort_shape() -> None:
    fixed = _rows("uoo29")
    assert len(FULL) == 87 and len(fixed) == 29
    ids = [r["id"] for r in FULL]
    assert len(set(ids)) == 87
    cells = {(r["kind"], r["bin"]) for r in FULL}
    expected = {(k, BIN_IDS[b]) for k in KINDS for b, lv in enumerate(LADDERS[k]) if lv is not None}
    assert cells == expected and len(cells) == 29
    assert ("portfolio", "b51p") not in cells
    for kind, bid in cells:
        assert sorted(r["rep"] for r in FULL if (r["kind"], r["bin"]) == (kind, bid)) == [0, 1, 2]
    assert {(r["kind"], r["bin"]) for r in fixed} == cells
    assert [r["id"] for r in fixed] == [r["id"] for r in FULL if r["rep"] == 0]
    assert all(r["stage"] == "uoo29" and r["fixed29"] for r in fixed)
    assert all(r["stage"] == "uoo87" and r["family"] == "optimum" for r in FULL)
    assert all(r["standin"] is False for r in FULL)
    # no duplicate instances
    assert len({json.dumps(r["instance"], sort_keys=True) for r in FULL}) == 87
    for r in FULL:
        assert bin_of(r["n_optima"]) == r["bin"]
        n = r["instance"]["n"]
        assert (8 <= n <= 9) if r["kind"] == "assignment" else (16 <= n <= 20)


# ------------------------------------------------------------------ independent solvers


def _merge(best, cnt, val, c, maximise=True):
    if best is None or (val > best if maximise else val < best):
        return val, c
    if val == best:
        return best, cnt + c
    return best, cnt


def solve_subset(inst):
    """DFS over items in index order with a value bound; counts optimal k-sets."""
    n, k, v = inst["n"], inst["k"], inst["values"]
    bad = [0] * n
    for a, b in inst["conflicts"]:
        bad[a] |= 1 << b
        bad[b] |= 1 << a
    # suffix-sorted values for the bound: top_j(i) = sum of j largest values among items >= i
    tops = []
    for i in range(n + 1):
        s = sorted(v[i:], reverse=True)
        tops.append([sum(s[:j]) for j in range(len(s) + 1)])
    state = {"best": None, "count": 0}

    def rec(i, chosen, forbid, total):
        need = k - chosen
        if need == 0:
            state["best"], state["count"] = _merge(state["best"], state["count"], total, 1)
            return
        if n - i < need:
            return
        if state["best"] is not None and total + tops[i][need] < state["best"]:
            return
        if not (forbid >> i) & 1:
            rec(i + 1, chosen + 1, forbid | bad[i], total + v[i])
        rec(i + 1, chosen, forbid, total)

    rec(0, 0, 0, 0)
    return state["best"], state["count"]


def solve_qubo(inst):
    """Direct evaluation x^T Q x of every bit vector, in blocks (no split-half trick)."""
    n = inst["n"]
    q = np.array(inst["Q"], dtype=np.float64)  # small integers: exact in float64
    best, count = None, 0
    block = 1 << 16
    shifts = np.arange(n)
    for start in range(0, 1 << n, block):
        m = np.arange(start, min(start + block, 1 << n))
        x = ((m[:, None] >> shifts) & 1).astype(np.float64)
        e = np.rint(((x @ q) * x).sum(1)).astype(np.int64)
        lo = int(e.min())
        c = int((e == lo).sum())
        best, count = _merge(best, count, lo, c, maximise=False)
    return best, count


def solve_assignment(inst):
    """Bitmask DP over assigned task sets: dp[mask] = (min cost, number of ways)."""
    n, cost = inst["n"], inst["C"]
    dp = {0: (0, 1)}
    for mask in range(1 << n):
        if mask not in dp:
            continue
        c0, w0 = dp[mask]
        i = bin(mask).count("1")
        if i == n:
            continue
        for j in range(n):
            if not (mask >> j) & 1:
                nm = mask | (1 << j)
                val = c0 + cost[i][j]
                old = dp.get(nm)
                dp[nm] = _merge(*(old if old else (None, 0)), val, w0, maximise=False)
    return dp[(1 << n) - 1]


def solve_knapsack(inst):
    """Capacity DP over (best, count) with 'weight <= c' semantics."""
    cap = inst["capacity"]
    f = [(0, 1)] * (cap + 1)
    for v, w in zip(inst["values"], inst["weights"], strict=True):
        g = list(f)
        for c in range(w, cap + 1):
            b0, n0 = f[c]
            b1, n1 = f[c - w]
            g[c] = _merge(b0, n0, b1 + v, n1)
        f = g
    return f[cap]


def solve_portfolio(inst):
    """All K-subsets via itertools.combinations."""
    s, pen, net = (
        inst["sectors"],
        inst["P"],
        [m - r for m, r in zip(inst["mu"], inst["risk"], strict=True)],
    )
    best, count = None, 0
    for combo in itertools.combinations(range(inst["n"]), inst["K"]):
        u = sum(net[i] for i in combo)
        u -= sum(pen[s[a]][s[b]] for a, b in itertools.combinations(combo, 2))
        best, count = _merge(best, count, u, 1)
    return best, count


SOLVERS = {
    "subset": solve_subset,
    "qubo": solve_qubo,
    "assignment": solve_assignment,
    "knapsack": solve_knapsack,
    "portfolio": solve_portfolio,
}


@pytest.mark.parametrize("kind", KINDS)
def test_enumerator_agrees_with_independent_solver(kind: str) -> None:
    rows = [r for r in FULL if r["kind"] == kind]
    assert rows
    for r in rows:
        opt, count = SOLVERS[kind](r["instance"])
        assert (opt, count) == (r["optimum"], r["n_optima"]), r["id"]
        # the example optimum is feasible and optimal by the grader's evaluator
        sol = r["example_optimum"]
        if kind == "assignment":
            sol = [t - 1 for t in sol]
        assert evaluate(kind, r["instance"], sol) == (True, r["optimum"]), r["id"]


# ------------------------------------------------------------------ hand-made instances


def test_known_counts() -> None:
    # QUBO: unique core on x1..x3 (min at x1=x2=1, x3=0: -1-1-2 = -4) and 3 free variables.
    n = 16
    q = [[0] * n for _ in range(n)]
    q[0][0], q[1][1], q[2][2], q[0][1], q[1][2] = -1, -1, 1, -2, 1
    for i in range(6, n):
        q[i][i] = 1
    assert enumerate_instance("qubo", {"n": n, "Q": q})[:2] == (-4, 8)
    assert solve_qubo({"n": n, "Q": q}) == (-4, 8)
    # knapsack: 5 identical items (v=3, w=2) of which 3 fit; the rest too heavy
    inst = {"n": 16, "values": [3] * 5 + [1] * 11, "weights": [2] * 5 + [100] * 11, "capacity": 6}
    assert enumerate_instance("knapsack", inst)[:2] == (9, comb(5, 3))
    assert solve_knapsack(inst) == (9, comb(5, 3))
    # assignment: constant matrix -> every permutation is optimal
    inst = {"n": 8, "C": [[5] * 8 for _ in range(8)]}
    assert enumerate_instance("assignment", inst)[:2] == (40, factorial(8))
    # subset: equal values, one conflict among 16 items, k = 4
    inst = {"n": 16, "k": 4, "values": [2] * 16, "conflicts": [[0, 1]]}
    assert enumerate_instance("subset", inst)[:2] == (8, comb(16, 4) - comb(14, 2))
    assert solve_subset(inst) == (8, comb(16, 4) - comb(14, 2))
    # portfolio: one sector, identical assets -> any K-set
    inst = {
        "n": 16,
        "K": 3,
        "S": 1,
        "sectors": [0] * 16,
        "mu": [5] * 16,
        "risk": [1] * 16,
        "P": [[2]],
    }
    assert enumerate_instance("portfolio", inst)[:2] == (12 - 6, comb(16, 3))
    # infeasible subset (k larger than any conflict-free set)
    inst = {
        "n": 16,
        "k": 9,
        "values": [1] * 16,
        "conflicts": [[i, j] for i in range(16) for j in range(i + 1, 16) if i < 8],
    }
    assert enumerate_instance("subset", inst) == (None, 0, None)


def test_prompts_render_every_instance() -> None:
    for r in FULL:
        plain = render_prompt(r, "plain")
        explicit = render_prompt(r, "explicit")
        assert plain.startswith("Solve the following optimisation problem exactly.")
        assert "Be careful about alternative optima" in explicit and explicit != plain
        assert explicit.replace("\n\n" + EXPLICIT_PARAGRAPH, "") == plain
        assert '"num_optima": <integer>}' in plain
        assert len(plain) < 4000
    assert VARIANTS == ("plain", "explicit")

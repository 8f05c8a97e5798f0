"""The solver-neutral linear model, the optimal-edge permanent, the size dial and the shipped
uoo-large cohort: everything of issue 51 that needs no solver package (numpy and scipy only)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from breakthrough.tasks.optimum.generator import (
    KINDS,
    LARGE_BINS,
    derive_seed,
    evaluate,
    generate_instance,
    large_bin_of,
)
from breakthrough.tasks.optimum.grader import OptimumGrader
from breakthrough.tasks.optimum.linear import build_model, evaluate_model
from breakthrough.tasks.optimum.permanent import count_assignment_optima, permanent01

COHORTS = Path(__file__).resolve().parents[2] / "cohorts"


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (COHORTS / f"{name}.jsonl").read_text().splitlines()]


def _full_vector(model, decision: list[int]) -> list[int]:
    return decision + [decision[i] * decision[j] for i, j in model.products]


@pytest.mark.parametrize("kind", KINDS)
def test_linear_model_agrees_with_evaluate_on_every_point(kind: str) -> None:
    size = 5 if kind == "assignment" else 8
    for level in (0, 3, 5):
        inst = generate_instance(kind, derive_seed("linear-test", kind, level), level, size)
        model = build_model(kind, inst)
        n = inst["n"]
        if kind == "assignment":
            for perm in itertools.permutations(range(n)):
                onehot = [int(perm[i] == j) for i in range(n) for j in range(n)]
                got = evaluate_model(model, _full_vector(model, onehot))
                assert got == evaluate(kind, inst, list(perm))
                assert model.decode(onehot) == [t + 1 for t in perm]
            bad = [1] * n + [0] * (n * n - n)  # worker 1 takes every task
            assert not evaluate_model(model, _full_vector(model, bad))[0]
        else:
            for m in range(1 << n):
                x = [(m >> i) & 1 for i in range(n)]
                assert evaluate_model(model, _full_vector(model, x)) == evaluate(kind, inst, x)


def test_a_wrong_product_value_is_infeasible() -> None:
    inst = {"n": 2, "Q": [[1, -3], [0, 1]]}
    model = build_model("qubo", inst)
    assert model.products == ((0, 1),)
    assert evaluate_model(model, [1, 1, 1]) == (True, -1)
    assert not evaluate_model(model, [1, 1, 0])[0]
    assert not evaluate_model(model, [0, 1, 1])[0]


def _brute_assignment(c: np.ndarray) -> tuple[int, int]:
    n = c.shape[0]
    costs = [int(sum(c[i, p[i]] for i in range(n))) for p in itertools.permutations(range(n))]
    best = min(costs)
    return best, costs.count(best)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 7), hi=st.integers(0, 4), seed=st.integers(0, 2**32 - 1))
def test_permanent_count_equals_brute_force(n: int, hi: int, seed: int) -> None:
    c = np.random.default_rng(seed).integers(0, hi + 1, (n, n))
    assert count_assignment_optima(c) == _brute_assignment(c)


def test_permanent_of_known_matrices() -> None:
    assert permanent01(np.ones((6, 6), dtype=np.int64)) == 720
    assert permanent01(np.eye(5, dtype=np.int64)) == 1
    assert permanent01(np.zeros((4, 4), dtype=np.int64)) == 0


def test_permanent_equals_enumerator_on_every_committed_assignment() -> None:
    rows = [r for r in _rows("uoo87") if r["kind"] == "assignment"]
    assert len(rows) == 18
    for r in rows:
        assert count_assignment_optima(r["instance"]["C"]) == (r["optimum"], r["n_optima"])


@pytest.mark.parametrize("kind", KINDS)
def test_size_dial_fixes_n_and_keeps_the_other_draws(kind: str) -> None:
    seed = derive_seed("dial", kind)
    plain = generate_instance(kind, seed, 2)
    assert generate_instance(kind, seed, 2, None) == plain  # uoo-v1 draws unchanged
    big = generate_instance(kind, seed, 2, 30 if kind != "assignment" else 12)
    assert big["n"] == (30 if kind != "assignment" else 12)
    assert big == generate_instance(kind, seed, 2, big["n"])  # deterministic


def test_large_bins_cover_every_positive_count_once() -> None:
    for lo_bin, hi_bin in itertools.pairwise(LARGE_BINS):
        assert lo_bin[3] + 1 == hi_bin[2]
    assert large_bin_of(0) is None and large_bin_of(None) is None
    assert [large_bin_of(c) for c in (1, 2, 5, 10, 50, 51, 1000, 1001, 100_000, 100_001)] == [
        "b1", "b2", "b3_5", "b6_10", "b11_50", "b51_1000", "b51_1000", "b1001_100k",
        "b1001_100k", "b100k_p",
    ]  # fmt: skip
    assert large_bin_of(10**30) == "b100k_p"


def test_shipped_large_cohort_rows_are_consistent_and_gradable() -> None:
    """Every uoo-large row: instance regenerated from its seed, bin of its count, a counting
    method and time, and its example optimum feasible at the optimum; a right answer scores 1
    and an undercount is labelled, without enumerating (n up to 100 binary, 16 assignment)."""
    rows = _rows("uoo-large")
    assert len(rows) >= 40
    grader = OptimumGrader()
    for r in rows:
        kind, inst = r["kind"], r["instance"]
        assert generate_instance(kind, int(r["seed"], 16), r["level"], r["size"]) == inst
        assert large_bin_of(r["n_optima"]) == r["bin"]
        assert r["count_method"].split("+")[0] in ("ganak", "permanent", "dp")
        assert r["count_seconds"] > 0
        ex = r["example_optimum"]
        sol = [t - 1 for t in ex] if kind == "assignment" else ex
        assert evaluate(kind, inst, sol) == (True, r["optimum"])
        answer = {"solution": ex, "objective": r["optimum"], "unique": r["n_optima"] == 1}
        right = grader.grade(json.dumps({**answer, "num_optima": r["n_optima"]}), r)
        assert right.correct, r["id"]
        if r["n_optima"] > 1:
            under = grader.grade(json.dumps({**answer, "num_optima": 1, "unique": True}), r)
            assert not under.correct and under.detail["label"] == "count_under"

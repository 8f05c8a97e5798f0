"""The solvers' optimum, count and example optimum equal the exact enumerator's, on
instances the enumerator can reach (a property test drawing new ones in every run; all 87
committed instances in the heavy tier), and a missing solver extra is one line naming it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from breakthrough.errors import BtError
from breakthrough.tasks.optimum.enumerator import enumerate_instance
from breakthrough.tasks.optimum.generator import KINDS, generate_instance
from breakthrough.tasks.optimum.large import check_rows

pytest.importorskip("ortools")
pytest.importorskip("pyganak")
pytest.importorskip("pindakaas")

from breakthrough.tasks.optimum.exact import require_solvers, solve_exact  # noqa: E402

COHORTS = Path(__file__).resolve().parents[2] / "cohorts"
MAX_LEVEL = {"knapsack": 6}


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (COHORTS / f"{name}.jsonl").read_text().splitlines()]


def _agrees(kind: str, inst: dict) -> tuple:
    res = solve_exact(kind, inst, time_limit=60)
    want = enumerate_instance(kind, inst)
    assert (res.optimum, res.n_optima, res.example) == want, (kind, inst, res)
    return want


@settings(max_examples=12, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    level=st.integers(0, 6),
    size=st.integers(6, 11),
    seed=st.integers(0, 2**64 - 1),
)
def test_solver_count_equals_enumerator_on_new_instances(
    kind: str, level: int, size: int, seed: int
) -> None:
    level = min(level, MAX_LEVEL.get(kind, 5))
    if kind == "assignment":
        size = min(size, 7)
    if kind in ("subset", "portfolio"):
        size = max(size, 9)  # k (4-8) or K (3-5) items must fit
    _agrees(kind, generate_instance(kind, seed, level, size))


def test_solver_counts_thousands_of_ties_exactly() -> None:
    """Counts past the CP-SAT enumeration cap rest on Ganak alone: 2^12 optima of a zero QUBO,
    and C(12, 6) of a subset of equal values without conflicts."""
    q = [[0] * 12 for _ in range(12)]
    assert _agrees("qubo", {"n": 12, "Q": q})[1] == 4096
    sub = {"n": 12, "k": 6, "values": [3] * 12, "conflicts": []}
    assert _agrees("subset", sub)[1] == 924


def test_infeasible_instance_has_no_optimum() -> None:
    inst = {"n": 3, "k": 2, "values": [1, 2, 3], "conflicts": [[0, 1], [0, 2], [1, 2]]}
    res = solve_exact("subset", inst)
    assert (res.optimum, res.n_optima, res.example) == (None, 0, None)


def test_missing_solver_extra_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyganak", None)
    with pytest.raises(BtError, match=r"breakthrough\[uoo\]"):
        require_solvers()


def test_check_recounts_shipped_large_rows() -> None:
    """`bt cohorts build uoo-large --check`'s recount on the quickest shipped rows of each kind,
    and a tampered count is caught."""
    rows = _rows("uoo-large")
    quick = []
    for kind in KINDS:
        mine = sorted((r for r in rows if r["kind"] == kind), key=lambda r: r["count_seconds"])
        quick += mine[:1]
    assert check_rows(quick) == []
    bad = dict(quick[0], n_optima=quick[0]["n_optima"] + 1)
    assert check_rows([bad]) and quick[0]["id"] in check_rows([bad])[0]


@pytest.mark.heavy
def test_solver_equals_enumerator_on_all_committed_instances() -> None:
    """All 87 uoo87 instances (about 3 minutes on a 2-core box)."""
    for r in _rows("uoo87"):
        got = _agrees(r["kind"], r["instance"])
        assert got == (r["optimum"], r["n_optima"], r["example_optimum"]), r["id"]


def test_knapsack_table_counts_past_enumeration() -> None:
    """The table's count where the answer is known in closed form: 60 items of weight and value
    1 and capacity 30 have C(60, 30) optimal subsets (past what Ganak counted in 20 s); with
    one item worth more, its subsets are the optima; data it cannot take fall back."""
    from math import comb

    from breakthrough.tasks.optimum.knapsack_dp import applies, count_knapsack_optima

    flat = {"n": 60, "values": [1] * 60, "weights": [1] * 60, "capacity": 30}
    assert count_knapsack_optima(flat) == (30, comb(60, 30))
    best = dict(flat, values=[2] + [1] * 59)
    assert count_knapsack_optima(best) == (31, comb(59, 29))
    assert not applies(dict(flat, values=[-1] + [1] * 59))  # a negative value
    assert not applies({"n": 64, "values": [1] * 64, "weights": [1] * 64, "capacity": 3})
    # agreement with the enumerator through solve_exact, with Ganak as its second count
    inst = generate_instance("knapsack", 5, 6, 14)
    res = solve_exact("knapsack", inst)
    assert res.method.startswith("dp+ganak") and (res.optimum, res.n_optima, res.example) == (
        enumerate_instance("knapsack", inst)
    )

"""An optimum row's instance is checked when its cohort is read: a missing or misshapen field,
an example optimum that is infeasible or misses the row's optimum is one line naming the file,
line and row (a prompt or grader meeting it half-way through a run would raise instead); every
shipped UoO row passes."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from bt_cli import assert_one_line_error, run_bt

from breakthrough.errors import BtError
from breakthrough.tasks.cohorts import load_cohort, parse_cohort_text
from breakthrough.tasks.optimum.generator import KINDS
from breakthrough.tasks.optimum.instance import instance_problems

COHORTS = Path(__file__).resolve().parents[2] / "cohorts"


def _row(kind: str) -> dict:
    for line in (COHORTS / "uoo29.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["kind"] == kind:
            return r
    raise AssertionError(kind)


def _with(row: dict, **inst) -> dict:
    out = copy.deepcopy(row)
    out["instance"].update(inst)
    return out


def _without(row: dict, field: str) -> dict:
    out = copy.deepcopy(row)
    del out["instance"][field]
    return out


@pytest.mark.parametrize("name", ["uoo87", "uoo29", "uoo-large"])
def test_every_shipped_row_passes(name: str) -> None:
    rows = load_cohort(COHORTS / f"{name}.jsonl")
    assert rows and all(instance_problems(r) == [] for r in rows)


def test_each_kind_names_its_missing_or_misshapen_field() -> None:
    cases = {
        "subset": [("conflicts", [[0, 0]]), ("k", 0), ("values", [1, 2])],
        "qubo": [("Q", [[0]])],
        "assignment": [("C", [[1, 2], [3]])],
        "knapsack": [("weights", [-1] * 99), ("capacity", -1)],
        "portfolio": [("sectors", [99] * 40), ("K", 0), ("P", [[1]])],
    }
    assert set(cases) == set(KINDS)
    for kind, bad in cases.items():
        row = _row(kind)
        missing = next(iter(k for k in row["instance"] if k != "n"))
        assert (
            f"instance field {missing!r} is missing" in instance_problems(_without(row, missing))[0]
        )
        for field, value in bad:
            got = instance_problems(_with(row, **{field: value}))
            assert got and f"instance field {field!r} must be" in got[0], (kind, field, got)
    assert "'n' must be a positive integer" in instance_problems(_with(_row("qubo"), n=0))[0]
    assert "field 'kind' must be one of" in instance_problems(dict(_row("qubo"), kind="tsp"))[0]


def test_infeasible_or_wrong_example_optimum_is_named() -> None:
    row = _row("subset")
    n = row["instance"]["n"]
    every_pair = [[a, b] for a in range(n) for b in range(a + 1, n)]  # no two items fit together
    infeasible = _with(row, conflicts=every_pair)
    assert instance_problems(infeasible) == [
        "field 'example_optimum' is not a feasible point of the instance"
    ]
    off = dict(row, optimum=row["optimum"] + 1)
    assert f"not the row's optimum {row['optimum'] + 1}" in instance_problems(off)[0]
    assign = _row("assignment")
    twice = dict(assign, example_optimum=[1] * assign["instance"]["n"])
    assert instance_problems(twice) == [
        "field 'example_optimum' is not a feasible point of the instance"
    ]
    zero_based = dict(assign, example_optimum=[0] * assign["instance"]["n"])
    assert "task numbers 1..n" in instance_problems(zero_based)[0]


def test_loader_names_file_line_and_row() -> None:
    good, bad = _row("knapsack"), _without(_row("qubo"), "Q")
    text = json.dumps(good) + "\n" + json.dumps(bad) + "\n"
    with pytest.raises(BtError) as err:
        parse_cohort_text(text, "mine.jsonl")
    assert str(err.value) == (
        f"mine.jsonl:2: row {bad['id']!r}: instance field 'Q' is missing (kind qubo)"
    )


@pytest.mark.parametrize("problem", ["malformed", "infeasible"])
def test_bt_base_refuses_the_file_in_one_line_and_writes_nothing(
    tmp_path: Path, problem: str
) -> None:
    row = _row("subset")
    if problem == "malformed":
        row = _with(row, values=row["instance"]["values"][:3])
    else:
        n = row["instance"]["n"]
        row = _with(row, conflicts=[[a, b] for a in range(n) for b in range(a + 1, n)])
    cohort = tmp_path / "mine.jsonl"
    cohort.write_text(json.dumps(row) + "\n")
    runs = tmp_path / "runs"
    proc = run_bt("base", "--cohort", cohort, "--runs-dir", runs, "--max-tokens", "4")
    assert_one_line_error(proc, 2, f"{cohort}:1", row["id"])
    assert not runs.exists()

"""The labels a researcher quotes do not move under a refactor: the fixture runs
(`golden_tables.fixture_runs`: every regime of protocol 5.3, an A1 terminal event, top-ups to
plan) classified now give exactly the tables tests/classify/golden/ holds, which the code wrote
before the output schemas existed (values, dtypes, column order)."""

from __future__ import annotations

import pandas as pd
import pytest
from golden_tables import GOLDEN, TABLES, classify, fixture_runs


@pytest.fixture(scope="module")
def classified(tmp_path_factory) -> dict[str, object]:
    runs = fixture_runs(tmp_path_factory.mktemp("golden"))
    return {name: classify(run) for name, run in runs.items()}


@pytest.mark.parametrize("run", ["default", "small"])
@pytest.mark.parametrize("table", TABLES)
def test_classify_tables_equal_the_golden_ones(classified, run: str, table: str) -> None:
    got = pd.read_parquet(classified[run] / f"{table}.parquet")
    want = pd.read_parquet(GOLDEN / run / f"{table}.parquet")
    pd.testing.assert_frame_equal(got, want, check_exact=True)


@pytest.mark.parametrize("run", ["default", "small"])
def test_plan_equals_the_golden_one(classified, run: str) -> None:
    assert (classified[run] / "plan.csv").read_text() == (GOLDEN / run / "plan.csv").read_text()


def test_golden_labels_hold_every_column_family() -> None:
    """The golden labels exercise what the schema declares: R_C per restart budget, T_V per δ,
    an A1 terminal event and the regimes of the fixture's cells."""
    labels = pd.read_parquet(GOLDEN / "default" / "labels.parquet")
    assert [c for c in labels if c.startswith("R_")] == ["R_1024", "R_2048", "R_4096", "R_8192"]
    assert labels["terminal_a1_anchor"].notna().any()
    assert set(labels["regime"]) >= {"prefix_limited", "budget_limited", "terminal_A1"}

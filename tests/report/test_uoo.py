"""UoO metrics on hand-made graded frames, and the published-number fixtures (uniqueness.md 2)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from breakthrough.report.uoo import (
    GRADED_COLUMNS,
    check_accuracy,
    count_agreement,
    count_errors,
    fisher_compare,
    fisher_p,
    graded_frame,
    label_counts,
    leaderboard,
    mcnemar_compare,
    mcnemar_p,
    proportion_ci,
    sign_test,
)


def test_published_fixtures() -> None:
    _odds, p = fisher_p(26, 29, 16, 29)
    assert p == pytest.approx(0.00705, abs=5e-5)
    assert mcnemar_p(4, 8) == pytest.approx(0.388, abs=5e-4)
    assert sign_test(43, 5) == pytest.approx(1.4e-8, rel=0.1)
    lo, hi = proportion_ci(26, 29)
    assert (round(lo, 3), round(hi, 3)) == (0.736, 0.964)
    lo, hi = proportion_ci(16, 29)
    assert (round(lo, 2), round(hi, 2)) == (0.38, 0.72)
    lo, hi = proportion_ci(26, 29, method="exact")  # Clopper-Pearson is wider
    assert lo < 0.736 and hi > 0.964
    assert mcnemar_p(0, 0) == 1.0 and math.isnan(proportion_ci(0, 0)[0])


def _row(run, item, kind, bin_, fixed, *, score=0, optimal=True, count=None, truth=1,
         variant="plain", seed=0):  # fmt: skip
    parsed = count is not None
    return {
        "run": run, "variant": variant, "model": "m", "item_id": item, "kind": kind,
        "bin": bin_, "fixed29": fixed, "seed": seed, "score": score, "optimal": optimal,
        "unique_ok": parsed and (count == 1) == (truth == 1), "count_ok": parsed and count == truth,
        "label": "pass" if score else ("malformed" if not parsed else "count_under"),
        "parse_error": None if parsed else "no_json", "parsed": parsed,
        "claimed_count": float(count) if parsed else float("nan"), "true_count": truth,
        "within_x2": parsed and count >= 1 and truth / 2 <= count <= 2 * truth,
        "count_direction": None if not parsed else
        ("under" if count < truth else "over" if count > truth else "exact"),
    }  # fmt: skip


@pytest.fixture()
def frame() -> pd.DataFrame:
    # run A: 4 items (3 fixed29); run B: same items, other answers; variant explicit = run B
    rows = [
        _row("A", "i1", "qubo", "b1", True, score=1, count=1, truth=1),
        _row("A", "i2", "qubo", "b51p", True, count=30, truth=96),
        _row("A", "i3", "knapsack", "b3_5", True, count=2, truth=4),
        _row("A", "i4", "knapsack", "b3_5", False, score=1, count=4, truth=4),
        _row("B", "i1", "qubo", "b1", True, score=1, count=1, truth=1, variant="explicit"),
        _row("B", "i2", "qubo", "b51p", True, score=1, count=96, truth=96, variant="explicit"),
        _row(
            "B",
            "i3",
            "knapsack",
            "b3_5",
            True,
            count=None,
            truth=4,
            optimal=False,
            variant="explicit",
        ),
        _row("B", "i4", "knapsack", "b3_5", False, count=8, truth=4, variant="explicit"),
    ]
    return pd.DataFrame(rows, columns=list(GRADED_COLUMNS))


def test_leaderboard(frame: pd.DataFrame) -> None:
    lb = leaderboard(frame)
    assert lb["run"].tolist() == ["A", "B"]
    assert lb["k"].tolist() == [1, 2] and lb["n"].tolist() == [3, 3]
    assert lb["score"].tolist() == pytest.approx([1 / 3, 2 / 3])
    assert (lb["ci_low"] < lb["score"]).all() and (lb["score"] < lb["ci_high"]).all()
    cp = leaderboard(frame, method="exact")
    assert (cp["ci_high"] - cp["ci_low"] > lb["ci_high"] - lb["ci_low"]).all()


def test_check_accuracy_by_bin_and_kind(frame: pd.DataFrame) -> None:
    by_bin = check_accuracy(frame, "bin")
    assert by_bin["bin"].tolist() == ["b1", "b3_5", "b51p"]  # canonical order
    assert by_bin["bin_label"].tolist() == ["1", "3-5", ">50"]
    assert by_bin["k"].tolist() == [2, 1, 1] and by_bin["n"].tolist() == [2, 4, 2]
    by_kind = check_accuracy(frame, "kind")
    assert by_kind["kind"].tolist() == ["qubo", "knapsack"]
    assert by_kind["rate"].tolist() == pytest.approx([0.75, 0.25])
    cell = check_accuracy(frame, ["kind", "bin"], check="score")
    assert len(cell) == 3 and cell["n"].sum() == 8


def test_count_errors(frame: pd.DataFrame) -> None:
    ce = count_errors(frame)
    assert ce["n"] == 8 and ce["n_parsed"] == 7 and ce["n_count_exact"] == 4
    assert ce["n_count_wrong"] == 3 and (ce["under"], ce["over"]) == (2, 1)
    assert ce["sign_test_p"] == pytest.approx(1.0)
    # within x2: i1 A/B, i3 A (2 of 4), i4 A, i2 B, i4 B (8 of 4) -> 6 of 8 samples
    assert ce["within_x2_rate"] == pytest.approx(6 / 8)
    assert ce["within_x2_among_wrong"] == pytest.approx(2 / 3)  # 30/96 is not; 2/4 and 8/4 are
    expect = [math.log2(30 / 96), -1.0, 1.0]
    assert ce["mean_log2_ratio"] == pytest.approx(np.mean(expect))
    assert ce["median_abs_log2_ratio"] == pytest.approx(1.0)
    assert ce["count_acc_given_optimal"] == pytest.approx(4 / 7)


def test_fisher_and_mcnemar(frame: pd.DataFrame) -> None:
    f = fisher_compare(frame, "A", "B")
    assert (f["k_a"], f["n_a"], f["k_b"], f["n_b"]) == (1, 3, 2, 3)
    assert f["p"] == pytest.approx(1.0)
    m = mcnemar_compare(frame, "plain", "explicit", check="count_ok")
    # count_ok A: i1 T, i2 F, i3 F, i4 T ; B: i1 T, i2 T, i3 F, i4 F
    assert (m["n_pairs"], m["b_n"], m["c_n"]) == (4, 1, 1)
    assert m["p"] == pytest.approx(1.0)
    m = mcnemar_compare(frame, "A", "B", by="run", check="score")
    assert (m["b_n"], m["c_n"]) == (1, 1)


def test_count_agreement(frame: pd.DataFrame) -> None:
    ag = count_agreement(frame)
    # claims A: 1, 30, 2, 4 ; B: 1, 96, ∅, 8 -> only i1 identical
    assert (ag["runs"], ag["n_items"], ag["n_identical"], ag["n_differ"]) == (2, 4, 1, 3)
    assert ag["mean_pairwise_agreement"] == pytest.approx(0.25)
    assert ag["pass_at_r"] == pytest.approx(3 / 4) and ag["pass_all_r"] == pytest.approx(1 / 4)
    # three repeated runs of the same item set
    f3 = pd.concat([frame[frame.run == "A"], frame[frame.run == "A"].assign(run="A2")])
    ag3 = count_agreement(f3)
    assert ag3["n_identical"] == 4 and ag3["share_identical"] == 1.0


def test_label_counts(frame: pd.DataFrame) -> None:
    lc = label_counts(frame)
    assert lc.loc["B", "malformed"] == 1 and lc.loc["A", "pass"] == 2


def test_graded_frame_regrades_text() -> None:
    item = {
        "id": "uoo/qubo/b1/r9", "kind": "qubo", "bin": "b1", "rep": 0, "n_optima": 1,
        "optimum": -1, "sense": "min", "instance": {"n": 16, "Q": [[-1 if i == j == 0 else 0
        for j in range(16)] for i in range(16)]},
    }  # fmt: skip
    # x1 = 1 minimises; every other variable is free -> 2^15 optima, but the row says 1: make
    # the other diagonals positive so the optimum is unique
    for i in range(1, 16):
        item["instance"]["Q"][i][i] = 1
    sol = [1] + [0] * 15
    samples = pd.DataFrame(
        {
            "problem_id": [item["id"], item["id"], "math/1"],
            "text": [
                f'{{"solution": {sol}, "objective": -1, "unique": true, "num_optima": 1}}',
                "<think>no answer",
                "42",
            ],
            "finish_reason": ["stop", "length", "stop"],
            "model": ["m", "m", "m"],
            "seed": [1, 2, 3],
        }
    )
    gf = graded_frame(samples, {item["id"]: item}, run="r1")
    assert len(gf) == 2 and list(gf.columns) == list(GRADED_COLUMNS)
    assert gf["score"].tolist() == [1, 0] and gf["label"].tolist() == ["pass", "truncated"]
    assert gf["variant"].tolist() == ["plain", "plain"] and bool(gf["fixed29"].all())
    assert math.isnan(gf["claimed_count"].iloc[1])


def test_bt_report_uoo_cli(tmp_path) -> None:
    from typer.testing import CliRunner
    from uoo_fake_runs import cohort_rows, write_uoo_run

    from breakthrough.cli import app

    rows = cohort_rows("uoo29")
    write_uoo_run(tmp_path / "runA", rows, lambda it: it["n_optima"])  # every count right
    write_uoo_run(tmp_path / "runB", rows, lambda it: 1, variant="explicit")  # "unique" always
    write_uoo_run(tmp_path / "runC", rows[:5], lambda it: 1, variant="explicit")
    res = CliRunner().invoke(
        app,
        [
            "report",
            "uoo",
            str(tmp_path / "runA"),
            str(tmp_path / "runB"),
            str(tmp_path / "runC"),
        ],  # fmt: skip
    )
    assert res.exit_code == 0, res.output
    out = res.output
    assert "UoO leaderboard" in out and "29/29" in out and "5/29" in out and "1/5" in out
    assert "Exact-count accuracy by bin" in out and "Exact-count accuracy by kind" in out
    assert "Run vs run" in out and "Run-to-run agreement" in out
    assert "explicit" in out and "plain" in out


def test_by_size_reports_undercount_growth_per_size() -> None:
    """Does undercounting grow with size: accuracy, exact-count rate, undercount share and
    within-2x per run, kind and n."""
    from breakthrough.report.uoo import by_size

    def row(size: int, claimed: float, true: int, parsed: bool = True) -> dict:
        ok = parsed and claimed == true
        return {
            "run": "r", "kind": "subset", "size": size, "parsed": parsed, "score": int(ok),
            "count_ok": ok, "claimed_count": claimed, "true_count": true,
            "within_x2": parsed and true / 2 <= claimed <= 2 * true,
        }  # fmt: skip

    df = pd.DataFrame(
        [row(30, 5, 5), row(30, 3, 5), row(60, 1, 1000), row(60, 4000, 1000),
         row(60, 999, 1000), row(60, float("nan"), 7, parsed=False)]
    )  # fmt: skip
    got = by_size(df).set_index("size")
    assert got.loc[30, "n"] == 2 and got.loc[60, "n"] == 4
    assert got.loc[30, "exact_count"] == 0.5 and got.loc[60, "exact_count"] == 0.0
    assert got.loc[30, "undercount_share"] == 1.0
    assert got.loc[60, "undercount_share"] == 2 / 3  # 1 and 999 low, 4000 high; unparsed out
    assert got.loc[60, "within_x2"] == 0.25


def test_claimed_vs_true_figure_plots_parsed_positive_claims(tmp_path) -> None:
    from breakthrough.report.uoo_figure import claimed_vs_true_figure, figure_points

    df = pd.DataFrame(
        {
            "parsed": [True, True, True, False, True],
            "claimed_count": [3.0, 1.0, 0.0, float("nan"), math.inf],
            "true_count": [5, 1, 2, 7, 9],
            "size": [30, 30, 60, 60, 60],
        }
    )
    shown, left_out = figure_points(df)
    assert list(shown["claimed_count"]) == [3.0, 1.0] and left_out == 3
    out = claimed_vs_true_figure(df, tmp_path / "fig.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

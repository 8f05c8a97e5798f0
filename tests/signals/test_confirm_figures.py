"""The figures of `bt confirm` drawn from known results: the sweep's points sit at their Δ with
their CI, t = 512 is the starred tick, every t has its own tick, the legend lies outside the
data, and the forest shows both AUROCs and the Δ of every fitted row."""

from __future__ import annotations

import pandas as pd

from breakthrough.signals.confirm import sweep_row
from breakthrough.signals.confirm_figures import forest, sweep


def _result(endpoint, variant, delta, lo, hi, status="fit"):
    return {
        "endpoint": endpoint,
        "variant": variant,
        "status": status,
        "reason": None if status == "fit" else "too few problems",
        "delta_auroc": delta if status == "fit" else None,
        "ci": [lo, hi],
        "test_rows": 33,
        "baseline_auroc": 0.8,
        "early_auroc": 0.8 + (delta or 0),
        "success": status == "fit" and lo > 0,
    }


def _table():
    rows = []
    for t, d1, d2 in ((128, -0.083, -0.118), (512, 0.026, -0.090), (2048, -0.133, None)):
        res = [
            _result("primary", "main", d1, d1 - 0.1, d1 + 0.1),
            _result("primary", "level-free", 0.5, 0.4, 0.6),
            _result(
                "secondary",
                "main",
                d2,
                None if d2 is None else d2 - 0.1,
                None if d2 is None else d2 + 0.1,
                "fit" if d2 is not None else "not fit",
            ),
        ]
        rows.append(sweep_row(t, res))
    return pd.DataFrame(rows)


def test_sweep_rows_read_the_main_variant():
    t = _table()
    assert list(t["primary_delta"]) == [-0.083, 0.026, -0.133]
    assert list(t["preregistered"]) == [False, True, False]
    assert t.loc[2, "secondary_status"] == "not fit" and pd.isna(t.loc[2, "secondary_delta"])


def test_sweep_figure_points_ticks_star_and_legend():
    fig = sweep(_table())
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    primary, secondary = fig.axes[:2]
    assert [t.get_text() for t in primary.get_xticklabels()] == ["128", "512*", "2,048"]
    ys = sorted(float(c.get_offsets()[0][1]) for c in primary.collections)
    assert ys == sorted([-0.083, 0.026, -0.133])
    star = [c for c in primary.collections if c.get_offsets()[0][0] == 1]
    assert len(star) == 1 and star[0].get_sizes()[0] > 100
    assert len(secondary.collections) == 2  # t = 2,048 is not fit: no point
    lo, hi = primary.get_ylim()
    assert lo <= -0.233 and hi >= 0.126 and hi < 1  # data-driven, showing every CI
    legend = secondary.get_legend().get_window_extent(r)
    for ax in fig.axes:
        assert not legend.overlaps(ax.get_window_extent(r))


def test_forest_draws_both_aurocs_and_the_delta_of_fitted_rows():
    results = [
        _result("primary", "main", 0.026, -0.054, 0.167),
        _result("primary", "level-free", -0.035, -0.156, 0.024),
        _result("secondary", "main", 0.2, 0.05, 0.3),
        _result("secondary", "level-free", None, None, None, "not fit"),
    ]
    fig = forest(results, 512)
    left, right = fig.axes[:2]
    assert len(left.collections) == 6  # two AUROCs for each of three fitted rows
    deltas = sorted(float(c.get_offsets()[0][0]) for c in right.collections)
    assert deltas == sorted([0.026, -0.035, 0.2])
    assert any("not fit" in t.get_text() for t in right.texts)
    assert [t.get_text() for t in left.get_yticklabels()][0] == "primary · main"

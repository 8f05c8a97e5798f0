"""Per-trajectory summaries (protocol 9.5 / 9.8) against hand-computed values, and `bt signals`
end to end on a tiny-model run (real engine, instrumentation, store)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from breakthrough.cli import app
from breakthrough.engine.sampling import HIDDEN_FIELDS, SIGNAL_FIELDS
from breakthrough.signals.summaries import (
    FROZEN_SUMMARIES,
    STREAM_SUMMARIES,
    max_rise,
    ols_slope,
    robust_slope,
    spectral_summaries,
    summarize,
)
from breakthrough.store import RunStore


def test_robust_slope_ignores_an_outlier_and_thins_to_512_points():
    x = np.arange(10.0)
    y = 2.0 * x + 1.0
    y[7] = 100.0  # one outlier: Theil-Sen keeps slope 2 (OLS would not)
    assert robust_slope(x, y) == pytest.approx(2.0)
    assert ols_slope(x, y) != pytest.approx(2.0)
    # 1,000 points of a line with a kink that only the dropped points carry: 512 kept points
    xs = np.arange(1000.0)
    assert robust_slope(xs, 0.5 * xs) == pytest.approx(0.5)
    assert np.isnan(robust_slope(np.array([1.0]), np.array([2.0])))


def test_ols_slope_and_max_rise_by_hand():
    x = np.array([0.0, 1.0, 2.0, 3.0])
    y = np.array([1.0, 3.0, 2.0, 6.0])
    # slope = sum((x-1.5)(y-3)) / sum((x-1.5)^2) = (3 + 0 - 0.5 + 4.5) / 5 = 1.4
    assert ols_slope(x, y) == pytest.approx(1.4)
    assert max_rise(x, y) == pytest.approx(4.0)  # 2 -> 6
    # a missing token breaks adjacency: the rise across the gap does not count
    assert max_rise(np.array([0.0, 2.0, 3.0]), np.array([0.0, 9.0, 10.0])) == pytest.approx(1.0)


def test_spectral_summaries_of_pure_tones_by_hand():
    n = 256
    t = np.arange(n)
    # A tone at 8 cycles per 256 points (f = 1/32 = 0.03125): centroid near f, all energy low.
    ent, centroid, low = spectral_summaries(np.sin(2 * np.pi * 8 * t / n) + 5.0)
    assert centroid == pytest.approx(8 / 256, abs=2e-3)
    assert low == pytest.approx(1.0, abs=1e-9)
    # The definition written out: median/MAD standardise, Hann window (numpy's symmetric one),
    # an explicit DFT, power without DC normalised, entropy over log(128) frequencies.
    y = np.sin(2 * np.pi * 8 * t / n) + 5.0
    z = (y - np.median(y)) / np.median(np.abs(y - np.median(y)))
    w = 0.5 - 0.5 * np.cos(2 * np.pi * t / (n - 1))
    k = np.arange(1, n // 2 + 1)[:, None]
    re = (z * w * np.cos(2 * np.pi * k * t / n)).sum(1)
    im = (z * w * np.sin(2 * np.pi * k * t / n)).sum(1)
    p = (re**2 + im**2) / (re**2 + im**2).sum()
    assert ent == pytest.approx(-(p * np.log(p)).sum() / np.log(128), abs=1e-9)
    assert centroid == pytest.approx((k[:, 0] / n * p).sum(), abs=1e-12)
    assert p[7] > 0.5  # bin 8 holds most of the energy
    # A tone at 64 cycles (f = 0.25): no low-frequency energy.
    _, centroid_hi, low_hi = spectral_summaries(np.sin(2 * np.pi * 64 * t / n))
    assert centroid_hi == pytest.approx(0.25, abs=2e-3) and low_hi < 1e-6
    # White noise spreads the power: entropy near 1; a constant series has no spectrum.
    white = np.random.default_rng(0).normal(size=4096)
    assert spectral_summaries(white)[0] > 0.85
    assert all(np.isnan(v) for v in spectral_summaries(np.ones(50)))


def test_summarize_by_hand_and_window():
    s = {
        "normalized_entropy": np.array([0.1, 0.3, 0.2, 0.4, 9.0]),
        "surprisal": np.array([1.0, 0.5, 2.5, 1.0, 50.0]),
        "top1_top2_probability_margin": np.array([0.5, 0.3, np.nan, 0.1, 9.0]),
        "successive_js_divergence": np.array([np.nan, 0.2, 0.4, 0.6, 9.0]),
        "successive_kl_divergence": np.array([np.nan, 1.0, 2.0, 3.0, 0.0]),
        "entropy": np.array([1.0, 2.0, 3.0, 4.0, 100.0]),
        "top1_probability": np.array([0.9, 0.8, 0.9, 0.8, 0.0]),
    }
    row = summarize(s, window=4)  # the 5th token is outside the window
    assert list(row) == list(FROZEN_SUMMARIES + STREAM_SUMMARIES) and len(FROZEN_SUMMARIES) == 15
    assert len(STREAM_SUMMARIES) == 8
    assert row["normalized_entropy_mean"] == pytest.approx(0.25)
    assert row["normalized_entropy_std"] == pytest.approx(np.std([0.1, 0.3, 0.2, 0.4]))
    # Theil-Sen: median of pairwise slopes 0.2, 0.05, 0.1, -0.1, 0.05, 0.2 -> 0.075
    assert row["normalized_entropy_robust_slope"] == pytest.approx(0.075)
    assert row["surprisal_mean"] == pytest.approx(1.25)
    assert row["surprisal_max_rise"] == pytest.approx(2.0)
    assert row["top1_top2_probability_margin_mean"] == pytest.approx(0.3)  # NaN skipped
    assert row["successive_js_divergence_mean"] == pytest.approx(0.4)
    assert row["successive_js_divergence_std"] == pytest.approx(np.std([0.2, 0.4, 0.6]))
    assert row["successive_kl_divergence_robust_slope"] == pytest.approx(1.0)
    assert row["stream_entropy_ols_slope"] == pytest.approx(1.0)
    assert row["stream_top1_mean"] == pytest.approx(0.85)
    assert row["stream_top1_ols_slope"] == pytest.approx(-0.1 / 5)  # sum((x-1.5)(y-0.85)) / 5
    # absent series (hidden states) and too-short spectra are NaN, never invented
    for name in (
        "relative_l2_step_mean",
        "cosine_drift_mean",
        "hidden_norm_robust_slope",
        "spectral_successive_js_divergence_entropy",
    ):
        assert np.isnan(row[name])


def test_bt_signals_end_to_end_on_a_tiny_model_run(tmp_path: Path, tiny_model_dir: Path):
    res = CliRunner().invoke(
        app,
        [
            "base",
            "--cohort",
            "demo",
            "--model",
            str(tiny_model_dir),
            "--runs-dir",
            str(tmp_path),
            "--run",
            "t",
            "--max-tokens",
            "24",
            "--limit",
            "3",
        ],
    )
    assert res.exit_code == 0, res.output
    run = tmp_path / "t"
    with RunStore(run, readonly=True) as store:
        frame = store.samples_frame(signals=True)
    for _, row in frame.iterrows():  # the engine's instrumentation reached the store
        assert set(row["signals"]) == set(SIGNAL_FIELDS + HIDDEN_FIELDS)
        assert len(row["signals"]["surprisal"]) == row["n_tokens"]
        np.testing.assert_allclose(row["signals"]["surprisal"], -row["logprobs"], atol=1e-5)
    bt = Path(sys.executable).with_name("bt")
    proc = subprocess.run(
        [str(bt), "signals", str(run), "--window", "16"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "signals.parquet" in proc.stdout
    table = pd.read_parquet(run / "signals.parquet")
    assert len(table) == 3 and set(table["kind"]) == {"base"}
    assert set(FROZEN_SUMMARIES + STREAM_SUMMARIES) <= set(table.columns)
    assert (table["observed_token_count"] == 16).all()
    assert table[list(FROZEN_SUMMARIES + STREAM_SUMMARIES)].notna().all().all()
    # A summary equals its definition applied to the stored series.
    first = frame.iloc[0]
    assert table.iloc[0]["surprisal_mean"] == pytest.approx(
        float(np.mean(-first["logprobs"][:16])), rel=1e-5
    )
    # User mistakes: one line, exit 2, nothing written.
    for args, needle in (
        (["--window", "1"], "--window"),
        (["--out", str(tmp_path / "x.csv")], "--out"),
    ):
        bad = subprocess.run([str(bt), "signals", str(run), *args], capture_output=True, text=True)
        assert bad.returncode == 2 and needle in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "x.csv").exists()
    missing = subprocess.run(
        [str(bt), "signals", str(tmp_path / "nope")], capture_output=True, text=True
    )
    assert missing.returncode == 2 and "not a run directory" in missing.stderr


def test_a_run_without_instrumentation_gives_rows_with_nan_summaries(
    tmp_path: Path, tiny_model_dir: Path
):
    """Stores written without signals (older runs, fixtures) still read: empty signals, and
    `bt signals` writes their rows with the missing summaries NaN."""
    from continue_fixture import make_run

    make_run(tmp_path / "r", tiny_model_dir, {"p1": (4, 4), "p2": (6, 2)}).close()
    with RunStore(tmp_path / "r", readonly=True) as store:
        frame = store.samples_frame(signals=True)
    assert [dict(s) for s in frame["signals"]] == [{}, {}]
    res = CliRunner().invoke(app, ["signals", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    table = pd.read_parquet(tmp_path / "r" / "signals.parquet")
    assert len(table) == 2 and table["normalized_entropy_mean"].isna().all()

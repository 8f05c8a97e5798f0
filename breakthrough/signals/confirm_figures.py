"""The figures of `bt confirm` (protocol 10): the confirmatory forest (test AUROCs and ΔAUROC
with its CI for both endpoints and variants) and the forecast-point sweep (ΔAUROC with its CI
per t, two panels: primary, secondary; the pre-registered t = 512 starred).

matplotlib's object API on the Agg canvas (no pyplot): safe in tests and workers. The rules of
the report figures hold here too: ranges from the data, legends outside the data, every
forecast point a tick of its own.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from breakthrough.plotting import new_figure, save_png
from breakthrough.protocol import (
    CONFIRM_FORECAST_TOKEN,
    CONFIRM_SECONDARY_BUDGET,
    CONFIRM_SECONDARY_THRESHOLD,
)
from breakthrough.stats import missing

PREREGISTERED = CONFIRM_FORECAST_TOKEN
ENDPOINT_TITLES = {
    "primary": "Primary: base-run success",
    "secondary": f"Secondary: R({CONFIRM_SECONDARY_BUDGET}) ≥ "
    f"{CONFIRM_SECONDARY_THRESHOLD} (non-instant cells)",
}


def _finite(v: Any) -> bool:
    return not missing(v)


def _limits(values: Sequence[float], pad: float = 0.05) -> tuple[float, float]:
    """A data-driven range that always shows 0 (the no-effect line)."""
    vals = [float(v) for v in values if _finite(v)] + [0.0]
    lo, hi = min(vals), max(vals)
    span = max(hi - lo, 0.1)
    return lo - pad * span - 0.02, hi + pad * span + 0.02


def _note(text: str, width: int = 60) -> str:
    """A note drawn in a figure, wrapped at word boundaries (never cut mid-word)."""
    return "\n".join(textwrap.wrap(text, width, break_long_words=False)) or text


def forest(results: Sequence[Mapping[str, Any]], forecast_token: int):
    """Left: test AUROC of the baseline (open) and of baseline + early blocks (filled) per
    endpoint × variant; right: ΔAUROC with its 95% clustered-bootstrap CI (green when the CI
    is above 0); "not fit" rows say why they are empty, the whole reason wrapped. The legend
    names only what is drawn."""
    fig = new_figure(11, 1.4 + 0.75 * max(1, len(results)))
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.2]}, sharey=True)
    ys = np.arange(len(results))
    names = [f"{r['endpoint']} · {r['variant']}" for r in results]
    deltas = []
    drawn: set[str] = set()
    for y, r in zip(ys, results, strict=True):
        if r["status"] != "fit":
            right.text(
                0.02,
                y,
                _note(f"not fit: {r.get('reason') or 'no reason given'}"),
                va="center",
                fontsize=7,
                color="#666",
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},  # over the 0 line
                transform=right.get_yaxis_transform(),
            )
            continue
        drawn.add("points")
        left.scatter(
            [r["baseline_auroc"]], [y], s=50, facecolors="none", edgecolors="#444", zorder=3
        )
        left.scatter([r["early_auroc"]], [y], s=30, color="#1f77b4", zorder=3)
        lo, hi = r["ci"]
        ok = _finite(lo) and lo > 0
        if _finite(lo) and _finite(hi):
            right.plot([lo, hi], [y, y], color="#2ca02c" if ok else "#444", lw=2)
            deltas += [lo, hi]
            drawn.add("success" if ok else "no success")
        right.scatter([r["delta_auroc"]], [y], color="#2ca02c" if ok else "black", zorder=3)
        deltas.append(r["delta_auroc"])
        right.annotate(
            f"{r['delta_auroc']:+.3f}  (n = {r['test_rows']})",
            (r["delta_auroc"], y),
            textcoords="offset points",
            xytext=(0, 7),
            ha="center",
            fontsize=7,
        )
    left.set_yticks(ys, names, fontsize=8)
    left.set_ylim(len(results) - 0.5, -0.7)
    left.set_xlim(-0.02, 1.02)
    left.axvline(0.5, color="#999", lw=0.8, ls=":")
    left.set_xlabel("test AUROC")
    left.set_title("Test AUROC", fontsize=9)
    right.axvline(0, color="black", lw=0.8)
    right.set_xlim(*_limits(deltas))
    right.set_xlabel("ΔAUROC (early blocks − baseline), 95% CI")
    right.set_title(f"ΔAUROC at forecast token {forecast_token:,}", fontsize=9)
    from matplotlib.lines import Line2D

    entries = [
        (
            "points",
            Line2D(
                [],
                [],
                marker="o",
                ls="",
                markerfacecolor="none",
                markeredgecolor="#444",
                label="baseline",
            ),
        ),
        ("points", Line2D([], [], marker="o", ls="", color="#1f77b4", label="+ early blocks")),
        ("success", Line2D([], [], color="#2ca02c", lw=2, label="CI above 0 (success)")),
        ("no success", Line2D([], [], color="#444", lw=2, label="CI includes 0")),
    ]
    handles = [h for what, h in entries if what in drawn]  # only what the figure shows
    if handles:
        right.legend(
            handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False
        )
    fig.suptitle("Confirmatory early-signal test (protocol 9.5)", fontsize=10)
    return fig


def sweep(table: pd.DataFrame):
    """ΔAUROC with its CI per forecast point t (main variant), one panel per endpoint, the
    pre-registered t = 512 starred; n (test rows) under each point; one tick per t. The legend
    names only what is drawn (no star entry when t = 512 was not swept or not fit)."""
    fig = new_figure(12, 4.0)
    axes = fig.subplots(1, 2, sharey=True)
    ts = [int(t) for t in table["forecast_token"]] if len(table) else []
    x = np.arange(len(ts))
    vals = [
        v
        for e in ENDPOINT_TITLES
        for c in ("delta", "ci_low", "ci_high")
        if f"{e}_{c}" in table
        for v in table[f"{e}_{c}"]
    ]
    drawn: set[str] = set()
    for ax, e in zip(axes, ENDPOINT_TITLES, strict=True):
        for xi, (_, r) in zip(x, table.iterrows(), strict=True):
            d = r.get(f"{e}_delta")
            if not _finite(d):
                ax.text(xi, 0, "not fit", ha="center", va="bottom", fontsize=7, color="#666")
                continue
            lo, hi = r.get(f"{e}_ci_low"), r.get(f"{e}_ci_high")
            if _finite(lo) and _finite(hi):
                ax.plot([xi, xi], [lo, hi], color="#444", lw=1.5)
                drawn.add("ci")
            star = int(r["forecast_token"]) == PREREGISTERED
            drawn.add("star" if star else "post-hoc")
            ax.scatter(
                [xi],
                [d],
                marker="*" if star else "o",
                s=160 if star else 35,
                color="#d62728" if star else "#1f77b4",
                zorder=3,
            )
            ax.annotate(
                f"n = {int(r.get(f'{e}_n') or 0)}",
                (xi, d),
                textcoords="offset points",
                xytext=(8, -3),
                fontsize=7,
            )
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xticks(x, [f"{t:,}" + ("*" if t == PREREGISTERED else "") for t in ts])
        ax.set_xlim(-0.5, max(0.5, len(ts) - 0.5))
        ax.set_xlabel("forecast token t" + (" (* pre-registered)" if PREREGISTERED in ts else ""))
        ax.set_title(ENDPOINT_TITLES[e], fontsize=9)
    axes[0].set_ylim(*_limits(vals))
    axes[0].set_ylabel("ΔAUROC (early blocks − baseline), 95% CI")
    from matplotlib.lines import Line2D

    entries = [
        (
            "star",
            Line2D(
                [],
                [],
                marker="*",
                ls="",
                color="#d62728",
                ms=12,
                label=f"t = {PREREGISTERED} (pre-registered)",
            ),
        ),
        ("post-hoc", Line2D([], [], marker="o", ls="", color="#1f77b4", label="post-hoc t")),
        ("ci", Line2D([], [], color="#444", lw=1.5, label="95% CI")),
    ]
    handles = [h for what, h in entries if what in drawn]  # only what the figure shows
    if handles:
        axes[1].legend(
            handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False
        )
    fig.suptitle("Forecast-point sweep (post-hoc)", fontsize=10)
    return fig


def forest_figure(results: Sequence[Mapping[str, Any]], forecast_token: int, path: Path) -> Path:
    return save_png(forest(results, forecast_token), path)


def sweep_figure(table: pd.DataFrame, path: Path) -> Path:
    return save_png(sweep(table), path)

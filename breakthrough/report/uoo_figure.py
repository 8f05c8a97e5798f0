"""The UoO count figure: each parsed answer's claimed number of optima against the true
number, both on log axes, one colour per problem size n, with the diagonal (exact) and the
within-2x band. Points below the diagonal are undercounts: the figure shows at a glance whether
they pile up as n grows, which the by-size table states in numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from breakthrough.plotting import new_figure, save_png


def figure_points(df: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """(the answers the figure plots, how many it cannot): an unparsed answer, a claim of 0 or
    an absurd one (infinite) has no place on a log axis; the title counts them instead."""
    claimed = df["claimed_count"].astype(float)
    ok = df["parsed"].astype(bool) & (claimed >= 1) & np.isfinite(claimed)
    return df[ok], int((~ok).sum())


def claimed_vs_true_figure(df: pd.DataFrame, path: Path) -> Path:
    """Write the figure (PNG) for a graded frame."""
    fig = new_figure(6.5, 5.0)
    ax = fig.add_subplot(1, 1, 1)
    shown, left_out = figure_points(df)
    sizes = sorted(shown["size"].unique()) if "size" in shown else []
    for size in sizes:
        d = shown[shown["size"] == size]
        ax.scatter(d["true_count"], d["claimed_count"].astype(float), s=22, alpha=0.75,
                   label=f"n = {size} ({len(d)})")  # fmt: skip
    top = max([2.0, *shown["true_count"].astype(float), *shown["claimed_count"].astype(float)])
    line = np.array([1.0, top * 2])
    ax.plot(line, line, color="black", linewidth=1, label="exact")
    ax.fill_between(line, line / 2, line * 2, color="grey", alpha=0.15, label="within 2x")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("true number of optima")
    ax.set_ylabel("claimed number of optima")
    ax.set_title(
        f"Claimed vs true count by size ({len(shown)} answers"
        + (f"; {left_out} without a count >= 1 not shown)" if left_out else ")")
    )
    if sizes:
        ax.legend(loc="upper left", fontsize=8)
    return save_png(fig, path)

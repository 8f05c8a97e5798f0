"""PNG figures of protocol section 10: regime map, restart dose-response, matched compute,
top-up resolution and swimmer plot.

Figures are drawn with matplotlib's object API on the Agg canvas (no pyplot, no global
backend switch), so this module is safe to call from tests and worker processes. Each figure
has a builder that returns the matplotlib Figure (what the tests inspect) and `all_figures`
saves them as PNGs. Rules every figure keeps, because a reader compares them side by side:
one model order and one colour per model everywhere (`model_order`, `model_colors`), integer
ticks on counts, axis ranges from the data and the run's own restart budgets (never the
study's 1,024-8,192 or 16,384 constants), legends outside the data area, measured rates
drawn at their value (R = 1 at 1, no vertical jitter), and every row, line and bar that stands
for problems names them (`problem_of`) as far as space allows. A figure the runs hold no data
for is not drawn: `figure_gaps` says why, and the page shows that line instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from breakthrough.classify.regimes import FIGURE_CLASSES, collapse_regime
from breakthrough.plotting import new_figure, save_png

# One colour per figure class (the collapsed regimes of `regimes.FIGURE_CLASS`, which is where
# the class names are decided).
CLASS_COLORS = {
    "instant": "#4c72b0",
    "budget-limited": "#55a868",
    "prefix-limited": "#c44e52",
    "no-crossing": "#8172b3",
    "terminal": "#dd8452",
    "unsolved": "#c8c8c8",
}
MODEL_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")
FIGURES = (
    "regime_map",
    "dose_response",
    "matched_compute",
    "topup_resolution",
    "swimmer",
    "label_hardening",
)  # every `bt classify`
ARM_FIGURES = ("budget_falsification",)  # runs with a second probe arm (--add-budget)
NAMED_MAX = 40  # problems named one by one on an axis up to this many (else grouped)
LINES_NAMED_MAX = 20  # dose-response lines labelled with their problem up to this many


def save(fig, path: str | Path) -> Path:
    """Write a figure as PNG (tight bounding box, so outside legends are kept)."""
    return save_png(fig, path)


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666")
    ax.set_xticks([])
    ax.set_yticks([])


def problem_of(row) -> str:
    """The problem a row stands for: its problem_id, else the part of its cell id after the
    model ("model:problem")."""
    pid = row.get("problem_id") if hasattr(row, "get") else getattr(row, "problem_id", None)
    if pid is not None and not pd.isna(pid):
        return str(pid)
    cid = str(row.get("cell_id") if hasattr(row, "get") else getattr(row, "cell_id", ""))
    return cid.split(":", 1)[-1]


def _integer_axis(axis) -> None:
    """Counts: integer ticks only."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def model_order(labels: pd.DataFrame) -> list[str]:
    """The one model order of every figure and panel: sorted names."""
    return sorted(map(str, labels["model"].unique())) if len(labels) else []


def model_colors(models: Sequence[str]) -> dict[str, str]:
    """One colour per model, fixed by its place in `model_order`."""
    return {m: MODEL_PALETTE[i % len(MODEL_PALETTE)] for i, m in enumerate(models)}


def _present(models: Sequence[str], frame: pd.DataFrame) -> list[str]:
    """The models of `models` that have rows in frame, in that order."""
    have = set(map(str, frame["model"].unique())) if len(frame) else set()
    return [m for m in models if m in have]


def regime_map(labels: pd.DataFrame, models: Sequence[str] | None = None):
    """Top: models × problems strip coloured by collapsed class, grouped by stage and sorted
    within stage by class (last model first). Bottom: stacked class counts per model, the
    models in the same top-to-bottom order as the strip."""
    models = list(models) if models is not None else model_order(labels)
    named = len(labels["problem_id"].unique()) <= NAMED_MAX if len(labels) else False
    longest = max((len(str(p)) for p in labels["problem_id"].unique()), default=0) if named else 0
    fig = new_figure(11, 2.4 + 0.9 * max(1, len(models)) + 0.06 * longest)
    top, bottom = fig.subplots(2, 1, gridspec_kw={"height_ratios": [1.2, 1]})
    if labels.empty:
        _empty(top, "no cells")
        _empty(bottom, "")
        return fig
    cls = labels.assign(
        cls=labels["regime"].map(collapse_regime),
        stage=labels.get("stage", pd.Series("", index=labels.index)).fillna(""),
    )
    idx = {c: i for i, c in enumerate(FIGURE_CLASSES)}
    wide = cls.pivot_table(index="problem_id", columns="model", values="cls", aggfunc="first")
    stage = cls.groupby("problem_id")["stage"].first()
    order = sorted(
        wide.index,
        key=lambda p: (
            str(stage[p]),
            *[idx.get(wide.loc[p].get(m), 99) for m in reversed(models)],
            p,
        ),
    )
    mat = np.full((len(models), len(order)), np.nan)
    for i, m in enumerate(models):
        for j, p in enumerate(order):
            v = wide.loc[p].get(m) if m in wide.columns else None
            if isinstance(v, str):
                mat[i, j] = idx[v]
    from matplotlib.colors import ListedColormap

    cmap = ListedColormap([CLASS_COLORS[c] for c in FIGURE_CLASSES]).with_extremes(bad="white")
    top.imshow(
        np.ma.masked_invalid(mat),
        aspect="auto",
        cmap=cmap,
        vmin=-0.5,
        vmax=len(FIGURE_CLASSES) - 0.5,
        interpolation="nearest",
    )
    top.set_yticks(range(len(models)), models)
    stages = [str(stage[p]) for p in order]
    ticks, names = [], []
    for j, s in enumerate(stages):
        if j == 0 or s != stages[j - 1]:
            if j:
                top.axvline(j - 0.5, color="black", lw=1)
            ticks.append(j)
            names.append(s or "-")
    if len(order) <= NAMED_MAX:  # every column named by its problem, stages above the strip
        top.set_xticks(range(len(order)), [str(p) for p in order], rotation=90, fontsize=7)
        for j, name in zip(ticks, names, strict=True):
            top.text(
                j - 0.5,
                1.02,
                name,
                transform=top.get_xaxis_transform(),
                fontsize=8,
                ha="left",
                va="bottom",
                color="#444",
            )
    else:
        top.set_xticks(ticks, names, rotation=0, ha="left", fontsize=8)
    noun = "problem" if len(order) == 1 else "problems"
    top.set_title(f"Class per problem and model ({len(order)} {noun}, grouped by stage)", pad=16)
    left = np.zeros(len(models))
    for c in FIGURE_CLASSES:
        counts = np.array([(cls[cls["model"] == m]["cls"] == c).sum() for m in models])
        bottom.barh(range(len(models)), counts, left=left, color=CLASS_COLORS[c], label=c)
        for y, (l0, n) in enumerate(zip(left, counts, strict=True)):
            if n:
                bottom.text(l0 + n / 2, y, str(int(n)), ha="center", va="center", fontsize=8)
        left += counts
    bottom.set_yticks(range(len(models)), models)
    bottom.invert_yaxis()  # first model on top, as in the strip above
    bottom.set_xlim(0, max(1, left.max()))
    _integer_axis(bottom.xaxis)
    bottom.set_xlabel("cells")
    bottom.set_title("Cells per class and model", fontsize=10)
    bottom.legend(
        ncol=len(FIGURE_CLASSES),
        fontsize=8,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.4),
        frameon=False,
    )
    if len(order) <= NAMED_MAX:  # room for the rotated problem names between the panels
        fig.set_layout_engine("constrained")
    else:
        fig.subplots_adjust(hspace=0.45)
    return fig


def dose_cells(
    labels: pd.DataFrame, budgets: Sequence[int], models: Sequence[str] | None = None
) -> dict[str, tuple[list[int], pd.DataFrame, dict[str, int]]]:
    """Per model, what the dose-response shows (protocol 9.2): the restart budgets measured
    for it, its non-instant cells measured at every one of them, and how many of its cells
    are left out and why ({"instant": k, "missing a budget": k}); models without such cells
    are absent. One rule for the figure, its legend and the headline's n."""
    models = list(models) if models is not None else model_order(labels)
    out: dict[str, tuple[list[int], pd.DataFrame, dict[str, int]]] = {}
    if labels.empty:
        return out
    for m in _present(models, labels):
        every = labels[labels["model"] == m]
        g = every[~every["instant"].astype(bool)]
        cs = _restart_columns(g, budgets)
        if not cs:
            continue
        kept = g.dropna(subset=[f"R_{c}" for c in cs])
        if kept.empty:
            continue
        out[m] = (
            cs,
            kept,
            {"instant": int(len(every) - len(g)), "missing a budget": int(len(g) - len(kept))},
        )
    return out


def _restart_columns(frame: pd.DataFrame, budgets: Sequence[int]) -> list[int]:
    """The restart budgets measured for at least one row of frame."""
    return [
        c for c in sorted(budgets) if f"R_{c}" in frame.columns and frame[f"R_{c}"].notna().any()
    ]


def dose_response(
    labels: pd.DataFrame,
    budgets: Sequence[int],
    tau: float = 0.75,
    models: Sequence[str] | None = None,
):
    """Left: R(C) per non-instant cell over the run's restart budgets (lines jittered
    sideways only). Right: share of cells with R(C) ≥ τ per budget and model (per model, the
    cells measured at every budget that model has, as in 9.2)."""
    models = list(models) if models is not None else model_order(labels)
    colors = model_colors(models)
    fig = new_figure(12, 4.2)
    left, right = fig.subplots(1, 2)
    drawn = []
    rng = np.random.default_rng(0)
    cells = dose_cells(labels, budgets, models)
    n_lines = sum(len(g) for _, g, _ in cells.values())
    ends: dict[tuple[str, float], list[str]] = {}  # (model, last R) → problems ending there
    for m, (cs, g, _) in cells.items():
        cols = [f"R_{c}" for c in cs]
        drawn.append(m)
        x = np.log2(cs)
        for _, row in g.iterrows():
            xs = x + rng.uniform(-0.06, 0.06)
            ys = row[cols].to_numpy(float)
            left.plot(xs, ys, color=colors[m], alpha=0.35, lw=1, marker="o", ms=2.5)
            ends.setdefault((m, round(float(ys[-1]), 3)), []).append(problem_of(row))
        share = [float((g[c] >= tau - 1e-9).mean()) for c in cols]
        right.plot(
            x,
            share,
            "o-",
            color=colors[m],
            label=f"{m} (n = {len(g)} non-instant cells measured at every budget)",
        )
        for xi, s in zip(x, share, strict=True):
            right.annotate(
                f"{100 * s:.0f}%",
                (xi, s),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=8,
                color=colors[m],
            )
    if n_lines <= LINES_NAMED_MAX:  # each line named by its problem at its end
        last = math.log2(max(max(cs) for cs, _, _ in cells.values())) if cells else 0.0
        for (m, y), names in ends.items():  # one name a line, stacked above the end point
            left.annotate(
                "\n".join(sorted(names)),
                (last, y),
                textcoords="offset points",
                xytext=(-6, 4),
                fontsize=6,
                ha="right",
                va="bottom",
                color=colors[m],
            )
    if not drawn:
        _empty(left, "no non-instant cells with restarts")
        _empty(right, "")
        return fig
    data = labels[~labels["instant"].astype(bool)]
    measured = _restart_columns(data, budgets)
    for ax in (left, right):
        ax.set_xticks(np.log2(measured), [f"{c:,}" for c in measured])
        lo, hi = math.log2(min(measured)), math.log2(max(measured))
        pad = max(0.25, 0.08 * (hi - lo))
        ax.set_xlim(lo - pad, hi + pad)
        ax.set_xlabel("restart reasoning budget C (tokens)")
        ax.set_ylim(-0.05, 1.15)
    left.axhline(tau, ls="--", color="#444", lw=1)
    left.text(
        1.0, tau, f" τ = {tau:g}", transform=left.get_yaxis_transform(), va="center", fontsize=8
    )
    left.set_ylabel("R(C): restart solve rate")
    left.set_title("Restart dose-response per cell")
    right.set_ylabel(f"share of cells with R(C) ≥ {tau:g}")
    right.set_title("Share solved from scratch")
    right.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    fig.subplots_adjust(wspace=0.3)
    return fig


def matched_compute(labels: pd.DataFrame, budgets: Sequence[int], tau: float = 0.75):
    """One row per cell with an A1 terminal event: matched restart R̂(t + B) (grey), pooled
    prefix rate (orange), R at the largest restart budget (open triangle); * marks proxies
    (t + B beyond the largest restart budget)."""
    data = labels[labels["terminal_a1_anchor"].notna()] if len(labels) else labels
    fig = new_figure(9, 1.6 + 0.35 * max(1, len(data)))
    ax = fig.subplots()
    if data.empty:
        _empty(ax, "no A1 terminal events")
        return fig
    c_max = max(budgets)
    data = data.sort_values(["terminal_a1_anchor", "terminal_a1_advantage", "cell_id"])
    ys = np.arange(len(data))
    ax.scatter(
        data["terminal_a1_matched_restart"],
        ys,
        color="#888",
        label="matched restart R̂(t + B)",
        zorder=3,
    )
    ax.scatter(data["terminal_a1_rate"], ys, color="#dd8452", label="pooled prefix rate", zorder=3)
    if f"R_{c_max}" in data.columns:
        ax.scatter(
            data[f"R_{c_max}"],
            ys,
            marker="^",
            facecolors="none",
            edgecolors="black",
            label=f"R({c_max:,})",
            zorder=3,
        )
    ax.axvline(tau, ls="--", color="#444", lw=1, label=f"τ = {tau:g}")
    names = [
        f"{r.cell_id} (t = {int(r.terminal_a1_anchor):,}){'*' if r.terminal_a1_proxy else ''}"
        for r in data.itertuples()
    ]
    ax.set_yticks(ys, names, fontsize=8)
    ax.set_ylim(-0.6, len(data) - 0.4)
    ax.set_xlim(-0.05, 1.05)
    ax.set_xlabel(f"solve rate (* = t + B beyond {c_max:,}: R̂ is a proxy)")
    ax.set_title("Matched compute: long prefixes vs restarts (A1 terminal cells)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    return fig


def topup_resolution(
    probe_cells: pd.DataFrame,
    tau: float = 0.75,
    target: int = 8,
    models: Sequence[str] | None = None,
):
    """Per model: histogram of pooled successes over probe cells with `target` graded
    branches; low (≤ target/4), intermediate, high (≥ τ·target) coloured."""
    data = probe_cells[probe_cells["n"] == target] if len(probe_cells) else probe_cells
    order = list(models) if models is not None else model_order(data)
    present = _present(order, data) if len(data) else []
    fig = new_figure(5 * max(1, len(present)), 3.6)
    axes = np.atleast_1d(fig.subplots(1, max(1, len(present))))
    if not present:
        _empty(axes[0], f"no probe cells with {target} branches")
        return fig
    hi_k = math.ceil(tau * target - 1e-9)
    lo_k = target // 4
    for ax, m in zip(axes, present, strict=False):
        g = data[data["model"] == m]
        k = g["k"].to_numpy(int)
        counts = np.bincount(k, minlength=target + 1)
        colors = [
            "#c8c8c8" if i <= lo_k else "#55a868" if i >= hi_k else "#dd8452"
            for i in range(target + 1)
        ]
        ax.bar(range(target + 1), counts, color=colors)
        for i in np.flatnonzero(counts):  # each bar names its problems (t: the probed anchor)
            rows = g[g["k"].astype(int) == i]
            names = [
                f"{problem_of(r)} t={int(r['anchor']):,}" if "anchor" in rows else problem_of(r)
                for _, r in rows.iterrows()
            ]
            text = "\n".join(names) if len(names) <= 3 else f"{len(names)} problems"
            ax.text(
                i,
                counts[i] * 0.5,
                text,
                rotation=90,
                ha="center",
                va="center",
                fontsize=7,
                color="#222",
            )
        low, mid, high = (
            counts[: lo_k + 1].sum(),
            counts[lo_k + 1 : hi_k].sum(),
            counts[hi_k:].sum(),
        )
        ax.set_title(
            f"{m}: ≤{lo_k}: {low}, {lo_k + 1}–{hi_k - 1}: {mid}, ≥{hi_k}: {high}", fontsize=9
        )
        ax.set_xticks(range(target + 1))
        ax.set_ylim(0, max(1, counts.max()) * 1.1)
        _integer_axis(ax.yaxis)
        ax.set_xlabel(f"pooled successes of {target}")
    axes[0].set_ylabel("probe cells")
    return fig


def swimmer_range(labels: pd.DataFrame, first_anchor: int | None = None) -> tuple[float, float]:
    """The anchor range of the swimmer plot (log2): from half the first probed anchor (or, when
    not given, the smallest anchor the labels hold) to twice the largest anchor, so it follows
    the run's anchors (a run probed from t = 32 starts at 16, whatever its labels hold)."""
    vals = [float(first_anchor)] if first_anchor else []
    for col in ("interval_lower", "interval_upper", "censoring_time", "final_anchor"):
        if col in labels.columns:
            vals += [float(v) for v in labels[col].dropna() if float(v) > 0]
    if not vals:
        return 1.0, 2.0
    lo = 2.0 ** (math.floor(math.log2(min(vals))) - 1)
    hi = 2.0 ** (math.ceil(math.log2(max(vals))) + 1)
    return lo, hi


def swimmer_drawn(labels: pd.DataFrame) -> pd.Series:
    """The rows the swimmer plot draws: an observed event (an interval) or a censoring anchor
    (an arrow); a row with neither would be an empty line."""
    event = labels["event_observed"].fillna(False).astype(bool) & labels["interval_upper"].notna()
    return event | (
        ~labels["event_observed"].fillna(False).astype(bool) & labels["censoring_time"].notna()
    )


def swimmer(
    labels: pd.DataFrame,
    tau: float = 0.75,
    models: Sequence[str] | None = None,
    first_anchor: int | None = None,
):
    """One row per trajectory: event intervals (lower → upper, log2 axis), censored rows as
    arrows from the first probed anchor (`first_anchor`, default the axis start) to the
    censoring anchor (pink when the final rate is ≥ τ: A1 candidates)."""
    order = list(models) if models is not None else model_order(labels)
    if len(labels):
        labels = labels[swimmer_drawn(labels)]
    present = _present(order, labels)
    n_max = max([int((labels["model"] == m).sum()) for m in present] or [1])
    fig = new_figure(6 * max(1, len(present)) + 1.5, 2.0 + 0.16 * n_max)
    axes = np.atleast_1d(fig.subplots(1, max(1, len(present)), squeeze=False)[0])
    if not present:
        _empty(axes[0], "no cells")
        return fig
    from matplotlib.ticker import FuncFormatter

    floor, top = swimmer_range(labels, first_anchor)
    start = float(first_anchor) if first_anchor else floor
    styles = {
        "instant event": "#4c72b0",
        "delayed event": "#c44e52",
        "censored": "#999",
        f"censored, last p ≥ {tau:g}": "#e377c2",
    }
    for ax, m in zip(axes, present, strict=False):
        g = labels[labels["model"] == m].copy()
        g["_sort"] = (
            g["interval_upper"].astype(float).fillna(1e12)
            + g["censoring_time"].astype(float).fillna(0) / 1e6
        )
        g = g.sort_values(["_sort", "cell_id"])
        g = g[swimmer_drawn(g)]  # a row with no interval and no censoring anchor stays out
        n_inst = n_del = n_cen = 0
        names = []
        for y, r in enumerate(g.itertuples()):
            if bool(r.event_observed):
                lo = max(floor, float(r.interval_lower or 0))
                up = float(r.interval_upper)
                instant = bool(r.instant)
                n_inst += instant
                n_del += not instant
                ax.plot(
                    [lo, up],
                    [y, y],
                    lw=2,
                    color=styles["instant event" if instant else "delayed event"],
                )
                ax.plot([up], [y], "|", color="black", ms=5)
            else:
                n_cen += 1
                end = float(r.censoring_time) if not pd.isna(r.censoring_time) else start
                hot = (
                    r.final_rate is not None
                    and not pd.isna(r.final_rate)
                    and r.final_rate >= tau - 1e-9
                )
                color = styles[f"censored, last p ≥ {tau:g}" if hot else "censored"]
                ax.annotate(
                    "",
                    xy=(end, y),
                    xytext=(min(start, end), y),
                    arrowprops={"arrowstyle": "->", "lw": 1, "color": color},
                )
                if end <= start:  # censored at the first anchor: a zero-length arrow, so a dot
                    ax.plot([end], [y], "o", ms=3, color=color)
            lvl = getattr(r, "level", None)
            names.append(
                problem_of(r) + (f" L{int(lvl)}" if lvl is not None and not pd.isna(lvl) else "")
            )
        ax.set_xscale("log", base=2)
        ax.set_xlim(floor, top)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.set_ylim(-0.6, max(1, len(g)) - 0.4)
        ax.set_yticks(range(len(names)), names, fontsize=7 if len(names) <= NAMED_MAX else 4)
        ax.set_xlabel("anchor t (reasoning tokens)")
        ax.set_title(f"{m}: instant {n_inst}, delayed {n_del}, censored {n_cen}", fontsize=9)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, lw=2, label=name) for name, c in styles.items()]
    fig.legend(
        handles=handles,
        loc="lower center",
        ncol=len(handles),
        fontsize=8,
        frameon=False,
        bbox_to_anchor=(0.5, -0.02 - 0.5 / fig.get_figheight()),
    )
    return fig


def label_hardening(hardening: pd.DataFrame, models: Sequence[str] | None = None):
    """Per model: trajectories per category (instant / interior / A1 event / censored) before
    and after the top-ups, as two stacked bars (appendix; counts from
    `classify.hardening.hardening_counts`)."""
    from breakthrough.classify.hardening import AFTER, BEFORE, CATEGORIES

    order = (
        list(models)
        if models is not None
        else (sorted(map(str, hardening["model"].unique())) if len(hardening) else [])
    )
    present = _present(order, hardening) if len(hardening) else []
    fig = new_figure(3.4 * max(1, len(present)) + 1.6, 3.8)
    axes = np.atleast_1d(fig.subplots(1, max(1, len(present)), squeeze=False)[0])
    if not present:
        _empty(axes[0], "no trajectories")
        return fig
    colors = dict(zip(CATEGORIES, ("#4c72b0", "#c44e52", "#dd8452", "#c8c8c8"), strict=True))
    top = float(hardening[list(CATEGORIES)].sum(axis=1).max())
    for ax, m in zip(axes, present, strict=False):
        g = hardening[hardening["model"] == m].set_index("when")
        bottom = np.zeros(2)
        for c in CATEGORIES:
            vals = np.array([int(g.loc[st, c]) if st in g.index else 0 for st in (BEFORE, AFTER)])
            ax.bar([0, 1], vals, bottom=bottom, color=colors[c], label=c, width=0.6)
            for x, (b0, v) in enumerate(zip(bottom, vals, strict=True)):
                if v:
                    ax.text(x, b0 + v / 2, str(int(v)), ha="center", va="center", fontsize=8)
            bottom += vals
        ax.set_xticks([0, 1], [BEFORE, AFTER], fontsize=8)
        ax.set_ylim(0, max(1.0, top) * 1.05)
        _integer_axis(ax.yaxis)
        ax.set_title(m, fontsize=9)
    axes[0].set_ylabel("trajectories")
    axes[-1].legend(
        *axes[-1].get_legend_handles_labels(),
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        frameon=False,
    )
    fig.suptitle("Label hardening: trajectory labels before vs after the top-ups", fontsize=10)
    return fig


def budget_falsification(a2: pd.DataFrame, models: Sequence[str] | None = None):
    """Per A2 trajectory (protocol 3.6): the first τ-crossing anchor at B1 (ring) and at B2
    (dot), log2 anchor axis, rows "index (L level)" (index: the row of a2.csv, 1-based); a
    trajectory without a crossing at B2 gets a cross at the last anchor the arm probed
    (`last_anchor_2`)."""
    order = (
        list(models)
        if models is not None
        else (sorted(map(str, a2["model"].unique())) if len(a2) else [])
    )
    present = _present(order, a2) if len(a2) else []
    n_max = max([int((a2["model"] == m).sum()) for m in present] or [1])
    fig = new_figure(5.5 * max(1, len(present)) + 1.8, 1.6 + 0.32 * n_max)
    axes = np.atleast_1d(fig.subplots(1, max(1, len(present)), squeeze=False)[0])
    if not present:
        _empty(axes[0], "no second probe arm")
        return fig
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    a2 = a2.reset_index(drop=True).assign(index=lambda f: f.index + 1)
    if "last_anchor_2" not in a2.columns:
        a2 = a2.assign(last_anchor_2=a2["first_crossing_1"])
    nocross = a2["first_crossing_2"].isna()
    vals = [float(v) for c in ("first_crossing_1", "first_crossing_2") for v in a2[c].dropna()]
    vals += [float(v) for v in a2.loc[nocross, "last_anchor_2"].dropna()]
    lo = 2.0 ** (math.floor(math.log2(min(vals))) - 1) if vals else 8.0
    hi = 2.0 ** (math.ceil(math.log2(max(vals))) + 1) if vals else 1024.0
    b1 = int(a2["budget_1"].iloc[0])
    b2s = sorted({int(b) for b in a2["budget_2"]})
    for ax, m in zip(axes, present, strict=False):
        g = a2[a2["model"] == m]
        ys = np.arange(len(g))
        for y, r in zip(ys, g.itertuples(), strict=True):
            if not pd.isna(r.first_crossing_1):
                ax.scatter(
                    [float(r.first_crossing_1)],
                    [y],
                    s=90,
                    facecolors="none",
                    edgecolors="#1f77b4",
                    linewidths=1.6,
                    zorder=3,
                )
            if not pd.isna(r.first_crossing_2):
                ax.scatter([float(r.first_crossing_2)], [y], s=25, color="#d62728", zorder=4)
            elif not pd.isna(r.last_anchor_2):
                ax.scatter(
                    [float(r.last_anchor_2)], [y], marker="x", s=60, color="#d62728", zorder=4
                )
        names = [
            (problem_of(r) if "problem_id" in g or "cell_id" in g else str(int(r.index)))
            + (f" (L{int(r.level)})" if not pd.isna(r.level) else "")
            for r in g.itertuples()
        ]
        ax.set_yticks(ys, names, fontsize=8)
        ax.set_ylim(-0.6, len(g) - 0.4)
        ax.invert_yaxis()
        ax.set_xscale("log", base=2)
        ax.set_xlim(lo, hi)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.set_xlabel("first τ-crossing anchor t (reasoning tokens)")
        ax.set_title(f"{m}: {len(g)} trajector{'y' if len(g) == 1 else 'ies'}", fontsize=9)
    b2 = ", ".join(f"{b:,}" for b in b2s)
    handles = [
        Line2D(
            [],
            [],
            marker="o",
            ls="",
            markerfacecolor="none",
            markeredgecolor="#1f77b4",
            ms=9,
            label=f"B = {b1:,}",
        ),
        Line2D([], [], marker="o", ls="", color="#d62728", ms=5, label=f"B = {b2}"),
        Line2D(
            [],
            [],
            marker="x",
            ls="",
            color="#d62728",
            label=f"no crossing at B = {b2} (at its last anchor)",
        ),
    ]
    axes[-1].legend(
        handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False
    )
    fig.suptitle(
        "Continuation-budget falsification (A2): first τ-crossing per trajectory",
        fontsize=10,
        y=1.0 + 0.3 / fig.get_figheight(),
    )  # above the panel titles
    return fig


def shown(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with each model alias replaced by its display name (`names.model_name`)."""
    from breakthrough.report.names import model_name

    if frame is None or not len(frame) or "model" not in frame.columns:
        return frame
    return frame.assign(model=frame["model"].map(model_name))


def all_figures(
    labels: pd.DataFrame,
    probe_cells: pd.DataFrame,
    out_dir: str | Path,
    *,
    budgets: Sequence[int],
    tau: float = 0.75,
    target: int = 8,
    hardening: pd.DataFrame | None = None,
    a2: pd.DataFrame | None = None,
) -> dict[str, Path]:
    """The report figures as PNGs in out_dir (one model order for all, models under their
    display names); name → path. `budgets`: the restart budgets of the runs (their stored
    protocols); the label-hardening figure is drawn when `hardening` has rows, the A2 budget
    falsification when `a2` has rows (a run with a second probe arm)."""
    out_dir = Path(out_dir)
    gaps = figure_gaps(
        labels, probe_cells, budgets=budgets, target=target, hardening=hardening, a2=a2
    )
    labels, probe_cells = shown(labels), shown(probe_cells)
    models = model_order(labels)
    first = int(probe_cells["anchor"].min()) if len(probe_cells) else None
    build = {
        "regime_map": lambda: regime_map(labels, models),
        "dose_response": lambda: dose_response(labels, budgets, tau, models),
        "matched_compute": lambda: matched_compute(labels, budgets, tau),
        "topup_resolution": lambda: topup_resolution(probe_cells, tau, target, models),
        "swimmer": lambda: swimmer(labels, tau, models, first_anchor=first),
        "label_hardening": lambda: label_hardening(shown(hardening), models),
        "budget_falsification": lambda: budget_falsification(shown(a2), models),
    }
    return {
        name: save(make(), out_dir / f"{name}.png")
        for name, make in build.items()
        if name not in gaps
    }


def figure_gaps(
    labels: pd.DataFrame,
    probe_cells: pd.DataFrame,
    *,
    budgets: Sequence[int],
    target: int = 8,
    hardening: pd.DataFrame | None = None,
    a2: pd.DataFrame | None = None,
) -> dict[str, str]:
    """The figures the data cannot fill, name → why ("no data because …" on the page): the
    same tests the builders make before they would draw an empty frame."""
    gaps: dict[str, str] = {}
    if labels.empty:
        for name in ("regime_map", "swimmer"):
            gaps[name] = "no cell has labels yet (no probed cells)"
    elif not swimmer_drawn(labels).any():
        gaps["swimmer"] = "no cell has a T_F interval or a censoring anchor"
    if not dose_cells(labels, budgets):
        gaps["dose_response"] = "no non-instant cell has restarts measured at every budget"
    if labels.empty or labels["terminal_a1_anchor"].isna().all():
        gaps["matched_compute"] = "no cell has an A1 terminal event"
    if probe_cells.empty or not (probe_cells["n"] == target).any():
        gaps["topup_resolution"] = f"no probed anchor holds {target} branches (no top-ups ran)"
    if hardening is None or hardening.empty:
        gaps["label_hardening"] = "no trajectories to compare before and after the top-ups"
    if a2 is None or a2.empty:
        gaps["budget_falsification"] = "the runs hold no second probe arm (A2)"
    return gaps

"""PNG figures of protocol section 10 (regime map, restart dose-response, matched compute,
top-up resolution, swimmer) plus a per-cell p(t) / R̂(t + B) / adv(t) plot.

Figures are drawn with matplotlib's object API on the Agg canvas (no pyplot, no global
backend switch), so this module is safe to call from tests and worker processes. Each function
takes data frames from `breakthrough.classify.regimes` and writes one PNG, returning its path.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import pandas as pd

from breakthrough.classify.regimes import FIGURE_CLASSES, collapse_regime

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
MODEL_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")
DPI = 100


def _figure(w: float, h: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    return path


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666")
    ax.set_xticks([])
    ax.set_yticks([])


def _models(labels: pd.DataFrame) -> list[str]:
    return sorted(map(str, labels["model"].unique())) if len(labels) else []


def regime_map(labels: pd.DataFrame, path: str | Path) -> Path:
    """Top: models × problems strip coloured by collapsed class, grouped by stage and sorted
    within stage by class (last model first). Bottom: stacked class counts per model."""
    models = _models(labels)
    fig = _figure(11, 2.0 + 0.9 * max(1, len(models)))
    top, bottom = fig.subplots(2, 1, gridspec_kw={"height_ratios": [1.2, 1]})
    if labels.empty:
        _empty(top, "no cells")
        _empty(bottom, "")
        return _save(fig, path)
    cls = labels.assign(cls=labels["regime"].map(collapse_regime),
                        stage=labels.get("stage", pd.Series("", index=labels.index)).fillna(""))
    idx = {c: i for i, c in enumerate(FIGURE_CLASSES)}
    wide = cls.pivot_table(index="problem_id", columns="model", values="cls", aggfunc="first")
    stage = cls.groupby("problem_id")["stage"].first()
    order = sorted(wide.index, key=lambda p: (str(stage[p]),
                                              *[idx.get(wide.loc[p].get(m), 99)
                                                for m in reversed(models)], p))
    mat = np.full((len(models), len(order)), np.nan)
    for i, m in enumerate(models):
        for j, p in enumerate(order):
            v = wide.loc[p].get(m) if m in wide.columns else None
            if isinstance(v, str):
                mat[i, j] = idx[v]
    from matplotlib.colors import ListedColormap

    cmap = ListedColormap([CLASS_COLORS[c] for c in FIGURE_CLASSES]).with_extremes(bad="white")
    top.imshow(np.ma.masked_invalid(mat), aspect="auto", cmap=cmap, vmin=-0.5,
               vmax=len(FIGURE_CLASSES) - 0.5, interpolation="nearest")
    top.set_yticks(range(len(models)), models)
    stages = [str(stage[p]) for p in order]
    ticks, names = [], []
    for j, s in enumerate(stages):
        if j == 0 or s != stages[j - 1]:
            if j:
                top.axvline(j - 0.5, color="black", lw=1)
            ticks.append(j)
            names.append(s or "-")
    top.set_xticks(ticks, names, rotation=0, ha="left", fontsize=8)
    top.set_title(f"Regime map ({len(order)} problems)")
    left = np.zeros(len(models))
    for c in FIGURE_CLASSES:
        counts = np.array([(cls[cls["model"] == m]["cls"] == c).sum() for m in models])
        bottom.barh(models, counts, left=left, color=CLASS_COLORS[c], label=c)
        for y, (l0, n) in enumerate(zip(left, counts)):
            if n:
                bottom.text(l0 + n / 2, y, str(int(n)), ha="center", va="center", fontsize=8)
        left += counts
    bottom.set_xlim(0, max(1, left.max()))
    bottom.set_xlabel("cells")
    bottom.legend(ncol=len(FIGURE_CLASSES), fontsize=7, loc="upper center",
                  bbox_to_anchor=(0.5, -0.35), frameon=False)
    return _save(fig, path)


def dose_response(labels: pd.DataFrame, path: str | Path, *, tau: float = 0.75,
                  budgets=(1024, 2048, 4096, 8192)) -> Path:
    """Left: R(C) per non-instant cell (jittered lines). Right: share of cells with R(C) ≥ τ
    per budget and model (cells with any budget missing are dropped, as in 9.2)."""
    fig = _figure(11, 4)
    left, right = fig.subplots(1, 2)
    cols = [f"R_{c}" for c in budgets]
    data = labels[~labels["instant"].astype(bool)].dropna(subset=cols) if len(labels) else labels
    if data.empty:
        _empty(left, "no non-instant cells with a full restart panel")
        _empty(right, "")
        return _save(fig, path)
    rng = np.random.default_rng(0)
    models = _models(data)
    x = np.log2(budgets)
    for mi, m in enumerate(models):
        g = data[data["model"] == m]
        color = MODEL_COLORS[mi % len(MODEL_COLORS)]
        for _, row in g.iterrows():
            y = row[cols].to_numpy(float) + rng.uniform(-0.02, 0.02, len(cols))
            left.plot(x + rng.uniform(-0.05, 0.05), y, color=color, alpha=0.35, lw=1)
        share = [(g[c] >= tau - 1e-9).mean() for c in cols]
        right.plot(x, share, "o-", color=color, label=f"{m} (n = {len(g)})")
        for xi, s in zip(x, share):
            right.annotate(f"{100 * s:.0f}%", (xi, s), textcoords="offset points",
                           xytext=(0, 6), ha="center", fontsize=8, color=color)
    for ax in (left, right):
        ax.set_xticks(x, [f"{c:,}" for c in budgets])
        ax.set_xlabel("restart reasoning budget C")
        ax.set_ylim(-0.05, 1.1)
    left.axhline(tau, ls="--", color="#444", lw=1)
    left.set_ylabel("R(C)")
    left.set_title("Restart dose-response per cell")
    right.set_ylabel(f"share of cells with R(C) ≥ {tau:g}")
    right.set_title("Share solved from scratch")
    right.legend(fontsize=8)
    return _save(fig, path)


def matched_compute(labels: pd.DataFrame, path: str | Path, *, tau: float = 0.75) -> Path:
    """One row per cell with an A1 terminal event: matched restart R̂(t + B) (grey), pooled
    prefix rate (orange), R(8,192) (open triangle); * marks proxies (t + B beyond 8,192)."""
    data = labels[labels["terminal_a1_anchor"].notna()] if len(labels) else labels
    fig = _figure(8, 1.5 + 0.35 * max(1, len(data)))
    ax = fig.subplots()
    if data.empty:
        _empty(ax, "no A1 terminal events")
        return _save(fig, path)
    data = data.sort_values(["terminal_a1_anchor", "terminal_a1_advantage", "cell_id"])
    ys = np.arange(len(data))
    ax.scatter(data["terminal_a1_matched_restart"], ys, color="#888", label="matched restart "
               "R̂(t + B)", zorder=3)
    ax.scatter(data["terminal_a1_rate"], ys, color="#dd8452", label="pooled prefix rate", zorder=3)
    if "R_8192" in data.columns:
        ax.scatter(data["R_8192"], ys, marker="^", facecolors="none", edgecolors="black",
                   label="R(8,192)", zorder=3)
    ax.axvline(tau, ls="--", color="#444", lw=1)
    names = [f"{r.cell_id} (t = {int(r.terminal_a1_anchor)}){'*' if r.terminal_a1_proxy else ''}"
             for r in data.itertuples()]
    ax.set_yticks(ys, names, fontsize=8)
    ax.set_xlim(-0.05, 1.05)
    ax.set_xlabel("solve rate")
    ax.set_title("Matched compute: long prefixes vs restarts (A1 terminal cells)")
    ax.legend(fontsize=8, loc="lower left")
    return _save(fig, path)


def topup_resolution(probe_cells: pd.DataFrame, path: str | Path, *, tau: float = 0.75,
                     target: int = 8) -> Path:
    """Per model: histogram of pooled successes over probe cells with `target` graded
    branches; low (≤ target/4), intermediate, high (≥ τ·target) coloured."""
    data = probe_cells[probe_cells["n"] == target] if len(probe_cells) else probe_cells
    models = _models(data) if len(data) else []
    fig = _figure(5 * max(1, len(models)), 3.5)
    axes = np.atleast_1d(fig.subplots(1, max(1, len(models))))
    if not models:
        _empty(axes[0], f"no probe cells with {target} branches")
        return _save(fig, path)
    hi_k = math.ceil(tau * target - 1e-9)
    lo_k = target // 4
    for ax, m in zip(axes, models):
        k = data[data["model"] == m]["k"].to_numpy(int)
        counts = np.bincount(k, minlength=target + 1)
        colors = ["#c8c8c8" if i <= lo_k else "#55a868" if i >= hi_k else "#dd8452"
                  for i in range(target + 1)]
        ax.bar(range(target + 1), counts, color=colors)
        low, mid, high = counts[:lo_k + 1].sum(), counts[lo_k + 1:hi_k].sum(), counts[hi_k:].sum()
        ax.set_title(f"{m}: ≤{lo_k}: {low}, {lo_k + 1}–{hi_k - 1}: {mid}, ≥{hi_k}: {high}",
                     fontsize=9)
        ax.set_xticks(range(target + 1))
        ax.set_xlabel(f"pooled successes of {target}")
    axes[0].set_ylabel("probe cells")
    return _save(fig, path)


def swimmer(labels: pd.DataFrame, path: str | Path, *, tau: float = 0.75) -> Path:
    """One row per trajectory: event intervals (lower → upper, log2 axis), censored rows as
    arrows to the censoring anchor (pink when the final rate is ≥ τ: A1 candidates)."""
    models = _models(labels)
    n_max = max([int((labels["model"] == m).sum()) for m in models] or [1])
    fig = _figure(6 * max(1, len(models)), 1.5 + 0.12 * n_max)
    axes = np.atleast_1d(fig.subplots(1, max(1, len(models)), squeeze=False)[0])
    if not models:
        _empty(axes[0], "no cells")
        return _save(fig, path)
    floor = 8
    for ax, m in zip(axes, models):
        g = labels[labels["model"] == m].copy()
        g["_sort"] = g["interval_upper"].astype(float).fillna(1e9) + \
            g["censoring_time"].astype(float).fillna(0) / 1e6
        g = g.sort_values(["_sort", "cell_id"])
        n_inst = n_del = n_cen = 0
        for y, r in enumerate(g.itertuples()):
            if bool(r.event_observed):
                lo = max(floor, float(r.interval_lower or 0))
                up = float(r.interval_upper)
                instant = bool(r.instant)
                n_inst += instant
                n_del += not instant
                ax.plot([lo, up], [y, y], color="#4c72b0" if instant else "#c44e52", lw=2)
                ax.plot([up], [y], "|", color="black", ms=5)
            else:
                n_cen += 1
                end = float(r.censoring_time) if not pd.isna(r.censoring_time) else floor
                hot = r.final_rate is not None and not pd.isna(r.final_rate) and \
                    r.final_rate >= tau - 1e-9
                ax.annotate("", xy=(end, y), xytext=(floor, y),
                            arrowprops={"arrowstyle": "->", "color": "#e377c2" if hot else "#999",
                                        "lw": 1})
            lvl = getattr(r, "level", None)
            if lvl is not None and not pd.isna(lvl):
                ax.text(9000, y, f"L{int(lvl)}", fontsize=6, va="center")
        ax.set_xscale("log", base=2)
        ax.set_xlim(floor, 16384)
        ax.set_ylim(-1, max(1, len(g)))
        ax.set_yticks([])
        ax.set_xlabel("anchor t (thinking tokens)")
        ax.set_title(f"{m}: instant {n_inst}, delayed {n_del}, censored {n_cen}", fontsize=9)
    return _save(fig, path)


def cell_plot(curve: pd.DataFrame, row: dict, path: str | Path, *, tau: float = 0.75,
              delta: float = 0.5) -> Path:
    """One cell: p(t) per probed anchor, R̂(t + B) (and the conservative R̂), adv(t); the T_F
    interval shaded, T_V(δ) marked."""
    fig = _figure(7, 3.6)
    ax = fig.subplots()
    c = curve.sort_values("anchor")
    if c.empty:
        _empty(ax, "no probed anchors")
        return _save(fig, path)
    t = c["anchor"].to_numpy(float)
    ax.plot(t, c["p"], "o-", color="#1f77b4", label="p(t; B)")
    if c["r_hat"].notna().any():
        ax.plot(t, c["r_hat"], "s--", color="#888", label="R̂(t + B)")
        ax.plot(t, c["r_hat_cons"], ":", color="#bbb", label="R̂ conservative")
        ax.plot(t, c["adv"], "^-", color="#c44e52", label="adv(t)")
        prox = c[c["proxy"].astype(bool)]
        if len(prox):
            ax.scatter(prox["anchor"], prox["r_hat"], facecolors="none", edgecolors="black",
                       s=90, label="proxy R(8,192)", zorder=4)
    ax.axhline(tau, ls="--", color="#1f77b4", lw=0.8)
    ax.axhline(delta, ls=":", color="#c44e52", lw=0.8)
    ax.axhline(0, color="black", lw=0.5)
    lo, up = row.get("interval_lower"), row.get("interval_upper")
    if row.get("event_observed") and up is not None and not pd.isna(up):
        ax.axvspan(max(float(lo or 0), t.min() / 2), float(up), color="#4c72b0", alpha=0.12,
                   label="T_F interval")
    tv = row.get("t_v")
    if tv is not None and not pd.isna(tv):
        ax.axvline(float(tv), color="#c44e52", lw=1.5, alpha=0.6, label="T_V(δ)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(t, [str(int(a)) for a in t], fontsize=7, rotation=45)
    ax.set_ylim(-1.05, 1.05)
    ax.set_xlabel("anchor t")
    ax.set_title(f"{row.get('cell_id')}: {row.get('regime')}", fontsize=10)
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    return _save(fig, path)


def all_figures(labels: pd.DataFrame, probe_cells: pd.DataFrame, out_dir: str | Path, *,
                tau: float = 0.75, target: int = 8,
                budgets=(1024, 2048, 4096, 8192)) -> dict[str, Path]:
    """The five run-level figures into out_dir; name → path."""
    out_dir = Path(out_dir)
    return {
        "regime_map": regime_map(labels, out_dir / "regime_map.png"),
        "dose_response": dose_response(labels, out_dir / "dose_response.png", tau=tau,
                                       budgets=budgets),
        "matched_compute": matched_compute(labels, out_dir / "matched_compute.png", tau=tau),
        "topup_resolution": topup_resolution(probe_cells, out_dir / "topup_resolution.png",
                                             tau=tau, target=target),
        "swimmer": swimmer(labels, out_dir / "swimmer.png", tau=tau),
    }


def cell_svg(curve: pd.DataFrame, row: dict, *, tau: float = 0.75, delta: float = 0.5,
             width: int = 640, height: int = 300) -> str:
    """The per-cell plot of `cell_plot` as an inline SVG string (no matplotlib: cheap enough
    for one page per cell): p(t), R̂(t + B), conservative R̂, adv(t) on a log2 anchor axis,
    τ and δ lines, the T_F interval shaded and T_V(δ) marked."""
    ml, mr, mt, mb = 44, 150, 24, 40
    c = curve.sort_values("anchor")
    title = html.escape(f"{row.get('cell_id')}: {row.get('regime')}")
    head = (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
            f"font-family='sans-serif' font-size='10'><rect width='100%' height='100%' "
            f"fill='white'/><text x='{ml}' y='14' font-size='12'>{title}</text>")
    if c.empty:
        return head + f"<text x='{ml}' y='{height / 2}'>no probed anchors</text></svg>"
    t = c["anchor"].to_numpy(float)
    lo_x, hi_x = math.log2(max(1.0, t.min() / 1.5)), math.log2(t.max() * 1.5)
    pw, ph = width - ml - mr, height - mt - mb

    def X(a):
        return ml + (math.log2(max(a, 1e-9)) - lo_x) / (hi_x - lo_x) * pw

    def Y(v):
        return mt + (1 - (v + 1.05) / 2.1) * ph

    parts = [head, f"<rect x='{ml}' y='{mt}' width='{pw}' height='{ph}' fill='none' "
                   f"stroke='#999'/>"]
    lo, up = row.get("interval_lower"), row.get("interval_upper")
    if row.get("event_observed") and up is not None and not pd.isna(up):
        x0 = X(max(float(lo or 0), 2 ** lo_x))
        parts.append(f"<rect x='{x0:.1f}' y='{mt}' width='{max(1.0, X(float(up)) - x0):.1f}' "
                     f"height='{ph}' fill='#4c72b0' opacity='0.12'/>")
    for v, color, dash, name in ((tau, "#1f77b4", "4,3", "τ"), (delta, "#c44e52", "2,3", "δ"),
                                 (0.0, "#000", "", "")):
        parts.append(f"<line x1='{ml}' x2='{ml + pw}' y1='{Y(v):.1f}' y2='{Y(v):.1f}' "
                     f"stroke='{color}' stroke-width='0.8' stroke-dasharray='{dash}'/>")
    for v in (-1, -0.5, 0, 0.5, 1):
        parts.append(f"<text x='{ml - 4}' y='{Y(v) + 3:.1f}' text-anchor='end'>{v:g}</text>")
    for a in t:
        parts.append(f"<text x='{X(a):.1f}' y='{mt + ph + 14}' text-anchor='middle' "
                     f"font-size='8'>{int(a)}</text>")
    parts.append(f"<text x='{ml + pw / 2}' y='{height - 6}' text-anchor='middle'>anchor t "
                 f"(log2)</text>")
    tv = row.get("t_v")
    if tv is not None and not pd.isna(tv):
        parts.append(f"<line x1='{X(float(tv)):.1f}' x2='{X(float(tv)):.1f}' y1='{mt}' "
                     f"y2='{mt + ph}' stroke='#c44e52' stroke-width='1.5' opacity='0.6'/>")
    series = [("p", "#1f77b4", "", "p(t; B)"), ("r_hat", "#888", "5,3", "R̂(t + B)"),
              ("r_hat_cons", "#bbb", "2,2", "R̂ conservative"), ("adv", "#c44e52", "", "adv(t)")]
    for i, (col, color, dash, name) in enumerate(series):
        vals = c[col].to_numpy(float)
        pts = [(X(a), Y(v)) for a, v in zip(t, vals) if not math.isnan(v)]
        if not pts:
            continue
        parts.append("<polyline fill='none' stroke='{}' stroke-width='1.5' "
                     "stroke-dasharray='{}' points='{}'/>".format(
                         color, dash, " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)))
        parts.extend(f"<circle cx='{x:.1f}' cy='{y:.1f}' r='2.5' fill='{color}'/>"
                     for x, y in pts)
        ly = mt + 12 + 14 * i
        parts.append(f"<line x1='{ml + pw + 10}' x2='{ml + pw + 28}' y1='{ly - 3}' y2='{ly - 3}' "
                     f"stroke='{color}' stroke-width='2' stroke-dasharray='{dash}'/>"
                     f"<text x='{ml + pw + 32}' y='{ly}'>{html.escape(name)}</text>")
    prox = c[c["proxy"].astype(bool)]
    for a, v in zip(prox["anchor"], prox["r_hat"]):
        parts.append(f"<circle cx='{X(float(a)):.1f}' cy='{Y(float(v)):.1f}' r='6' fill='none' "
                     f"stroke='black'/>")
    if len(prox):
        parts.append(f"<text x='{ml + pw + 10}' y='{mt + 12 + 14 * 4}'>○ proxy R(8,192)</text>")
    return "".join(parts) + "</svg>"

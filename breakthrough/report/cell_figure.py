"""The per-cell plot of the report as an inline SVG: p(t; B), R̂(t + B), the conservative R̂
and adv(t) over the probed anchors, with the τ and δ lines, the T_F interval shaded and T_V(δ)
marked, and a legend beside the plot that names every one of them with its value.

Hand-written SVG rather than matplotlib: a report has one page per cell (hundreds), and a few
kilobytes of SVG per page cost nothing to write and stay sharp at any zoom. The y range follows
the data (down to the lowest advantage); the x axis is log2 over the probed anchors.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd
from markupsafe import Markup, escape

from breakthrough.report.names import regime_name
from breakthrough.stats import missing

WIDTH, HEIGHT = 980, 470
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 66, 320, 44, 66
MIN_LABEL_GAP = 34  # px between two anchor labels; closer ones get a tick but no label

# (column, colour, dash, marker, width, legend text) in drawing order. p(t) is wide with open
# circles and adv(t) thin with filled triangles on top of it, so both stay visible where they
# coincide (R̂ = 0).
SERIES = (
    ("r_hat_cons", "#b0b0b0", "2,3", "none", 1.8, "R̂ conservative (larger bracket)"),
    ("r_hat", "#7f7f7f", "6,4", "square", 1.8, "R̂(t + B): restart at equal tokens"),
    ("p", "#1f77b4", "", "circle", 4.0, "p(t; B): continuation solve rate"),
    ("adv", "#c44e52", "", "triangle", 1.6, "adv(t) = p(t; B) − R̂(t + B)"),
)
LEGEND_ORDER = ("p", "r_hat", "r_hat_cons", "adv")
TAU_COLOR, DELTA_COLOR, BAND_COLOR, TV_COLOR = "#1f77b4", "#c44e52", "#4c72b0", "#8c1d40"


def _esc(s: object) -> str:
    """Text inside the SVG, escaped as the page templates escape (markupsafe)."""
    return str(escape(str(s)))


def _marker(kind: str, x: float, y: float, color: str) -> str:
    if kind == "circle":
        return (
            f"<circle cx='{x:.1f}' cy='{y:.1f}' r='6' fill='none' stroke='{color}' "
            f"stroke-width='2'/>"
        )
    if kind == "square":
        return f"<rect x='{x - 3.5:.1f}' y='{y - 3.5:.1f}' width='7' height='7' fill='{color}'/>"
    if kind == "triangle":
        return (
            f"<path d='M{x:.1f},{y - 4.5:.1f} L{x + 4.5:.1f},{y + 3.5:.1f} "
            f"L{x - 4.5:.1f},{y + 3.5:.1f} Z' fill='{color}'/>"
        )
    return ""


def y_range(curve: pd.DataFrame) -> tuple[float, float]:
    """(lowest, highest) y of the plot: from the lowest plotted value (rounded down to a
    quarter, never above 0) to 1."""
    vals = [
        float(v) for col, *_ in SERIES if col in curve.columns for v in curve[col] if not missing(v)
    ]
    low = min([0.0, *vals])
    return math.floor(low * 4 - 1e-9) / 4 if low < 0 else 0.0, 1.0


def _legend(x: float, y: float, entries: list[tuple[str, str]]) -> list[str]:
    """Legend rows (swatch SVG, text) from (x, y), 22 px apart."""
    out = [f"<text x='{x}' y='{y}' font-size='13' font-weight='bold'>Legend</text>"]
    for i, (swatch, text) in enumerate(entries):
        yy = y + 22 * (i + 1)
        out.append(
            f"<g transform='translate({x},{yy - 5})'>{swatch}</g>"
            f"<text x='{x + 34}' y='{yy}' font-size='12'>{_esc(text)}</text>"
        )
    return out


def _line_swatch(color: str, dash: str = "", width: float = 2, marker: str = "none") -> str:
    return (
        f"<line x1='0' x2='26' y1='0' y2='0' stroke='{color}' stroke-width='{width}' "
        f"stroke-opacity='{0.55 if width > 3 else 1}' stroke-dasharray='{dash}'/>"
        + _marker(marker, 13, 0, color)
    )


def cell_svg(
    curve: pd.DataFrame,
    row: Mapping,
    *,
    tau: float = 0.75,
    delta: float = 0.5,
    budget: int | None = None,
) -> Markup:
    """The plot of one cell (its `cell_curves` rows and its label row) as SVG markup (every
    text in it escaped), which the cell page's template inserts as it is."""
    pw = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    ph = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    title = f"{row.get('cell_id')}: {regime_name(row.get('regime'))}"
    head = (
        f"<svg xmlns='http://www.w3.org/2000/svg' class='cell-plot' role='img' "
        f"width='{WIDTH}' height='{HEIGHT}' viewBox='0 0 {WIDTH} {HEIGHT}' "
        f"font-family='sans-serif' font-size='12'><title>{_esc(title)}</title>"
        f"<rect width='100%' height='100%' fill='white'/>"
        f"<text x='{MARGIN_LEFT}' y='24' font-size='15' font-weight='bold'>"
        f"{_esc(title)}</text>"
    )
    c = curve.sort_values("anchor") if len(curve) else curve
    if c.empty:
        return Markup(  # built from numbers and escaped text
            head + f"<text x='{MARGIN_LEFT}' y='{HEIGHT / 2}' font-size='14'>no probed "
            "anchors yet: run `bt continue`</text></svg>"
        )
    t = c["anchor"].to_numpy(float)
    lo_x, hi_x = math.log2(max(1.0, t.min() / 1.5)), math.log2(t.max() * 1.5)
    lo_y, hi_y = y_range(c)
    lo_y, hi_y = lo_y - 0.05, hi_y + 0.05

    def X(a: float) -> float:
        return MARGIN_LEFT + (math.log2(max(a, 1e-9)) - lo_x) / (hi_x - lo_x) * pw

    def Y(v: float) -> float:
        return MARGIN_TOP + (hi_y - v) / (hi_y - lo_y) * ph

    parts = [head]
    # T_F interval (lower, upper]: shaded band
    lo: Any = row.get("interval_lower")  # a table cell: a number, None or NaN
    up: Any = row.get("interval_upper")
    event = bool(row.get("event_observed")) and not missing(up)
    if event:
        x0 = X(max(float(lo or 0), 2**lo_x))
        parts.append(
            f"<rect class='tf-band' x='{x0:.1f}' y='{MARGIN_TOP}' "
            f"width='{max(2.0, X(float(up)) - x0):.1f}' height='{ph}' "
            f"fill='{BAND_COLOR}' opacity='0.15'/>"
        )
    # y grid and ticks
    v = math.ceil((lo_y + 0.05) * 4 - 1e-9) / 4
    while v <= hi_y + 1e-9:
        parts.append(
            f"<line x1='{MARGIN_LEFT}' x2='{MARGIN_LEFT + pw}' y1='{Y(v):.1f}' "
            f"y2='{Y(v):.1f}' stroke='{'#000' if v == 0 else '#e6e6e6'}' "
            f"stroke-width='{0.8 if v == 0 else 1}'/>"
            f"<text x='{MARGIN_LEFT - 6}' y='{Y(v) + 4:.1f}' text-anchor='end'>"
            f"{v:g}</text>"
        )
        v += 0.25
    # x ticks: every probed anchor, labelled unless too close to the previous label
    last = -1e9
    for a in t:
        x = X(a)
        parts.append(
            f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{MARGIN_TOP + ph}' "
            f"y2='{MARGIN_TOP + ph + 5}' stroke='#333'/>"
        )
        if x - last >= MIN_LABEL_GAP:
            parts.append(
                f"<text x='{x:.1f}' y='{MARGIN_TOP + ph + 19}' "
                f"text-anchor='middle'>{int(a):,}</text>"
            )
            last = x
    parts.append(
        f"<rect x='{MARGIN_LEFT}' y='{MARGIN_TOP}' width='{pw}' height='{ph}' "
        f"fill='none' stroke='#999'/>"
    )
    parts.append(
        f"<text x='{MARGIN_LEFT + pw / 2}' y='{HEIGHT - 14}' text-anchor='middle' "
        f"font-size='13'>anchor t (reasoning tokens of the base trace, log scale)"
        f"</text><text transform='translate(18,{MARGIN_TOP + ph / 2}) rotate(-90)' "
        f"text-anchor='middle' font-size='13'>solve rate / advantage</text>"
    )
    # τ and δ lines
    for value, color, dash, cls in (
        (tau, TAU_COLOR, "8,4", "tau"),
        (delta, DELTA_COLOR, "2,4", "delta"),
    ):
        parts.append(
            f"<line class='{cls}' x1='{MARGIN_LEFT}' x2='{MARGIN_LEFT + pw}' "
            f"y1='{Y(value):.1f}' y2='{Y(value):.1f}' stroke='{color}' "
            f"stroke-width='1.2' stroke-dasharray='{dash}'/>"
        )
    tv: Any = row.get("t_v")
    if not missing(tv):
        parts.append(
            f"<line class='tv' x1='{X(float(tv)):.1f}' x2='{X(float(tv)):.1f}' "
            f"y1='{MARGIN_TOP}' y2='{MARGIN_TOP + ph}' stroke='{TV_COLOR}' "
            f"stroke-width='2.5' opacity='0.7'/>"
        )
    # the curves
    for col, color, dash, marker, width, _ in SERIES:
        vals = c[col].to_numpy(float) if col in c.columns else []
        pts = [(X(a), Y(v)) for a, v in zip(t, vals, strict=False) if not math.isnan(v)]
        if not pts:
            continue
        parts.append(
            f"<polyline class='series-{col}' fill='none' stroke='{color}' "
            f"stroke-width='{width}' stroke-opacity='{0.55 if col == 'p' else 1}' "
            f"stroke-dasharray='{dash}' "
            f"points='{' '.join(f'{x:.1f},{y:.1f}' for x, y in pts)}'/>"
        )
        parts.extend(_marker(marker, x, y, color) for x, y in pts)
    prox = c[c["proxy"].astype(bool)] if "proxy" in c.columns else c.iloc[0:0]
    for a, val in zip(prox["anchor"], prox["r_hat"], strict=True):
        parts.append(
            f"<circle cx='{X(float(a)):.1f}' cy='{Y(float(val)):.1f}' r='8' "
            f"fill='none' stroke='black'/>"
        )
    # the legend, beside the plot: every element with its value
    b = f" = {budget:,}" if budget is not None else ""
    series = {s[0]: s for s in SERIES}
    entries = [
        (
            _line_swatch(color, dash, width, marker),
            text.replace("p(t; B)", f"p(t; B{b})", 1) if col == "p" else text,
        )
        for col, color, dash, marker, width, text in (series[k] for k in LEGEND_ORDER)
    ]
    entries += [
        (_line_swatch(TAU_COLOR, "8,4", 1.2), f"τ = {tau:g}: solve-rate threshold"),
        (_line_swatch(DELTA_COLOR, "2,4", 1.2), f"δ = {delta:g}: advantage margin"),
    ]
    band = f"<rect x='0' y='-7' width='26' height='14' fill='{BAND_COLOR}' opacity='0.15'/>"
    if event:
        entries.append((band, f"T_F interval ({int(lo or 0):,}, {int(up):,}]"))
    else:
        cens: Any = row.get("censoring_time")
        entries.append(
            (band, "T_F: no event" + ("" if missing(cens) else f" (censored at {int(cens):,})"))
        )
    tv_swatch = (
        f"<line x1='13' x2='13' y1='-8' y2='8' stroke='{TV_COLOR}' stroke-width='2.5' "
        f"opacity='0.7'/>"
    )
    entries.append((tv_swatch, f"T_V(δ) = {int(tv):,}" if not missing(tv) else "T_V(δ): none"))
    entries.append(
        (
            "<circle cx='13' cy='0' r='7' fill='none' stroke='black'/>",
            f"R̂ proxy (t + B > largest C): {len(prox)}",
        )
    )
    parts += _legend(MARGIN_LEFT + pw + 22, MARGIN_TOP + 8, entries)
    return Markup("".join(parts) + "</svg>")  # numbers and escaped text

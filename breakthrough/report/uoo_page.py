"""The page of `bt report uoo --out DIR`: DIR/index.html with the leaderboard first, the
claimed-vs-true count figure by size (DIR/figures/claimed_vs_true.png) and every table the
terminal report prints (by bin, kind and size, count errors, the thinking arms, run against
run, agreement), through the Jinja2 environment and layout every report page shares
(`report.templating`), with a glossary of the benchmark's own terms. A figure with no point to
draw (no answer claimed a count >= 1) is one "no data because" line, never an empty plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from breakthrough.report.uoo_figure import claimed_vs_true_figure, figure_points
from breakthrough.report.uoo_report import TextTable

FIGURE = "figures/claimed_vs_true.png"
GLOSSARY: tuple[tuple[str, str], ...] = (
    ("optimum", "the best objective value of the instance (its exact ground truth)."),
    ("N", "the true number of optimal solutions: distinct points reaching the optimum."),
    ("score", "1 when the answer is optimal, its uniqueness flag right and its count exact."),
    ("exact count", "the claimed number of optima equals N."),
    ("undercount share", "of the wrong counts (parsed answers), the share below N."),
    ("within 2x", "the claimed count lies in [N/2, 2N] (an unparsed answer is not within)."),
    ("n", "the problem size: items for the binary kinds, workers (= tasks) for assignment."),
    ("fixed29", "the 29 items of the published leaderboard (one per kind x bin cell)."),
    (
        "b/c",
        "paired disagreements: b right under A (or on) and wrong under B (or off), c the "
        "reverse; McNemar's exact p tests b = c.",
    ),  # fmt: skip
)


def _table(tt: TextTable) -> dict[str, Any]:
    """A `TextTable` as the `table` macro draws it (templates/macros.html.j2)."""
    return {
        "cls": f"uoo {tt.key}".strip(),
        "columns": [{"head": c, "title": "", "left": c in tt.left} for c in tt.columns],
        "rows": [
            [
                {"text": v, "left": c in tt.left, "href": None, "cls": ""}
                for c, v in zip(tt.columns, row, strict=True)
            ]
            for row in tt.rows
        ],
    }


def _section(tt: TextTable) -> dict[str, Any]:
    return {"key": tt.key or "table", "title": tt.title, "table": _table(tt), "note": tt.note}


def _runs(df: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for run, d in df.groupby("run", sort=False):
        out.append(
            {
                "name": str(run),
                "model": str(d["model"].iloc[0]),
                "variant": str(d["variant"].iloc[0]),
                "thinking": str(d["thinking"].iloc[0] or "") if "thinking" in d else "",
                "answers": len(d),
            }
        )
    return out


def write_uoo_page(out: Path, df: pd.DataFrame, tables: list[TextTable], cohort: str) -> Path:
    """Write OUT/index.html (and the figure when it has points); returns the page's path."""
    from breakthrough.report.templating import write_page

    out = Path(out)
    shown, left_out = figure_points(df)
    figure = None
    if len(shown):
        claimed_vs_true_figure(df, out / FIGURE)
        figure = FIGURE
    sizes = sorted({int(s) for s in shown["size"]}) if len(shown) else []
    caption = (
        f"{len(shown)} answers with a claimed count >= 1, one colour per size n "
        f"({', '.join(map(str, sizes))}); the diagonal is the exact count, the band within 2x, "
        "points below it undercounts"
        + (f"; {left_out} answers without such a count are not drawn." if left_out else ".")
    )
    lead, *rest = tables
    return write_page(
        out / "index.html",
        "uoo.html.j2",
        title=f"UoO report: {len(set(df['run']))} run{'' if df['run'].nunique() == 1 else 's'}",
        glossary=GLOSSARY,
        cohort=cohort,
        runs=_runs(df),
        lead=_section(lead),
        sections=[_section(t) for t in rest],
        figure=figure,
        caption=caption,
        figure_gap=f"none of the {len(df)} answers claimed a count of at least 1 (unparsed "
        "answers and claims of 0 have no place on a log axis)",
    )

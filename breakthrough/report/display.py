"""How one value shows on a report page, and a frame as the pages' table macro takes it.

Plain text out, never HTML: the pages are Jinja2 templates with autoescape
(`report.templating`), so escaping happens once, in the template, for every page. A cell that
is markup on purpose (a problem's MathML) is a `markupsafe.Markup` built by `report.mathtext`,
which escapes whatever it did not convert.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from breakthrough.report.mathtext import math_html
from breakthrough.report.names import field_name, regime_name
from breakthrough.stats import missing

# Columns shown left-aligned (text); every other column aligns right (numbers).
LEFT = (
    "cell_id",
    "problem_text",
    "regime",
    "run",
    "model",
    "stage",
    "kind",
    "reason",
    "extracted",
    "verdict",
    "finish_reason",
    "problem_id",
    "subject",
    "position",
)


def plural(n: int, word: str, many: str | None = None) -> str:
    """ "1 cell", "2 cells" ("1 trajectory", "3 trajectories" with `many`)."""
    return f"{int(n):,} {word if int(n) == 1 else many or word + 's'}"


def fmt(v: Any, col: str | None = None) -> str:
    """A value as the pages show it: — for missing, yes/no for flags, regimes by their human
    names, whole numbers without decimals (thousands separated), others to 3 decimals."""
    if missing(v) or (col == "anchor" and v == -1):  # -1: a restart has no anchor
        return "—"
    if col == "regime":
        return regime_name(v)
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)) or (
        isinstance(v, (float, np.floating)) and float(v).is_integer()
    ):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.3f}"
    return str(v)


def table_data(
    frame: pd.DataFrame,
    columns: Iterable[str] | None = None,
    *,
    links: Mapping[str, str] | None = None,
    cls: str = "",
    text_left: bool = False,
) -> dict[str, Any]:
    """frame[columns] as the `table` macro of templates/macros.html.j2 draws it: human headers
    (the long name and the raw column name as tooltip), formatted cells, `cell_id` values as
    links where `links` has them, a problem's text with its math as MathML. Columns of `LEFT`
    are left-aligned, and with `text_left` any column holding text."""
    cols = [c for c in (columns or frame.columns) if c in frame.columns]
    left = {
        c: c in LEFT
        or (
            text_left
            and (pd.api.types.is_string_dtype(frame[c]) or frame[c].dtype == object)
            and bool(frame[c].map(lambda v: isinstance(v, str)).any())
        )
        for c in cols
    }
    rows = []
    for rec in frame[cols].to_dict(orient="records"):
        row = []
        for c in cols:
            v = rec[c]
            cell: dict[str, Any] = {"text": fmt(v, c), "left": left[c], "href": None, "cls": ""}
            if c == "cell_id" and links and v in links:
                cell["href"] = links[v]
            elif c == "problem_text" and not missing(v):  # the problem's start, math as MathML
                cell.update(text=math_html(str(v)), cls="problem")
            row.append(cell)
        rows.append(row)
    return {
        "cls": cls,
        "columns": [
            {"head": field_name(c), "title": f"{field_name(c, long=True)} [{c}]", "left": left[c]}
            for c in cols
        ],
        "rows": rows,
    }

"""The static HTML report of `bt classify`: one report page (the cells table first, then the
regime counts, figures and the plan of next work) and one page per cell (problem, reference
answer, the plot, the base trace with every anchor's cut point marked, and every branch's
extracted answer and verdict).

Rendered from Jinja2 templates (templates/classify.html.j2, cell.html.j2 on the shared layout
of `report.templating`), every value escaped by the template engine; inline SVG and MathML
(`report.mathtext`: problem statements and answers), no scripts. Headers and field names are
the human names of `report.names`; each carries the raw column name as its tooltip, so a
reader can find it in labels.csv, and every page shows the glossary of `names.GLOSSARY` in
plain view, right after its main result (the cells table; a cell's facts and plot), so a phone's
first screen shows the result. Tables scroll inside their own box (`div.scroll`: a shaded edge
where there is more, the cells table's first column kept in place), so no table widens the
page; a figure without data is replaced by one line saying why. This module only gathers what the
templates show.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from markupsafe import Markup

from breakthrough.report.cell_details import CUT_OFF, CellDetail, is_cut_off, shown_text
from breakthrough.report.display import fmt, plural, table_data
from breakthrough.report.mathtext import answer_html, math_html
from breakthrough.report.names import field_name, finish_name, regime_name
from breakthrough.report.templating import write_page
from breakthrough.stats import missing

BRANCH_TAIL = 300  # characters of each branch's text shown (its end, where the answer is)


def cell_slug(cell_id: str) -> str:
    """A file-name-safe slug of a cell id (unique for distinct ids)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(cell_id))
    return safe if safe == cell_id else f"{safe}-{abs(hash_str(cell_id)) % 10**8:08d}"


def hash_str(s: str) -> int:
    return zlib.crc32(s.encode())


def _rel(target: Path, start: Path) -> str:
    return Path(os.path.relpath(target, start)).as_posix()


def cells_columns(labels: pd.DataFrame, restart_budgets: Sequence[int]) -> list[str]:
    """The columns of the cells table: identity, regime and T_F, R(C) for each of the runs'
    restart budgets, advantage, T_V at each δ the labels hold, agreement and survival."""
    tv = sorted(c for c in labels.columns if re.fullmatch(r"t_v_d\d{3}", c))
    return (
        [
            "run",
            "cell_id",
            "problem_text",
            "stage",
            "level",
            "regime",
            "t_f",
            "interval_lower",
            "interval_upper",
            "final_anchor",
            "final_rate",
        ]
        + [f"R_{c}" for c in sorted(restart_budgets)]
        + [
            "max_advantage",
            *tv,
            "t_v_cons",
            "conservative_agrees",
            "terminal_a1_anchor",
            "terminal_a1_advantage",
            "regime_survival",
        ]
    )


def summary_context(summary: Mapping) -> dict[str, Any]:
    """What the report page shows of summary.json below the cells table: regime counts, the
    cells not labelled, δ sensitivity, label hardening, the second probe arm and the plans."""
    counts = summary.get("regime_counts") or {}
    regime_counts = None
    if counts:
        regs = list(next(iter(counts.values())).keys())
        frame = pd.DataFrame(
            {m: [c.get(r, 0) for r in regs] for m, c in counts.items()}, index=regs
        ).reset_index(names="regime")
        regime_counts = table_data(frame)
    unfinished = [  # classify.completeness: no regime, counted apart (unfinished.csv)
        (str(m), ", ".join(plural(n, str(st)) for st, n in c.items()))
        for m, c in (summary.get("unfinished_counts") or {}).items()
    ]
    ds = summary.get("delta_sensitivity_counts")
    delta_sensitivity = (
        {
            "counts": list(ds.items()),
            "disagreements": len(summary.get("conservative_disagreements", [])),
            "agreement": str(summary.get("cross_model_agreement", {}).get("text")),
        }
        if ds
        else None
    )
    hard = summary.get("label_hardening")
    plans = summary.get("plans")
    plan_frame = (
        pd.DataFrame(
            [
                {
                    "rule": k,
                    **{x: v[x] for x in ("items", "probe", "restart", "samples")},
                    "by_reason": ", ".join(f"{r}: {n}" for r, n in v["by_reason"].items()),
                }
                for k, v in plans.items()
            ]
        )
        if plans
        else None
    )
    return {
        "regime_counts": regime_counts,
        "unfinished": unfinished,
        "delta_sensitivity": delta_sensitivity,
        "hardening": table_data(pd.DataFrame(hard)) if hard else None,
        "a2": [{"budget": str(b2), **v} for b2, v in (summary.get("a2") or {}).items()],
        "plans": table_data(plan_frame) if plan_frame is not None else None,
    }


def write_report(
    path: str | Path,
    *,
    title: str,
    labels: pd.DataFrame,
    restart_budgets: Sequence[int],
    figures: Mapping[str, Path],
    summary: Mapping,
    cell_pages: Mapping[tuple[str, str], Path] | None = None,
    plan: pd.DataFrame | None = None,
    files: Iterable[Path] = (),
    figure_gaps: Mapping[str, str] | None = None,
) -> Path:
    """The one report page of a `bt classify` call: the cells table first (linked to the cell
    pages; cell_pages: (run, cell_id) → page), then regime counts, figures (each figure of
    `figure_gaps`, name → reason, as one "no data because …" line instead), the plan of next
    work and the written tables."""
    path = Path(path)
    cell_tables = []
    if len(labels):
        multi = "run" in labels.columns and labels["run"].nunique() > 1
        cols = [c for c in cells_columns(labels, restart_budgets) if multi or c != "run"]
        groups = labels.groupby("run", sort=False) if "run" in labels.columns else [("", labels)]
        for run, g in groups:
            links = {
                c: _rel(p, path.parent) for (r, c), p in (cell_pages or {}).items() if r == run
            }
            cell_tables.append(
                {
                    "run": str(run) if multi else None,
                    "table": table_data(g, cols, links=links, cls="cells"),
                }
            )
    return write_page(
        path,
        "classify.html.j2",
        title=title,
        settings={
            k: str(summary.get(k, default))
            for k, default in (
                ("tau", None),
                ("budget", None),
                ("primary_delta", None),
                ("prior", "—"),
                ("topup", "—"),
            )
        },
        cell_tables=cell_tables,
        **summary_context(summary),
        figures=[(name, _rel(fig, path.parent)) for name, fig in figures.items()],
        figure_gaps=list((figure_gaps or {}).items()),
        plan=table_data(plan) if plan is not None and len(plan) else None,
        files=[(_rel(f, path.parent), f.name) for f in files],
    )


def trace_parts(detail: CellDetail, curve: pd.DataFrame, tau: float) -> list[dict[str, Any]]:
    """The base trace as the cell page shows it: text pieces (special tokens hidden) with a
    mark before each anchor's cut ({anchor, k, n, solved}: its p(t; B) in it)."""
    text = detail.base_text or ""
    rates = {int(r.anchor): (int(r.k), int(r.n)) for r in curve.itertuples()} if len(curve) else {}
    marks: dict[int, list[int]] = {}
    for a, off in detail.cuts.items():
        marks.setdefault(min(off, len(text)), []).append(a)
    out: list[dict[str, Any]] = []
    pos = 0
    for off in sorted(marks):
        out.append({"anchor": None, "text": shown_text(text[pos:off])})
        for a in sorted(marks[off]):
            k, n = rates.get(a, (0, 0))
            out.append({"anchor": a, "k": k, "n": n, "solved": bool(n and k / n >= tau - 1e-9)})
        pos = off
    out.append({"anchor": None, "text": shown_text(text[pos:])})
    return out


def _cell(text: Any, left: bool = False, cls: str = "") -> dict[str, Any]:
    return {"text": text, "left": left, "href": None, "cls": cls}


def branch_tables(branches: pd.DataFrame) -> list[dict[str, Any]]:
    """Per probe anchor and per restart budget: each branch's extracted answer, verdict and
    the end of its text ([{heading, table}], for the `table` macro)."""
    out = []
    for kind, key, heading in (
        ("probe", "anchor", "Continuations from the base trace"),
        ("restart", "budget", "Restarts from scratch"),
    ):
        g = branches[branches["kind"] == kind] if len(branches) else branches
        if g.empty:
            continue
        rows = []
        for r in g.to_dict(orient="records"):
            text = shown_text(str(r["continuation"] or ""))
            tail = ("…" if len(text) > BRANCH_TAIL else "") + text[-BRANCH_TAIL:]
            v = str(r["verdict"])
            answer: Any
            if is_cut_off(r["extracted"], r["finish_reason"], r.get("correct")):
                answer, v = f"— ({CUT_OFF})", f"no answer ({CUT_OFF})"  # one rendering of it
                tail += f" [{CUT_OFF}: {finish_name(r['finish_reason'])}]"
            else:
                answer = "—" if missing(r["extracted"]) else answer_html(str(r["extracted"]))
            rows.append(
                [
                    _cell(fmt(r[key])),
                    *([_cell(fmt(r["budget"]))] if kind == "probe" else []),
                    _cell(str(r["branch"])),
                    _cell(answer, left=True),
                    _cell(v, left=True, cls="v-" + v.split(" (")[0].replace(" ", "-")),
                    _cell(finish_name(r["finish_reason"]), left=True),
                    _cell(tail, cls="text"),
                ]
            )
        what = "text after the cut (its end)" if kind == "probe" else "text (its end)"
        columns = [
            {"head": field_name(key), "title": "", "left": False},
            *(
                [{"head": "B", "title": "continuation budget B of the probe arm", "left": False}]
                if kind == "probe"
                else []
            ),
            {"head": "branch", "title": "", "left": False},
            {"head": "extracted answer", "title": "", "left": True},
            {"head": "verdict", "title": "", "left": True},
            {"head": "finish", "title": "", "left": True},
            {"head": what, "title": "", "left": True},
        ]
        out.append(
            {
                "heading": heading,
                "table": {"cls": f"branches {kind}", "columns": columns, "rows": rows},
            }
        )
    return out


def write_cell_page(
    path: str | Path,
    *,
    row: Mapping,
    curve: pd.DataFrame,
    svg: str,
    detail: CellDetail | None = None,
    restarts: pd.DataFrame | None = None,
    back: Path | None = None,
    tau: float = 0.75,
) -> Path:
    """One cell: problem and reference answer, the p(t; B) / R̂(t + B) / adv(t) plot, the base
    trace with the cut of every anchor marked, every branch's answer and verdict, the anchor
    and restart tables and all labels under their human names. `svg` is the plot of
    `report.cell_figure.cell_svg` (markup, shown as it is)."""
    path = Path(path)
    detail = detail or CellDetail()
    facts: list[tuple[str, Any]] = [
        ("Problem", detail.problem),
        ("Reference answer", detail.answer),
        ("Regime", regime_name(row.get("regime"))),
        ("Budget-fit time T_F", row.get("t_f")),
        ("Prefix-value time T_V(δ)", row.get("t_v")),
        ("Model", row.get("model")),
        ("Stage / level", f"{row.get('stage', '—')} / {fmt(row.get('level'))}"),
    ]
    shown = {"Problem": math_html, "Reference answer": answer_html}  # their math as MathML
    facts = [(k, shown[k](v) if k in shown and not missing(v) else fmt(v)) for k, v in facts]
    labels = {
        "cls": "labels",
        "columns": [{"head": h, "title": "", "left": True} for h in ("label", "value", "column")],
        "rows": [
            [
                _cell(field_name(k, long=True), left=True),
                _cell(fmt(v, k), left=True),
                _cell(k, left=True, cls="note"),
            ]
            for k, v in row.items()
        ],
    }
    return write_page(
        path,
        "cell.html.j2",
        title=f"cell {row.get('cell_id')}",
        back=_rel(back, path.parent) if back is not None else None,
        facts=facts,
        svg=Markup(svg),  # the plot's SVG (cell_svg escapes every text in it)
        trace=trace_parts(detail, curve, tau) if detail.base_text is not None else None,
        tau=tau,
        branches=branch_tables(detail.branches),
        anchors=table_data(curve.drop(columns=["cell_id"], errors="ignore"), cls="anchors"),
        restarts=(
            table_data(
                restarts.drop(columns=["cell_id", "model"], errors="ignore"), cls="restart-panel"
            )
            if restarts is not None and len(restarts)
            else None
        ),
        labels=labels,
    )

"""The static HTML report of `bt classify`: one report page (the cells table first, then the
regime counts, figures and the plan of next work) and one page per cell (problem, reference
answer, the plot, the base trace with every anchor's cut point marked, and every branch's
extracted answer and verdict).

Plain HTML, inline SVG and MathML (`report.mathtext`: problem statements and answers), no
scripts, every value escaped. Headers and field names are the human names of `report.names`;
each carries the raw column name as its tooltip, so a reader can find it in labels.csv, and
every page opens with the glossary of `names.GLOSSARY` in plain view. Tables scroll inside
their own box (`div.scroll`), so no table widens the page; a figure without data is replaced
by one line saying why.
"""

from __future__ import annotations

import html
import os
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from breakthrough.outputs import write_text
from breakthrough.report.cell_details import CUT_OFF, CellDetail, is_cut_off, shown_text
from breakthrough.report.mathtext import answer_html, math_html
from breakthrough.report.names import GLOSSARY, field_name, finish_name, regime_name
from breakthrough.stats import missing

STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;max-width:1500px;color:#222}
h1{font-size:1.6em} h2{margin-top:1.6em}
table{border-collapse:collapse;font-size:13px;margin:0.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right;vertical-align:top}
th{background:#f0f0f0} td.l,th.l{text-align:left} td a{white-space:nowrap}
table.cells td{white-space:nowrap} table.cells td.problem{white-space:normal;min-width:14em;
  max-width:26em}
div.scroll{overflow-x:auto;max-width:100%;margin:0.5em 0 1.5em}
div.scroll>table{margin:0}
section.glossary{background:#f7f7f2;border:1px solid #ddd;padding:6px 12px;margin:0.6em 0 1em;
  font-size:13px}
section.glossary h2{font-size:14px;margin:0.2em 0 0.4em}
section.glossary dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:0}
section.glossary dt{font-weight:bold} section.glossary dd{margin:0}
p.no-data{color:#555;font-style:italic;margin:0.3em 0 1em}
math{font-size:1.1em}
details.asy{color:#555;font-size:13px} details.asy pre{white-space:pre-wrap;font-size:12px}
img{max-width:100%;border:1px solid #eee;margin:0.5em 0}
.note{color:#555;font-size:13px}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:4px 16px;font-size:15px}
dl.facts dt{font-weight:bold} dl.facts dd{margin:0;white-space:pre-wrap}
pre.trace{white-space:pre-wrap;word-break:break-word;background:#fafafa;border:1px solid #ddd;
  padding:10px;max-height:520px;overflow:auto;font-size:13px;line-height:1.5}
mark.cut{background:#ffe08a;border-left:3px solid #b8860b;padding:0 3px;font-weight:bold;
  font-family:sans-serif;font-size:11px}
mark.cut.solved{background:#bfe5bf;border-left-color:#2e7d32}
td.v-correct{color:#1b5e20;font-weight:bold} td.v-wrong,td.v-no-answer{color:#b71c1c}
td.text{font-family:monospace;font-size:12px;text-align:left;white-space:pre-wrap;
  max-width:640px;word-break:break-word}
svg.cell-plot{max-width:100%;height:auto;border:1px solid #eee}
"""
BRANCH_TAIL = 300  # characters of each branch's text shown (its end, where the answer is)


def cell_slug(cell_id: str) -> str:
    """A file-name-safe slug of a cell id (unique for distinct ids)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(cell_id))
    return safe if safe == cell_id else f"{safe}-{abs(hash_str(cell_id)) % 10**8:08d}"


def glossary_html() -> str:
    """The glossary every page shows in plain view (`names.GLOSSARY`), so T_F, adv, R̂, T_V, δ,
    τ and the regimes are defined without hovering."""
    items = "".join(f"<dt>{html.escape(t)}</dt><dd>{html.escape(d)}</dd>" for t, d in GLOSSARY)
    return f"<section class='glossary'><h2>Glossary</h2><dl>{items}</dl></section>"


def plural(n: int, word: str, many: str | None = None) -> str:
    """ "1 cell", "2 cells" ("1 trajectory", "3 trajectories" with `many`)."""
    return f"{int(n):,} {word if int(n) == 1 else many or word + 's'}"


def hash_str(s: str) -> int:
    return zlib.crc32(s.encode())


def fmt(v, col: str | None = None) -> str:
    """A value as the pages show it (escaped): — for missing, yes/no for flags, regimes by
    their human names, whole numbers without decimals (thousands separated), others to 3
    decimals."""
    if missing(v) or (col == "anchor" and v == -1):  # -1: a restart has no anchor
        return "—"
    if col == "regime":
        return html.escape(regime_name(v))
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)) or (
        isinstance(v, (float, np.floating)) and float(v).is_integer()
    ):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.3f}"
    return html.escape(str(v))


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


def table(
    frame: pd.DataFrame,
    columns: Iterable[str] | None = None,
    links: Mapping[str, str] | None = None,
    cls: str = "",
) -> str:
    """An HTML table of frame[columns] under human headers (raw name as tooltip); values of
    `cell_id` become links when given."""
    cols = [c for c in (columns or frame.columns) if c in frame.columns]
    head = "".join(
        f"<th{' class=l' if c in LEFT else ''} title='{html.escape(field_name(c, long=True))}"
        f" [{html.escape(c)}]'>{html.escape(field_name(c))}</th>"
        for c in cols
    )
    rows = []
    for rec in frame[cols].to_dict(orient="records"):
        cells = []
        for c in cols:
            v = rec[c]
            left = " class='l'" if c in LEFT else ""
            if c == "cell_id" and links and v in links:
                cells.append(
                    f"<td{left}><a href='{html.escape(links[v])}'>{html.escape(str(v))}</a></td>"
                )
            elif c == "problem_text":  # the problem's start, its math as MathML
                cells.append(
                    f"<td class='l problem'>{'—' if missing(v) else math_html(str(v))}</td>"
                )
            else:
                cells.append(f"<td{left}>{fmt(v, c)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return scroll(f"<table class='{cls}'><tr>{head}</tr>{''.join(rows)}</table>")


def scroll(table_html: str) -> str:
    """A table in its own scrolling box: a wide table scrolls sideways instead of widening the
    page."""
    return f"<div class='scroll'>{table_html}</div>"


def no_data(name: str, reason: str) -> str:
    """The one line that stands where a figure without data would be."""
    return (
        f"<p class='no-data'>{html.escape(name.replace('_', ' '))}: no data because "
        f"{html.escape(reason)}.</p>"
    )


def _page(title: str, body: str) -> str:
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<link rel='icon' href='data:,'>"  # no favicon request: a static report has none
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>{glossary_html()}{body}</body></html>\n"
    )


def _write(path: Path, text: str) -> Path:
    return write_text(path, text)


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


def _settings(summary: Mapping) -> str:
    return (
        f"<p class='note'>τ = {summary.get('tau')}, B = {summary.get('budget')}, "
        f"primary δ = {summary.get('primary_delta')}, prior: "
        f"{html.escape(str(summary.get('prior', '—')))}, top-up rule: "
        f"{html.escape(str(summary.get('topup', '—')))}. The glossary above defines the "
        f"terms; a column header's tooltip gives its full meaning and its name in "
        f"labels.csv.</p>"
    )


def _summary_block(summary: Mapping) -> str:
    parts = []
    counts = summary.get("regime_counts") or {}
    if counts:
        regs = list(next(iter(counts.values())).keys())
        frame = pd.DataFrame(
            {m: [c.get(r, 0) for r in regs] for m, c in counts.items()}, index=regs
        ).reset_index(names="regime")
        parts.append("<h2>Regime counts</h2>" + table(frame))
    unfinished = summary.get("unfinished_counts") or {}
    if unfinished:  # classify.completeness: no regime, counted apart (unfinished.csv)
        parts.append(
            "<h2>Not labelled</h2><p class='note'>Cells that have not run their "
            "protocol (no probes and no restarts, or restarts they are owed missing) "
            "get no regime; unfinished.csv lists them and what each lacks.</p><p>"
            + "; ".join(
                f"{html.escape(str(m))}: "
                + ", ".join(plural(n, html.escape(str(st))) for st, n in c.items())
                for m, c in unfinished.items()
            )
            + "</p>"
        )
    ds = summary.get("delta_sensitivity_counts")
    if ds:
        parts.append(
            "<p>δ sensitivity (non-instant cells with T_V(δ)): "
            + ", ".join(f"δ = {html.escape(k)}: {v}" for k, v in ds.items())
            + "; conservative R̂ "
            f"disagreements: {len(summary.get('conservative_disagreements', []))}; cross-model "
            f"agreement: {html.escape(str(summary.get('cross_model_agreement', {}).get('text')))}"
            "</p>"
        )
    hard = summary.get("label_hardening")
    if hard:
        parts.append(
            "<h2>Label hardening</h2><p class='note'>Trajectories per category before "
            "the top-ups (canonical 4-branch rates, A1 annotated) and after them (the "
            "chosen --topup rules).</p>" + table(pd.DataFrame(hard))
        )
    for b2, v in (summary.get("a2") or {}).items():
        parts.append(
            f"<h2>Second probe arm B = {html.escape(str(b2))} (A2)</h2><p>"
            f"{plural(v['trajectories'], 'trajectory', 'trajectories')} re-probed; "
            f"first crossings earlier by "
            f"≥ 2B: {v['earlier_by_2b']}; no crossing at B = {html.escape(str(b2))}: "
            f"{v['no_crossing_at_b2']}; median shift "
            f"{fmt(v['median_shift_steps'])} anchor steps; verdict: "
            f"<b>{html.escape(v['verdict'])}</b> ({html.escape(v['rule'])}).</p>"
        )
    plans = summary.get("plans")
    if plans:
        frame = pd.DataFrame(
            [
                {
                    "rule": k,
                    **{x: v[x] for x in ("items", "probe", "restart", "samples")},
                    "by_reason": ", ".join(f"{r}: {n}" for r, n in v["by_reason"].items()),
                }
                for k, v in plans.items()
            ]
        )
        parts.append("<h2>Next work per --topup rule</h2>" + table(frame))
    return "".join(parts)


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
    body = [_settings(summary), "<h2>Cells</h2>"]
    if len(labels):
        multi = "run" in labels.columns and labels["run"].nunique() > 1
        cols = [c for c in cells_columns(labels, restart_budgets) if multi or c != "run"]
        groups = labels.groupby("run", sort=False) if "run" in labels.columns else [("", labels)]
        for run, g in groups:
            links = {
                c: _rel(p, path.parent) for (r, c), p in (cell_pages or {}).items() if r == run
            }
            if multi:
                body.append(f"<h3>run {html.escape(str(run))}</h3>")
            body.append(table(g, cols, links, cls="cells"))
    else:
        body.append("<p>no cells</p>")
    body.append(_summary_block(summary))
    body.append("<h2>Figures</h2>")
    for name, fig in figures.items():
        body.append(
            f"<h3>{html.escape(name.replace('_', ' '))}</h3>"
            f"<img src='{html.escape(_rel(fig, path.parent))}' "
            f"alt='{html.escape(name)}'>"
        )
    for name, reason in (figure_gaps or {}).items():
        body.append(no_data(name, reason))
    if plan is not None and len(plan):
        body.append("<h2>Plan of next work</h2>" + table(plan))
    files = list(files)
    if files:
        body.append(
            "<p class='note'>Tables: "
            + ", ".join(
                f"<a href='{html.escape(_rel(f, path.parent))}'>{html.escape(f.name)}</a>"
                for f in files
            )
            + "</p>"
        )
    return _write(path, _page(title, "".join(body)))


def _trace_html(detail: CellDetail, curve: pd.DataFrame, tau: float) -> str:
    """The base trace, escaped, with a mark before each anchor's cut (its p(t; B) in it)."""
    text = detail.base_text or ""
    rates = {int(r.anchor): (int(r.k), int(r.n)) for r in curve.itertuples()} if len(curve) else {}
    marks: dict[int, list[int]] = {}
    for a, off in detail.cuts.items():
        marks.setdefault(min(off, len(text)), []).append(a)
    out, pos = [], 0
    for off in sorted(marks):
        out.append(html.escape(shown_text(text[pos:off])))
        for a in sorted(marks[off]):
            k, n = rates.get(a, (0, 0))
            solved = n and k / n >= tau - 1e-9
            out.append(
                f"<mark class='cut{' solved' if solved else ''}' id='cut-{a}' "
                f"title='cut at anchor t = {a}: {k} of {n} continuations solved'>"
                f"✂ t={a:,} · {k}/{n}</mark>"
            )
        pos = off
    out.append(html.escape(shown_text(text[pos:])))
    return f"<pre class='trace'>{''.join(out)}</pre>"


def _branches_html(branches: pd.DataFrame) -> str:
    """Per probe anchor and per restart budget: each branch's extracted answer, verdict and
    the end of its text."""
    if branches.empty:
        return "<p>no branches yet</p>"
    parts = []
    for kind, key, heading in (
        ("probe", "anchor", "Continuations from the base trace"),
        ("restart", "budget", "Restarts from scratch"),
    ):
        g = branches[branches["kind"] == kind]
        if g.empty:
            continue
        rows = []
        for r in g.to_dict(orient="records"):
            text = shown_text(str(r["continuation"] or ""))
            tail = ("…" if len(text) > BRANCH_TAIL else "") + text[-BRANCH_TAIL:]
            v = str(r["verdict"])
            cut = is_cut_off(r["extracted"], r["finish_reason"], r.get("correct"))
            if cut:  # one rendering of a cut-off answer, wherever it shows
                answer, v = f"— ({CUT_OFF})", f"no answer ({CUT_OFF})"
                tail += f" [{CUT_OFF}: {finish_name(r['finish_reason'])}]"
            else:
                answer = "—" if missing(r["extracted"]) else answer_html(str(r["extracted"]))
            arm = f"<td>{fmt(r['budget'])}</td>" if kind == "probe" else ""
            rows.append(
                f"<tr><td>{fmt(r[key])}</td>{arm}<td>{r['branch']}</td>"
                f"<td class='l'>{answer}</td>"
                f"<td class='l v-{v.split(' (')[0].replace(' ', '-')}'>"
                f"{html.escape(v)}</td>"
                f"<td class='l'>{html.escape(finish_name(r['finish_reason']))}</td>"
                f"<td class='text'>{html.escape(tail)}</td></tr>"
            )
        first = field_name(key)
        what = "text after the cut (its end)" if kind == "probe" else "text (its end)"
        arm_head = (
            "<th title='continuation budget B of the probe arm'>B</th>" if kind == "probe" else ""
        )
        parts.append(
            f"<h3>{heading}</h3>"
            + scroll(
                f"<table class='branches {kind}'><tr><th>"
                f"{html.escape(first)}</th>{arm_head}<th>branch</th><th class='l'>extracted answer"
                f"</th><th class='l'>verdict</th><th class='l'>finish</th>"
                f"<th class='l'>{what}</th></tr>{''.join(rows)}</table>"
            )
        )
    return "".join(parts)


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
    and restart tables and all labels under their human names."""
    path = Path(path)
    detail = detail or CellDetail()
    body = []
    if back is not None:
        body.append(f"<p><a href='{html.escape(_rel(back, path.parent))}'>← report</a></p>")
    facts = [
        ("Problem", detail.problem),
        ("Reference answer", detail.answer),
        ("Regime", regime_name(row.get("regime"))),
        ("Budget-fit time T_F", row.get("t_f")),
        ("Prefix-value time T_V(δ)", row.get("t_v")),
        ("Model", row.get("model")),
        ("Stage / level", f"{row.get('stage', '—')} / {fmt(row.get('level'))}"),
    ]
    shown = {"Problem": math_html, "Reference answer": answer_html}  # their math as MathML
    body.append(
        "<dl class='facts'>"
        + "".join(
            f"<dt>{html.escape(k)}</dt><dd>"
            f"{shown[k](v) if k in shown and not missing(v) else fmt(v)}</dd>"
            for k, v in facts
        )
        + "</dl>"
    )
    body.append(f"<h2>Solve rates along the base trace</h2><div class='plot'>{svg}</div>")
    body.append("<h2>Base trace</h2>")
    if detail.base_text is not None:
        body.append(
            "<p class='note'>✂ marks each probed anchor's cut (where its "
            "continuations leave the base text) with its solved continuations; green "
            f"when p(t; B) ≥ τ = {tau:g}. A continuation is graded on the prefix and "
            "its own text together (protocol 7).</p>" + _trace_html(detail, curve, tau)
        )
    else:
        body.append("<p>no base trace in the run</p>")
    body.append("<h2>Branches</h2>" + _branches_html(detail.branches))
    body.append(
        "<h2>Anchors</h2>" + table(curve.drop(columns=["cell_id"], errors="ignore"), cls="anchors")
    )
    if restarts is not None and len(restarts):
        body.append(
            "<h2>Restart panel</h2>"
            + table(
                restarts.drop(columns=["cell_id", "model"], errors="ignore"), cls="restart-panel"
            )
        )
    labels = "".join(
        f"<tr><td class='l'>{html.escape(field_name(k, long=True))}</td>"
        f"<td class='l'>{fmt(v, k)}</td><td class='l note'>{html.escape(k)}</td>"
        f"</tr>"
        for k, v in row.items()
    )
    body.append(
        "<h2>All labels</h2>"
        + scroll(
            "<table class='labels'><tr><th class='l'>label</th><th class='l'>value</th>"
            f"<th class='l'>column</th></tr>{labels}</table>"
        )
    )
    return _write(path, _page(f"cell {row.get('cell_id')}", "".join(body)))

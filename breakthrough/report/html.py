"""Static HTML report: an index page, one page per run (figures + tables) and one page per
cell (the base trace's anchors with p(t), R̂(t + B), adv(t) and posteriors). Plain HTML, no
scripts, every value escaped."""

from __future__ import annotations

import html
import math
import os
import re
import zlib
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd

STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;max-width:1400px}
table{border-collapse:collapse;font-size:12px;margin:0.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#f0f0f0} td.l,th.l{text-align:left}
img{max-width:100%;border:1px solid #eee;margin:0.5em 0}
.note{color:#555;font-size:13px}
"""

TABLE_COLUMNS = ["cell_id", "stage", "level", "regime", "t_f", "interval_lower",
                 "interval_upper", "final_anchor", "final_rate", "R_1024", "R_2048", "R_4096",
                 "R_8192", "max_advantage", "t_v_d025", "t_v_d050", "t_v_d075", "t_v_cons",
                 "conservative_agrees", "terminal_a1_anchor", "terminal_a1_advantage",
                 "regime_survival"]


def cell_slug(cell_id: str) -> str:
    """A file-name-safe slug of a cell id (unique for distinct ids)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(cell_id))
    return safe if safe == cell_id else f"{safe}-{abs(hash_str(cell_id)) % 10**8:08d}"


def hash_str(s: str) -> int:
    return zlib.crc32(s.encode())


def _fmt(v) -> str:
    if v is None or v is pd.NA:
        return "—"
    if isinstance(v, float):
        if math.isnan(v):
            return "—"
        return f"{v:.0f}" if v == int(v) else f"{v:.3f}"
    return html.escape(str(v))


def table(frame: pd.DataFrame, columns: Iterable[str] | None = None,
          links: Mapping[str, str] | None = None) -> str:
    """An HTML table of frame[columns]; values of `cell_id` become links when given."""
    cols = [c for c in (columns or frame.columns) if c in frame.columns]
    head = "".join(f'<th class="l">{html.escape(c)}</th>' if c in ("cell_id", "regime")
                   else f"<th>{html.escape(c)}</th>" for c in cols)
    rows = []
    for rec in frame[cols].to_dict(orient="records"):
        cells = []
        for c in cols:
            v = rec[c]
            if c == "cell_id" and links and v in links:
                cells.append(f'<td class="l"><a href="{html.escape(links[v])}">'
                             f"{html.escape(str(v))}</a></td>")
            elif c in ("cell_id", "regime"):
                cells.append(f'<td class="l">{_fmt(v)}</td>')
            else:
                cells.append(f"<td>{_fmt(v)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title><style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
            f"{body}</body></html>\n")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def _rel(target: Path, start: Path) -> str:
    return Path(os.path.relpath(target, start)).as_posix()


def _summary_block(summary: Mapping) -> str:
    parts = [f"<p class='note'>τ = {summary.get('tau')}, B = {summary.get('budget')}, "
             f"primary δ = {summary.get('primary_delta')}, prior: "
             f"{html.escape(str(summary.get('prior', '—')))}, top-up rule: "
             f"{html.escape(str(summary.get('topup', '—')))}</p>"]
    counts = summary.get("regime_counts") or {}
    if counts:
        regs = list(next(iter(counts.values())).keys())
        frame = pd.DataFrame({m: [c.get(r, 0) for r in regs] for m, c in counts.items()},
                             index=regs).reset_index(names="regime")
        parts.append("<h2>Regime counts</h2>" + table(frame))
    ds = summary.get("delta_sensitivity_counts")
    if ds:
        parts.append("<p>δ sensitivity (non-instant cells with T_V(δ)): " + ", ".join(
            f"δ = {html.escape(k)}: {v}" for k, v in ds.items()) + "; conservative R̂ "
            f"disagreements: {len(summary.get('conservative_disagreements', []))}; cross-model "
            f"agreement: {html.escape(str(summary.get('cross_model_agreement', {}).get('text')))}"
            "</p>")
    plans = summary.get("plans")
    if plans:
        frame = pd.DataFrame([{"rule": k, **{x: v[x] for x in ("items", "probe", "restart",
                                                                "samples")},
                               "by_reason": ", ".join(f"{r}: {n}" for r, n in
                                                      v["by_reason"].items())}
                              for k, v in plans.items()])
        parts.append("<h2>Next work per --topup rule</h2>" + table(frame))
    return "".join(parts)


def write_run_page(path: str | Path, *, title: str, labels: pd.DataFrame,
                   figures: Mapping[str, Path], summary: Mapping,
                   cell_pages: Mapping[str, Path] | None = None,
                   plan: pd.DataFrame | None = None) -> Path:
    """The page of one run: summary, figures, the per-cell table (linked to cell pages) and
    the plan of next work."""
    path = Path(path)
    links = {c: _rel(p, path.parent) for c, p in (cell_pages or {}).items()}
    body = [_summary_block(summary), "<h2>Figures</h2>"]
    for name, fig in figures.items():
        body.append(f"<h3>{html.escape(name)}</h3><img src='{html.escape(_rel(fig, path.parent))}'"
                    f" alt='{html.escape(name)}'>")
    body.append("<h2>Cells</h2>" + table(labels, TABLE_COLUMNS, links))
    if plan is not None and len(plan):
        body.append("<h2>Plan of next work</h2>" + table(plan))
    return _write(path, _page(title, "".join(body)))


def write_cell_page(path: str | Path, *, row: Mapping, curve: pd.DataFrame,
                    image: Path | None = None, svg: str | None = None,
                    restarts: pd.DataFrame | None = None, back: Path | None = None) -> Path:
    """One cell: its labels, the p(t)/R̂/adv plot (a PNG `image` or an inline `svg`) and the
    per-anchor and restart tables."""
    path = Path(path)
    body = []
    if back is not None:
        body.append(f"<p><a href='{html.escape(_rel(back, path.parent))}'>← run</a></p>")
    facts = pd.DataFrame([{"field": k, "value": v} for k, v in row.items()])
    if svg is not None:
        body.append(f"<div>{svg}</div>")
    if image is not None:
        body.append(f"<img src='{html.escape(_rel(image, path.parent))}' alt='trace'>")
    body.append("<h2>Anchors of the base trace</h2>" + table(curve.drop(columns=["cell_id"],
                                                                         errors="ignore")))
    if restarts is not None and len(restarts):
        body.append("<h2>Restarts</h2>" + table(restarts.drop(columns=["cell_id"],
                                                               errors="ignore")))
    body.append("<h2>Labels</h2>" + table(facts))
    return _write(path, _page(f"cell {row.get('cell_id')}", "".join(body)))


def write_index(path: str | Path, *, runs: Mapping[str, Path], figures: Mapping[str, Path],
                summary: Mapping, files: Iterable[Path] = ()) -> Path:
    """The top page: links to every run page, the combined figures and summary."""
    path = Path(path)
    body = ["<ul>" + "".join(f"<li><a href='{html.escape(_rel(p, path.parent))}'>"
                             f"{html.escape(name)}</a></li>" for name, p in runs.items())
            + "</ul>", _summary_block(summary)]
    if files:
        body.append("<p class='note'>Tables: " + ", ".join(
            f"<a href='{html.escape(_rel(f, path.parent))}'>{html.escape(f.name)}</a>"
            for f in files) + "</p>")
    for name, fig in figures.items():
        body.append(f"<h3>{html.escape(name)}</h3><img src='{html.escape(_rel(fig, path.parent))}'"
                    f" alt='{html.escape(name)}'>")
    return _write(path, _page("bt classify report", "".join(body)))

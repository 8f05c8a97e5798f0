"""What `bt classify` writes: tables, summary, plans, figures and the HTML report of classified
runs (`breakthrough.analyses.classify_run` reads the runs and classifies them).

`write_outputs` writes, under the output folder:

    labels.{parquet,csv}        one row per cell that ran its protocol (all runs; column `run`)
    unfinished.{parquet,csv}    the cells that have not (not continued, incomplete): no regime
    curves, probe_cells, restart_cells   per (cell, anchor) curves and per-cell posteriors
    plan.csv, plan.json         the next work under the chosen --topup rules (plan.json also
                                holds the plans of the compared rules)
    summary.json                counts, δ sensitivity, agreement, plan sizes, protocol
    index.html, figures/        the one report: the cells table first, then regime counts,
                                figures (every run together, one model order) and next work
    cells/[RUN/]CELL.html       one page per cell: problem, reference answer, plot, the base
                                trace with each anchor's cut marked, every branch's verdict
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from breakthrough.classify.completeness import status_counts
from breakthrough.classify.frames import ClassifyResult, extra_summary
from breakthrough.classify.plan import PlanItem
from breakthrough.classify.summary import summarize
from breakthrough.outputs import make_folder, write_json
from breakthrough.report import figures as F
from breakthrough.report import html as H
from breakthrough.report.cell_details import CellDetail
from breakthrough.report.cell_figure import cell_svg
from breakthrough.schemas import classify as schemas
from breakthrough.schemas.write import write_csv, write_frame

# Each table and its declaration (breakthrough/schemas/classify.py, docs/outputs.md).
TABLES = {
    "labels": schemas.LABELS,
    "curves": schemas.CURVES,
    "probe_cells": schemas.PROBE_CELLS,
    "restart_cells": schemas.RESTART_CELLS,
    "label_hardening": schemas.LABEL_HARDENING,
    "topup_resolution": schemas.TOPUP_RESOLUTION,
    "arms": schemas.ARMS,
    "a2": schemas.A2,
    "unfinished": schemas.UNFINISHED,
}
# written when a run holds a second probe arm, or a cell that has not run its protocol
OPTIONAL_TABLES = ("arms", "a2", "unfinished")


def plan_frame(items: Sequence[PlanItem], run: str | None = None) -> pd.DataFrame:
    """A plan as a table (branches written "4-7")."""
    rows = [({"run": run} if run else {}) | it.to_dict() for it in items]
    cols = (["run"] if run else []) + ["cell_id", "kind", "anchor", "budget", "branches", "reason"]
    frame = pd.DataFrame(rows, columns=cols)
    frame["branches"] = frame["branches"].map(lambda b: f"{b[0]}-{b[1] - 1}")
    return frame


def _combined(results: dict[str, ClassifyResult]) -> dict[str, pd.DataFrame]:
    """Each table of every run, stacked with a `run` column."""
    frames: dict[str, list[pd.DataFrame]] = {k: [] for k in TABLES}
    for run, res in results.items():
        for k in frames:
            f = getattr(res, k)
            if len(f):
                frames[k].append(f.assign(run=run) if "run" not in f.columns else f)
    return {
        k: (pd.concat(v, ignore_index=True) if v else pd.DataFrame()) for k, v in frames.items()
    }


def _per_model(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Counts of several runs summed per model (and stage): two runs of one model are one
    model's trajectories."""
    if frame.empty:
        return frame
    frame = frame.drop(columns=["run"], errors="ignore")
    out = frame.groupby(keys, sort=False).sum(min_count=1).reset_index()
    return out[frame.columns]


def cell_page_path(out: Path, run: str, cell_id: str, multi: bool) -> Path:
    """cells/SLUG.html for one run; cells/RUN/SLUG.html when several runs share a report (the
    same cell id can appear in two runs)."""
    return out / "cells" / (run if multi else "") / f"{H.cell_slug(cell_id)}.html"


def _cell_pages(
    run: str,
    res: ClassifyResult,
    out: Path,
    index: Path,
    multi: bool,
    details: Mapping[str, CellDetail],
) -> dict[tuple[str, str], Path]:
    """One page per cell of a run, under the run's own protocol; (run, cell_id) → page."""
    p = res.protocol
    pages: dict[tuple[str, str], Path] = {}
    if not len(res.labels):
        return pages
    curves = dict(tuple(res.curves.groupby("cell_id"))) if len(res.curves) else {}
    rcells = dict(tuple(res.restart_cells.groupby("cell_id"))) if len(res.restart_cells) else {}
    for row in res.labels.to_dict(orient="records"):
        cid = row["cell_id"]
        curve = curves.get(cid, res.curves.iloc[0:0])
        svg = cell_svg(curve, row, tau=p.tau, delta=p.delta, budget=p.budget)
        pages[(run, cid)] = H.write_cell_page(
            cell_page_path(out, run, cid, multi),
            row=row,
            curve=curve,
            svg=svg,
            detail=details.get(cid),
            restarts=rcells.get(cid),
            back=index,
            tau=p.tau,
        )
    return pages


def restart_budgets(results: Mapping[str, ClassifyResult]) -> list[int]:
    """Every restart budget of the runs' protocols (sorted): the R(C) columns of the report."""
    return sorted({int(c) for r in results.values() for c in r.protocol.restart_budgets})


def write_outputs(
    results: dict[str, ClassifyResult],
    out_dir: str | Path,
    *,
    cell_pages: bool = True,
    details: Mapping[str, Mapping[str, CellDetail]] | None = None,
    problems: Mapping[str, Mapping[str, str | None]] | None = None,
) -> dict[str, Any]:
    """Write tables, summary, plans, figures and the one HTML report for the runs (name →
    result) under out_dir; `details` (run → cell_id → CellDetail) fills the cell pages'
    problem, trace and branches. The combined summary uses the first run's protocol; the
    report's R(C) columns and figures use every run's restart budgets. Returns {"index":
    path, "summary": path, "tables": [...], "figures": {...}, "cells": {(run, cell_id):
    page}, "summary_obj": dict, "labels": frame}."""
    out = make_folder(out_dir)
    first = next(iter(results.values()))
    protocol = first.protocol
    combined = _combined(results)
    labels = combined["labels"]
    rules = list(first.plans)
    plans = {
        rule: [it for res in results.values() for it in res.plans.get(rule, [])] for rule in rules
    }
    summary = (
        summarize(labels, protocol=protocol, plans=plans, prior=first.summary.get("prior"))
        if len(labels)
        else dict(first.summary)
    )
    for key in ("topup", "posterior_band", "survival_draws", "survival_seed", "protocol"):
        summary[key] = first.summary.get(key)
    summary["unfinished_counts"] = status_counts(combined["unfinished"])
    summary["restart_cells_whole"] = sum(r.restarts_whole for r in results.values())
    summary["runs"] = {
        run: {
            "cells": int(len(r.labels)),
            "unfinished": int(len(r.unfinished)),
            "plan_items": len(r.plan),
            "regime_counts": r.summary.get("regime_counts", {}),
            "protocol": r.summary.get("protocol"),
        }
        for run, r in results.items()
    }
    for k, keys in (("label_hardening", ["model", "when"]), ("topup_resolution", ["model"])):
        combined[k] = _per_model(combined[k], keys)
    summary.update(
        extra_summary(combined["a2"], combined["label_hardening"], combined["topup_resolution"])
    )
    files = [
        f
        for k in TABLES
        if k not in OPTIONAL_TABLES or len(combined[k])
        for f in write_frame(TABLES[k], combined[k], out / k)
    ]
    chosen = pd.concat([plan_frame(r.plan, run) for run, r in results.items()], ignore_index=True)
    write_csv(schemas.PLAN, chosen, out / "plan.csv")
    write_json(
        out / "plan.json",
        {
            "topup": first.topup,
            "items": [{"run": run} | it.to_dict() for run, r in results.items() for it in r.plan],
            "other_rules": {
                rule: [
                    {"run": run} | it.to_dict()
                    for run, r in results.items()
                    for it in r.plans.get(rule, [])
                ]
                for rule in rules
                if rule != first.topup
            },
        },
    )
    summary_path = write_json(out / "summary.json", summary)
    budgets = restart_budgets(results)
    figs = F.all_figures(
        labels,
        combined["probe_cells"],
        out / "figures",
        tau=protocol.tau,
        target=protocol.topup_samples,
        budgets=budgets,
        hardening=combined["label_hardening"],
        a2=combined["a2"],
    )
    gaps = F.figure_gaps(
        labels,
        combined["probe_cells"],
        budgets=budgets,
        target=protocol.topup_samples,
        hardening=combined["label_hardening"],
        a2=combined["a2"],
    )
    index = out / "index.html"
    pages: dict[tuple[str, str], Path] = {}
    if cell_pages:
        multi = len(results) > 1
        for run, res in results.items():
            pages |= _cell_pages(run, res, out, index, multi, (details or {}).get(run, {}))
    names = list(results)
    title = (
        f"bt classify: {names[0]}"
        if len(names) == 1
        else f"bt classify: {len(names)} runs ({', '.join(names)})"
    )
    shown = labels
    if problems and len(labels) and "run" in labels.columns:  # the index names each problem
        shown = labels.assign(
            problem_text=[
                (problems.get(r) or {}).get(c)
                for r, c in zip(labels["run"], labels["cell_id"], strict=True)
            ]
        )
    H.write_report(
        index,
        title=title,
        labels=shown,
        restart_budgets=budgets,
        figures=figs,
        summary=summary,
        cell_pages=pages,
        plan=chosen,
        files=files + [summary_path, out / "plan.csv", out / "plan.json"],
        figure_gaps=gaps,
    )
    return {
        "index": index,
        "summary": summary_path,
        "tables": files,
        "figures": figs,
        "figure_gaps": gaps,
        "cells": pages,
        "summary_obj": summary,
        "labels": labels,
    }

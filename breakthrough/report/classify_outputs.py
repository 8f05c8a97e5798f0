"""What `bt classify` reads and writes: each run's store in, tables, summary, plans, figures and
the HTML report out.

`classify_runs` reads every run whole from its store, including the protocol it was made
under (`RunStore.protocol()`: a run without one is refused, never re-inferred from its
samples; a `bt sample` run, independent attempts, is no study run and is skipped), labels it
with `breakthrough.classify.frames.classify_frames` and writes everything with
`write_outputs`:

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

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from breakthrough.classify.completeness import STATUSES, status_counts
from breakthrough.classify.frames import Band, ClassifyResult, classify_frames, extra_summary
from breakthrough.classify.plan import PlanItem
from breakthrough.classify.summary import summarize
from breakthrough.outputs import make_folder, write_atomic, write_json
from breakthrough.report import figures as F
from breakthrough.report import html as H
from breakthrough.report.cell_details import CellDetail, cell_details, problem_line, problem_text
from breakthrough.report.cell_figure import cell_svg
from breakthrough.store import RunStore, find_runs, run_names

TABLES = (
    "labels",
    "curves",
    "probe_cells",
    "restart_cells",
    "label_hardening",
    "topup_resolution",
    "arms",
    "a2",
    "unfinished",
)
# written when a run holds a second probe arm, or a cell that has not run its protocol
OPTIONAL_TABLES = ("arms", "a2", "unfinished")


@dataclass
class ClassifyReport:
    """What `bt classify` wrote: the combined summary, the report's top page and the plan."""

    out_dir: Path
    index: Path
    summary: dict
    results: dict[str, ClassifyResult]  # run name → result
    paths: dict[str, Any]
    notes: list[str] = field(default_factory=list)  # what the command says beside the tables
    runs: list[Path] = field(default_factory=list)  # the run directories classified

    @property
    def plan_items(self) -> int:
        """Items of the chosen --topup plan over all runs."""
        return sum(len(r.plan) for r in self.results.values())


def default_out_dir(runs: Sequence[Path]) -> Path:
    """RUN/classify for one run, else <common parent of the runs>/classify."""
    roots = [Path(r) for r in runs]
    if len(roots) == 1:
        return roots[0] / "classify"
    return Path(os.path.commonpath([str(p.resolve()) for p in roots])) / "classify"


def labels_dir(runs: Sequence[Path]) -> Path:
    """The classify folder whose labels a later command (`bt confirm RUN...`) reads: the
    first of `default_out_dir(runs)` (what `bt classify` with the same arguments writes), each
    run's own RUN/classify and its parent's classify folder (what `bt classify runs/` writes)
    whose summary labels every one of the runs; `default_out_dir(runs)` when none does (the
    reader then says how to make it)."""
    first = default_out_dir(runs)
    dirs = find_runs(runs, study=True).runs
    names = {d.name for d in dirs}
    candidates = [first] + [c for d in dirs for c in (d / "classify", d.parent / "classify")]
    for cand in dict.fromkeys(candidates):
        try:
            held = set(json.loads((cand / "summary.json").read_text(encoding="utf-8"))["runs"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if (cand / "labels.parquet").is_file() and names <= held:
            return cand
    return first


def classify_runs(
    runs: Sequence[Path],
    out: Path | None = None,
    *,
    topup: str | Iterable[str] = "terminal,ambiguous",
    tau: float | None = None,
    delta: float | None = None,
    prior: str | None = None,
    band: Band | None = None,
    draws: int = 200,
    seed: int = 0,
    cell_pages: bool = True,
) -> ClassifyReport:
    """`bt classify RUN...`: classify every run (run directories or folders of them) under its
    stored protocol (τ, δ, prior and band override it when given) and write every output
    under `out` (default `default_out_dir(runs)`)."""
    results: dict[str, ClassifyResult] = {}
    details: dict[str, dict[str, CellDetail]] = {}
    problems: dict[str, dict[str, str | None]] = {}
    dirs, notes = study_runs(runs)
    for d, name in zip(dirs, run_names(dirs), strict=True):
        with RunStore(d, readonly=True) as store:
            protocol = store.protocol()
            samples = store.samples_frame(arrays=False)
            cells = store.cells_frame()
            items = store.items()
        results[name] = classify_frames(
            samples,
            cells,
            protocol=protocol,
            topup=topup,
            tau=tau,
            delta=delta,
            prior=prior,
            band=band,
            draws=draws,
            seed=seed,
        )
        if cell_pages:
            details[name] = cell_details(
                samples, items, dict(zip(cells["cell_id"], cells["answer"], strict=True))
            )
        problems[name] = {cid: problem_line(problem_text(item)) for cid, item in items.items()}
    out_dir = default_out_dir(runs) if out is None else Path(out)
    paths = write_outputs(
        results, out_dir, cell_pages=cell_pages, details=details, problems=problems
    )
    notes += result_notes(results)
    return ClassifyReport(
        out_dir=out_dir,
        index=paths["index"],
        summary=paths["summary_obj"],
        results=results,
        paths=paths,
        notes=notes,
        runs=dirs,
    )


def study_runs(runs: Sequence[Path]) -> tuple[list[Path], list[str]]:
    """(the study runs among `runs`, notes): `store.find_runs(runs, study=True)`, which skips
    folders that are no run and `bt sample` runs, one note each. Refused when no study run is
    left."""
    found = find_runs(runs, study=True)
    return found.runs, found.notes


def result_notes(results: Mapping[str, ClassifyResult]) -> list[str]:
    """The notes of the classified runs: the cells left unlabelled (one note, every run), and
    the restart cells whose R counts attempts no rule of the study's wave 3 would have."""
    notes = []
    frames = [r.unfinished for r in results.values() if len(r.unfinished)]
    if frames:
        un = pd.concat(frames, ignore_index=True)
        parts = [f"{(un['status'] == s).sum()} {s}" for s in STATUSES if (un["status"] == s).any()]
        notes.append(
            f"left {len(un)} cell{'s' if len(un) != 1 else ''} unlabelled ({', '.join(parts)}): "
            f"a cell gets a regime once its probes and restarts are stored (`bt status` says "
            f"what each lacks; `bt continue` runs it); unfinished.csv lists them"
        )
    whole = sum(r.restarts_whole for r in results.values())
    if whole:
        m = next(iter(results.values())).protocol.restart_samples
        notes.append(
            f"{whole} restart cell{'s' if whole != 1 else ''} hold{'s' if whole == 1 else ''} more "
            f"than {m} attempts with 0/{m} or {m}/{m} in the first {m} (the study's wave 3 never "
            f"enlarged one): R counts all of them, as the protocol's development/supplement "
            f"pooled restart panel does (section 4)"
        )
    return notes


# ---------------------------------------------------------------------------------------------
# writing


def write_table(frame: pd.DataFrame, stem: Path) -> list[Path]:
    """The frame as STEM.parquet (for pandas) and STEM.csv (for everyone else)."""
    pq, csv = stem.with_suffix(".parquet"), stem.with_suffix(".csv")
    write_atomic(pq, lambda tmp: frame.to_parquet(tmp, index=False))
    write_atomic(csv, lambda tmp: frame.to_csv(tmp, index=False))
    return [pq, csv]


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
        for f in write_table(combined[k], out / k)
    ]
    chosen = pd.concat([plan_frame(r.plan, run) for run, r in results.items()], ignore_index=True)
    write_atomic(out / "plan.csv", lambda tmp: chosen.to_csv(tmp, index=False))
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

"""What `bt classify` reads and writes: each run's store in, tables, summary, plans, figures and
the HTML report out.

`classify_runs` reads every run whole from its store, including the protocol it was made
under (`RunStore.protocol()`: a run without one is refused, never re-inferred from its
samples), labels it with `breakthrough.classify.frames.classify_frames` and writes everything
with `write_outputs`:

    labels.{parquet,csv}        one row per cell (all runs; column `run`)
    curves, probe_cells, restart_cells   per (cell, anchor) curves and per-cell posteriors
    plan.csv, plan.json         the next work under the chosen --topup rules (plan.json also
                                holds the plans of the compared rules)
    summary.json                counts, δ sensitivity, agreement, plan sizes, protocol
    figures/, index.html        combined figures and the report's top page
    RUN/index.html, RUN/figures/, RUN/cells/   one page per run and per cell
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from breakthrough.classify.frames import Band, ClassifyResult, classify_frames
from breakthrough.classify.plan import PlanItem
from breakthrough.classify.summary import summarize
from breakthrough.report import figures as F
from breakthrough.report import html as H
from breakthrough.store import RunStore, run_dirs

TABLES = ("labels", "curves", "probe_cells", "restart_cells")


@dataclass
class ClassifyReport:
    """What `bt classify` wrote: the combined summary, the report's top page and the plan."""

    out_dir: Path
    index: Path
    summary: dict
    results: dict[str, ClassifyResult]  # run name → result
    paths: dict[str, Any]

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


def classify_runs(runs: Sequence[Path], out: Path | None = None, *,
                  topup: str | Iterable[str] = "terminal,ambiguous", tau: float | None = None,
                  delta: float | None = None, prior: str | None = None,
                  band: Band | None = None, draws: int = 200, seed: int = 0,
                  cell_pages: bool = True) -> ClassifyReport:
    """`bt classify RUN...`: classify every run (run directories or folders of them) under its
    stored protocol (τ, δ, prior and band override it when given) and write every output
    under `out` (default `default_out_dir(runs)`)."""
    results: dict[str, ClassifyResult] = {}
    for d in run_dirs(runs):
        name, i = d.name, 2
        while name in results:
            name, i = f"{d.name}-{i}", i + 1
        with RunStore(d) as store:
            protocol = store.protocol()
            samples = store.samples_frame(arrays=False)
            cells = store.cells_frame()
        results[name] = classify_frames(samples, cells, protocol=protocol, topup=topup, tau=tau,
                                        delta=delta, prior=prior, band=band, draws=draws,
                                        seed=seed)
    out_dir = default_out_dir(runs) if out is None else Path(out)
    paths = write_outputs(results, out_dir, cell_pages=cell_pages)
    return ClassifyReport(out_dir=out_dir, index=paths["index"], summary=paths["summary_obj"],
                          results=results, paths=paths)


# ---------------------------------------------------------------------------------------------
# writing


def _jsonable(v: Any) -> Any:
    if hasattr(v, "item"):
        return v.item()
    if isinstance(v, (set, tuple)):
        return list(v)
    return str(v)


def _clean(obj: Any) -> Any:
    """NaN → null, keys → str, recursively (JSON has no NaN)."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def write_json(path: Path, obj: Any) -> Path:
    """Write JSON atomically (temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(_clean(obj), indent=2, sort_keys=False, default=_jsonable) + "\n",
                   encoding="utf-8")
    os.replace(tmp, path)
    return path


def write_table(frame: pd.DataFrame, stem: Path) -> list[Path]:
    """The frame as STEM.parquet (for pandas) and STEM.csv (for everyone else)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    pq, csv = stem.with_suffix(".parquet"), stem.with_suffix(".csv")
    frame.to_parquet(pq, index=False)
    frame.to_csv(csv, index=False)
    return [pq, csv]


def plan_frame(items: Sequence[PlanItem], run: str | None = None) -> pd.DataFrame:
    """A plan as a table (branches written "4-7")."""
    rows = [({"run": run} if run else {}) | it.to_dict() for it in items]
    cols = (["run"] if run else []) + ["cell_id", "kind", "anchor", "budget", "branches",
                                       "reason"]
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
    return {k: (pd.concat(v, ignore_index=True) if v else pd.DataFrame())
            for k, v in frames.items()}


def _run_page(run: str, res: ClassifyResult, rdir: Path, cell_pages: bool) -> Path:
    """One run's figures, cell pages and page."""
    p = res.protocol
    rfigs = F.all_figures(res.labels, res.probe_cells, rdir / "figures", tau=p.tau,
                          target=p.topup_samples, budgets=p.restart_budgets)
    pages = {}
    page = rdir / "index.html"
    if cell_pages and len(res.labels):
        curves = res.curves.groupby("cell_id") if len(res.curves) else None
        rcells = res.restart_cells.groupby("cell_id") if len(res.restart_cells) else None
        for row in res.labels.to_dict(orient="records"):
            cid = row["cell_id"]
            curve = curves.get_group(cid) if curves is not None and cid in curves.groups \
                else res.curves.iloc[0:0]
            rc = rcells.get_group(cid) if rcells is not None and cid in rcells.groups else None
            svg = F.cell_svg(curve, row, tau=p.tau, delta=p.delta)
            pages[cid] = H.write_cell_page(rdir / "cells" / f"{H.cell_slug(cid)}.html", row=row,
                                           curve=curve, svg=svg, restarts=rc, back=page)
    return H.write_run_page(page, title=f"bt classify: {run}", labels=res.labels,
                            figures=rfigs, summary=res.summary, cell_pages=pages,
                            plan=plan_frame(res.plan))


def write_outputs(results: dict[str, ClassifyResult], out_dir: str | Path, *,
                  cell_pages: bool = True) -> dict[str, Any]:
    """Write tables, summary, plans, figures and HTML for the runs (name → result) under
    out_dir. The combined summary and figures use the first run's protocol. Returns
    {"index": path, "summary": path, "tables": [...], "figures": {...}, "runs": {...},
    "summary_obj": dict, "labels": frame}."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    first = next(iter(results.values()))
    protocol = first.protocol
    combined = _combined(results)
    labels = combined["labels"]
    rules = list(first.plans)
    plans = {rule: [it for res in results.values() for it in res.plans.get(rule, [])]
             for rule in rules}
    summary = summarize(labels, protocol=protocol, plans=plans,
                        prior=first.summary.get("prior")) if len(labels) else dict(first.summary)
    for key in ("topup", "posterior_band", "survival_draws", "survival_seed", "protocol"):
        summary[key] = first.summary.get(key)
    summary["runs"] = {run: {"cells": int(len(r.labels)), "plan_items": len(r.plan),
                             "regime_counts": r.summary.get("regime_counts", {}),
                             "protocol": r.summary.get("protocol")}
                       for run, r in results.items()}
    files = [f for k in TABLES for f in write_table(combined[k], out / k)]
    chosen = pd.concat([plan_frame(r.plan, run) for run, r in results.items()],
                       ignore_index=True)
    chosen.to_csv(out / "plan.csv", index=False)
    write_json(out / "plan.json", {
        "topup": first.topup,
        "items": [{"run": run} | it.to_dict() for run, r in results.items() for it in r.plan],
        "other_rules": {rule: [{"run": run} | it.to_dict() for run, r in results.items()
                               for it in r.plans.get(rule, [])]
                        for rule in rules if rule != first.topup}})
    summary_path = write_json(out / "summary.json", summary)
    figs = F.all_figures(labels, combined["probe_cells"], out / "figures", tau=protocol.tau,
                         target=protocol.topup_samples, budgets=protocol.restart_budgets)
    run_pages = {run: _run_page(run, res, out / run, cell_pages) for run, res in results.items()}
    index = H.write_index(out / "index.html", runs=run_pages, figures=figs, summary=summary,
                          files=files + [summary_path])
    return {"index": index, "summary": summary_path, "tables": files, "figures": figs,
            "runs": run_pages, "summary_obj": summary, "labels": labels}

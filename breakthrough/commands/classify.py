"""`bt classify RUN...`: labels, regimes, plan of next work, tables, figures and HTML report.

The core is `classify_frames(samples, cells, ...)` (frames in, results out, no I/O); the
command reads each run's store, calls it per run, and writes everything with `write_outputs`.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import typer

from breakthrough.errors import BtError
from breakthrough.protocol import DEFAULT, Protocol


@dataclass
class ClassifyResult:
    """Everything `bt classify` derives from one run (see docs in each module)."""

    labels: Any  # pd.DataFrame: one row per cell (classify.label_panels + regime_survival)
    curves: Any  # pd.DataFrame: one row per (cell, probed anchor): p, R̂, adv (cell_curves)
    probe_cells: Any  # pd.DataFrame: probe panel + model, rate, post_mean, p_ge_tau
    restart_cells: Any  # pd.DataFrame: restart panel + model, rate, post_mean, p_ge_tau
    plans: dict  # {"fixed": [PlanItem], "posterior": [PlanItem]}
    topup: str  # which plan the scheduler should run ("fixed" | "posterior")
    summary: dict  # classify.summarize(...) plus prior, band, topup
    params: dict = field(default_factory=dict)

    @property
    def plan(self) -> list:
        return self.plans[self.topup]


PROTOCOL_KEYS = ("anchors", "budget", "refinement_rounds", "refinement_min_width", "samples",
                 "topup_samples", "restart_budgets", "restart_samples", "tau", "delta", "deltas")


def resolve_protocol(manifest: dict | None, samples=None,
                     base: Protocol = DEFAULT) -> tuple[Protocol, list[str]]:
    """The labelling constants of a run: `base` overridden by the run manifest's "protocol"
    entry (any of PROTOCOL_KEYS it holds), then, if the samples show a probe budget B or
    restart budgets the protocol does not know (a small-budget demo run whose manifest does
    not say), the observed ones. Returns the protocol and notes on what was taken from where."""
    notes: list[str] = []
    changes: dict[str, Any] = {}
    stored = (manifest or {}).get("protocol") or {}
    if isinstance(stored, dict):
        for key in PROTOCOL_KEYS:
            if key in stored and stored[key] is not None:
                v = stored[key]
                changes[key] = tuple(v) if isinstance(v, list) else v
        if changes:
            notes.append("from the run manifest: " + ", ".join(sorted(changes)))
    proto = base.with_overrides(**changes) if changes else base
    if samples is not None and len(samples):
        graded = samples[samples["correct"].notna()] if "correct" in samples else samples
        pb = graded.loc[graded["kind"] == "probe", "budget"].astype(int)
        if len(pb) and proto.budget not in set(pb):
            b = int(pb.value_counts().idxmax())
            proto = proto.with_overrides(budget=b)
            notes.append(f"probe budget B = {b} inferred from the samples")
        rb = sorted(set(graded.loc[graded["kind"] == "restart", "budget"].astype(int)))
        if rb and not set(rb) <= set(proto.restart_budgets):
            proto = proto.with_overrides(restart_budgets=tuple(rb))
            notes.append(f"restart budgets {rb} inferred from the samples")
    return proto, notes


def classify_frames(samples, cells=None, *, protocol: Protocol = DEFAULT,
                    tau: float | None = None, delta: float | None = None, topup: str = "fixed",
                    prior: str = "jeffreys", band: tuple[float, float] = (0.1, 0.9),
                    draws: int = 200, seed: int = 0) -> ClassifyResult:
    """Labels, posteriors, survival, both plans and the summary of one run's frames
    (`RunStore.samples_frame()`, `RunStore.cells_frame()`; cells may be None)."""
    import pandas as pd

    from breakthrough.classify import regimes as C
    from breakthrough.classify.panels import probe_panel, restart_panel
    from breakthrough.classify.posterior import describe_prior, regime_survival, with_posterior

    if topup not in ("fixed", "posterior"):
        raise BtError(f"--topup must be 'fixed' or 'posterior', got {topup!r}")
    tau = protocol.tau if tau is None else float(tau)
    delta = protocol.delta if delta is None else float(delta)
    if not 0 < tau <= 1:
        raise BtError(f"--tau must be in (0, 1], got {tau}")
    if not 0 <= band[0] < band[1] <= 1:
        raise BtError(f"posterior band must satisfy 0 ≤ lo < hi ≤ 1, got {band}")
    pp = probe_panel(samples, protocol)
    rp = restart_panel(samples, protocol)
    labels = C.label_panels(pp, rp, cells, protocol=protocol, tau=tau, delta=delta)
    if len(labels):
        surv = regime_survival(pp, rp, labels, protocol=protocol, tau=tau, delta=delta,
                               draws=draws, seed=seed, prior=prior)
        labels["regime_survival"] = labels["cell_id"].map(surv).astype(float)
    plans = {rule: C.plan_next(pp, rp, protocol=protocol, tau=tau, topup=rule, band=band,
                               prior=prior) for rule in ("fixed", "posterior")}
    model_of = dict(zip(labels["cell_id"], labels["model"])) if len(labels) else {}

    def post(panel):
        out = with_posterior(panel, tau, prior)
        out.insert(1, "model", out["cell_id"].map(model_of))
        return out

    summary = C.summarize(labels, protocol=protocol, tau=tau, delta=delta, plans=plans,
                          prior=describe_prior(prior))
    summary.update(topup=topup, posterior_band=list(band), survival_draws=draws,
                   survival_seed=seed,
                   protocol={"budget": protocol.budget, "anchors": list(protocol.anchors),
                             "restart_budgets": list(protocol.restart_budgets),
                             "samples": protocol.samples,
                             "topup_samples": protocol.topup_samples,
                             "scratch_budget": C.scratch_budget(protocol),
                             "budget_limited_at": C.budget_limited_at(protocol)})
    curves = C.cell_curves(pp, rp, protocol=protocol)
    return ClassifyResult(labels=labels if len(labels) else pd.DataFrame(), curves=curves,
                          probe_cells=post(pp), restart_cells=post(rp), plans=plans,
                          topup=topup, summary=summary,
                          params={"tau": tau, "delta": delta, "prior": prior, "band": band,
                                  "protocol": protocol})


# ---------------------------------------------------------------------------------------------
# writing


def _jsonable(v):
    if hasattr(v, "item"):
        return v.item()
    if isinstance(v, (set, tuple)):
        return list(v)
    return str(v)


def _clean(obj):
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def _write_json(path: Path, obj) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(_clean(obj), indent=2, sort_keys=False, default=_jsonable) + "\n",
                   encoding="utf-8")
    os.replace(tmp, path)
    return path


def _write_table(frame, stem: Path) -> list[Path]:
    stem.parent.mkdir(parents=True, exist_ok=True)
    pq, csv = stem.with_suffix(".parquet"), stem.with_suffix(".csv")
    frame.to_parquet(pq, index=False)
    frame.to_csv(csv, index=False)
    return [pq, csv]


def _plan_frame(items, run: str | None = None):
    import pandas as pd

    rows = [({"run": run} if run else {}) | it.to_dict() for it in items]
    cols = (["run"] if run else []) + ["cell_id", "kind", "anchor", "budget", "branches",
                                       "reason"]
    frame = pd.DataFrame(rows, columns=cols)
    frame["branches"] = frame["branches"].map(lambda b: f"{b[0]}-{b[1] - 1}")
    return frame


def write_outputs(results: dict[str, ClassifyResult], out_dir: str | Path, *,
                  cell_pages: bool = True) -> dict[str, Any]:
    """Write tables, summary, plans, figures and HTML for the runs (name → result) under
    out_dir. Returns {"index": path, "labels": [...], "summary": path, ...}."""
    import pandas as pd

    from breakthrough.classify import regimes as C
    from breakthrough.report import figures as F
    from breakthrough.report import html as H

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    any_res = next(iter(results.values()))
    tau, delta = any_res.params["tau"], any_res.params["delta"]
    protocol = any_res.params["protocol"]
    frames = {k: [] for k in ("labels", "curves", "probe_cells", "restart_cells")}
    for run, res in results.items():
        for k in frames:
            f = getattr(res, k)
            if len(f):
                frames[k].append(f.assign(run=run) if "run" not in f.columns else f)
    combined = {k: (pd.concat(v, ignore_index=True) if v else pd.DataFrame())
                for k, v in frames.items()}
    labels = combined["labels"]
    plans = {rule: [it for res in results.values() for it in res.plans[rule]]
             for rule in ("fixed", "posterior")}
    summary = C.summarize(labels, protocol=protocol, tau=tau, delta=delta, plans=plans,
                          prior=any_res.summary.get("prior")) if len(labels) else \
        dict(any_res.summary)
    for key in ("topup", "posterior_band", "survival_draws", "survival_seed", "protocol"):
        summary[key] = any_res.summary.get(key)
    summary["runs"] = {run: {"cells": int(len(r.labels)), "plan_items": len(r.plan),
                             "regime_counts": r.summary.get("regime_counts", {}),
                             "protocol": r.summary.get("protocol"),
                             "protocol_notes": r.params.get("protocol_notes", [])}
                       for run, r in results.items()}
    paths: dict[str, Any] = {}
    files = []
    files += _write_table(labels, out / "labels")
    files += _write_table(combined["curves"], out / "curves")
    files += _write_table(combined["probe_cells"], out / "probe_cells")
    files += _write_table(combined["restart_cells"], out / "restart_cells")
    chosen = pd.concat([_plan_frame(r.plan, run) for run, r in results.items()],
                       ignore_index=True)
    chosen.to_csv(out / "plan.csv", index=False)
    _write_json(out / "plan.json", {
        "topup": any_res.topup,
        "items": [{"run": run} | it.to_dict() for run, r in results.items() for it in r.plan],
        "other_rule": {rule: [{"run": run} | it.to_dict() for run, r in results.items()
                              for it in r.plans[rule]]
                       for rule in ("fixed", "posterior") if rule != any_res.topup}})
    summary_path = _write_json(out / "summary.json", summary)
    target = protocol.topup_samples
    figs = F.all_figures(labels, combined["probe_cells"], out / "figures", tau=tau,
                         target=target, budgets=protocol.restart_budgets)
    run_pages = {}
    for run, res in results.items():
        rdir = out / run
        rp = res.params["protocol"]
        rfigs = F.all_figures(res.labels, res.probe_cells, rdir / "figures", tau=tau,
                              target=rp.topup_samples, budgets=rp.restart_budgets)
        pages = {}
        if cell_pages and len(res.labels):
            page = rdir / "index.html"
            curves = res.curves.groupby("cell_id") if len(res.curves) else None
            rcells = res.restart_cells.groupby("cell_id") if len(res.restart_cells) else None
            for row in res.labels.to_dict(orient="records"):
                cid = row["cell_id"]
                slug = H.cell_slug(cid)
                curve = curves.get_group(cid) if curves is not None and cid in curves.groups \
                    else res.curves.iloc[0:0]
                rc = rcells.get_group(cid) if rcells is not None and cid in rcells.groups \
                    else None
                svg = F.cell_svg(curve, row, tau=tau, delta=delta)
                pages[cid] = H.write_cell_page(rdir / "cells" / f"{slug}.html", row=row,
                                               curve=curve, svg=svg, restarts=rc, back=page)
        run_pages[run] = H.write_run_page(
            rdir / "index.html", title=f"bt classify: {run}", labels=res.labels,
            figures=rfigs, summary=res.summary, cell_pages=pages,
            plan=_plan_frame(res.plan))
    paths["index"] = H.write_index(out / "index.html", runs=run_pages, figures=figs,
                                   summary=summary, files=files + [summary_path])
    paths.update(summary=summary_path, tables=files, figures=figs, runs=run_pages,
                 summary_obj=summary, labels=labels)
    return paths


# ---------------------------------------------------------------------------------------------
# command


def _print_tables(summary: dict, index: Path, plan_items: int, topup: str) -> None:
    from rich.console import Console
    from rich.table import Table

    from breakthrough.classify.regimes import REGIMES

    console = Console()
    counts = summary.get("regime_counts", {})
    for model, c in counts.items():
        console.print(f"[bold]{model}[/bold]: {summary['n_cells'][model]} cells "
                      f"(τ = {summary['tau']}, δ = {summary['primary_delta']})")
        t = Table()
        t.add_column("regime")
        t.add_column("cells", justify="right")
        for r in REGIMES:
            if c.get(r):
                t.add_row(r, str(c[r]))
        console.print(t)
    if counts:
        console.print(f"δ sensitivity (non-instant cells with T_V): "
                      f"{summary.get('delta_sensitivity_counts')}; conservative disagreements: "
                      f"{len(summary.get('conservative_disagreements', []))}; cross-model "
                      f"agreement: {summary.get('cross_model_agreement', {}).get('text')}")
    plans = summary.get("plans", {})
    console.print("next work: " + "; ".join(
        f"{rule}: {p['items']} items ({p['samples']} samples)" for rule, p in plans.items())
        + f" → plan.json holds the {topup} rule ({plan_items} items)")
    console.print(f"report: {index}")


def _out_dir(runs: list[Path], given: Path | None) -> Path:
    if given is not None:
        return given
    roots = [Path(r) for r in runs]
    if len(roots) == 1:
        return roots[0] / "classify"
    return Path(os.path.commonpath([str(p.resolve()) for p in roots])) / "classify"


def register(app: typer.Typer) -> None:
    @app.command("classify")
    def classify_cmd(
        runs: list[Path] = typer.Argument(..., help="Run directories (with store.sqlite) or "
                                                    "folders of them, e.g. runs/."),
        tau: float = typer.Option(DEFAULT.tau, help="Solve-rate threshold τ."),
        delta: float = typer.Option(DEFAULT.delta, help="Primary prefix-value margin δ."),
        topup: str = typer.Option("fixed", help="Plan of next work: 'fixed' (the study's "
                                                "4→8 rule) or 'posterior' (band on P(rate≥τ))."),
        out: Optional[Path] = typer.Option(None, help="Output folder (default RUN/classify, "
                                                      "or <common parent>/classify)."),
        prior: str = typer.Option("jeffreys", help="Beta prior: 'jeffreys' or 'uniform'."),
        band_lo: float = typer.Option(0.1, help="--topup posterior: lower P(rate≥τ) bound."),
        band_hi: float = typer.Option(0.9, help="--topup posterior: upper P(rate≥τ) bound."),
        draws: int = typer.Option(200, help="Posterior redraws for regime survival."),
        seed: int = typer.Option(0, help="Seed of the posterior redraws."),
        cell_pages: bool = typer.Option(True, help="Write one HTML page + PNG per cell."),
    ) -> None:
        """Label every cell (T_F, R̂, adv, T_V, regime), plan the next work, and write the
        per-cell table, summary JSON, figures and HTML report."""
        from breakthrough.store import RunStore, run_dirs

        if topup not in ("fixed", "posterior"):
            raise BtError(f"--topup must be 'fixed' or 'posterior', got {topup!r}")
        if prior not in ("jeffreys", "uniform"):
            raise BtError(f"--prior must be 'jeffreys' or 'uniform', got {prior!r}")
        dirs = run_dirs(runs)
        results: dict[str, ClassifyResult] = {}
        for d in dirs:
            name = d.name
            i = 2
            while name in results:
                name, i = f"{d.name}-{i}", i + 1
            with RunStore(d) as store:
                samples = store.samples_frame(arrays=False)
                cells = store.cells_frame()
                manifest = store.manifest()
            proto, notes = resolve_protocol(manifest, samples)
            res = classify_frames(samples, cells, protocol=proto, tau=tau, delta=delta,
                                  topup=topup, prior=prior, band=(band_lo, band_hi),
                                  draws=draws, seed=seed)
            res.params["protocol_notes"] = notes
            res.summary["protocol_notes"] = notes
            results[name] = res
        paths = write_outputs(results, _out_dir(runs, out), cell_pages=cell_pages)
        n_items = sum(len(r.plan) for r in results.values())
        _print_tables(paths["summary_obj"], paths["index"], n_items, topup)

"""The page of `bt report study`: one self-contained HTML page across both halves of the study,
rendered from a Jinja2 template (report/templates/study.html.j2 on the shared layout of
`report.templating`), every value escaped by the template engine; it needs
nothing but its folder (no scripts, no network). What goes on it is decided by
`breakthrough.analyses.study`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from breakthrough.protocol import Protocol
from breakthrough.report import headlines as HL
from breakthrough.report.display import plural, table_data
from breakthrough.report.names import model_name
from breakthrough.report.templating import write_page as render_page

PROBE_SUMMARY, PROBE_FIGURE = "probe_summary.json", "probe_figure.png"

# Protocol 10's figure list, in its order: name → caption.
STUDY_FIGURES: dict[str, str] = {
    "regime_map": "Regime map: collapsed class per problem and model, and class counts per model.",
    "dose_response": "Restart dose-response: R(C) per non-instant cell and the share with "
    "R(C) ≥ τ.",
    "matched_compute": "Matched compute: pooled prefix rate vs the matched restart R̂(t + B) per "
    "A1 terminal cell (* proxy comparisons).",
    "topup_resolution": "Top-up resolution: pooled successes of the probe cells at 8 branches.",
    "swimmer": "Swimmer plot: T_F intervals per trajectory; censored rows as arrows.",
    "label_hardening": "Label hardening: trajectory categories before vs after the top-ups.",
    "budget_falsification": "Continuation-budget falsification (A2): first τ-crossing per "
    "trajectory at B1 (ring) and B2 (dot).",
    "probe_dissection": "Probe dissection: pooled vs within-problem AUROC per anchor (bt probe).",
    "prefix_sweep": "Forecast-point sweep: ΔAUROC with its CI per t, primary and secondary "
    "(a star marks the pre-registered t = 512 where it was swept).",
    "confirmatory_forest": "Confirmatory test: test AUROCs and ΔAUROC for both endpoints.",
}


@dataclass
class Missing:
    """Something the study page cannot show yet: what, why, and the command that produces it."""

    what: str
    why: str
    command: str


def write_page(
    path: Path,
    *,
    runs: Sequence[Path],
    summary: Mapping[str, Any],
    labels: pd.DataFrame,
    protocol: Protocol,
    budgets: Sequence[int],
    heads: Sequence[HL.Headline],
    figures: Mapping[str, Path],
    gaps: Mapping[str, str],
    missing: Sequence[Missing],
    classify_index: Path,
    tables: Sequence[Path],
) -> Path:
    """The study page at `path` (its folder holds figures/, tables/ and classify/): the runs and
    settings, each headline with its tables and figures (or why a figure is missing), the
    figures no headline shows, and what is missing with its command."""
    out_dir = path.parent
    shown_figs = {
        h.key: [(n, STUDY_FIGURES.get(n, n)) for n in h.figures if n in figures] for h in heads
    }
    empty = {n for h in heads for n in h.gaps}  # a figure with nothing drawn: a line instead
    used = {n for v in shown_figs.values() for n, _ in v} | empty
    extra = [(n, STUDY_FIGURES.get(n, n.replace("_", " "))) for n in figures if n not in used]
    models = sorted(map(str, labels["model"].unique())) if len(labels) else []
    context = {
        "title": f"Study report: {plural(len(runs), 'run')}, {plural(len(models), 'model')}",
        "runs": [
            {"name": n, "cells": r["cells"], "path": str(d)}
            for (n, r), d in zip(summary.get("runs", {}).items(), runs, strict=False)
        ],
        "models": [model_name(m) for m in models],
        "settings": {
            "τ": protocol.tau,
            "B": protocol.budget,
            "primary δ": protocol.delta,
            "restart budgets": ", ".join(f"{c:,}" for c in budgets),
            "top-up rule": summary.get("topup"),
        },
        "headlines": [
            {
                "key": h.key,
                "title": h.title,
                "sentences": h.sentences,
                "tables": [
                    table_data(f, cls=n, text_left=True)
                    for n, f in h.tables.items()
                    if f is not None and len(f.columns)
                ],
                "figures": shown_figs[h.key],
                "gaps": [
                    (n.replace("_", " "), gaps[n])
                    for n in h.figures
                    if n not in figures and n in gaps
                ]
                + [(n.replace("_", " "), why) for n, why in h.gaps.items()],
            }
            for h in heads
        ],
        "extra_figures": extra,
        "missing": missing,
        "classify_index": os.path.relpath(classify_index, out_dir),
        "tables": [os.path.relpath(p, out_dir) for p in tables],
    }
    return render_page(path, "study.html.j2", **context)

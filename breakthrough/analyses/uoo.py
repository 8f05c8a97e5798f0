"""`bt report uoo RUN...`: the Uniqueness-of-Optimum report over finished runs.

`load_graded` regrades every run's stored base samples against the cohort's optimum items
(`breakthrough.report.uoo.graded_frame`), with each run's prompt variant and thinking switch
from its manifest; `uoo_report` hands the graded frame to
`breakthrough.report.uoo_report.uoo_tables`, whose tables the command prints, and with an
output folder draws them, with the figure, as a page (`breakthrough.report.uoo_page`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from breakthrough.errors import BtError
from breakthrough.report.uoo import graded_frame, summarize_runs
from breakthrough.report.uoo_figure import claimed_vs_true_figure
from breakthrough.report.uoo_page import write_uoo_page
from breakthrough.report.uoo_report import TextTable, uoo_tables
from breakthrough.schemas.check import check
from breakthrough.schemas.uoo import GRADED
from breakthrough.store import RunStore, run_dirs
from breakthrough.tasks.cohorts import load_cohort

VARIANT_KEYS = ("prompt_variant", "variant", "uoo_variant")


def _sample_variant(extra: Any) -> str | None:
    if isinstance(extra, str) and extra:
        try:
            extra = json.loads(extra)
        except ValueError:
            return None
    if isinstance(extra, dict):
        for key in VARIANT_KEYS:
            if isinstance(extra.get(key), str):
                return extra[key]
    return None


def manifest_variant(manifest: dict[str, Any]) -> str | None:
    """The prompt variant a run was made with: an explicit manifest key, or the suffix of
    `prompt_version` ("v1/explicit", as the scheduler writes it for optimum cohorts)."""
    for key in VARIANT_KEYS:
        if isinstance(manifest.get(key), str):
            return manifest[key]
    pv = manifest.get("prompt_version")
    if isinstance(pv, str) and "/" in pv:
        return pv.rsplit("/", 1)[1]
    return None


def manifest_thinking(manifest: dict[str, Any]) -> str:
    """The run's `--thinking` ("on", "off"; "" when not asked, or a run made before the
    switch), from the protocol its manifest stores."""
    protocol = manifest.get("protocol")
    value = protocol.get("thinking") if isinstance(protocol, dict) else None
    return value if value in ("on", "off") else ""


def load_graded(runs: Sequence[Path], cohort: str, variant: str | None) -> pd.DataFrame:
    """One graded frame over all runs (regraded from the stored text); a run's variant is
    `variant`, else the one it recorded, per sample or in its manifest."""
    items = {r["id"]: r for r in load_cohort(cohort) if r.get("family") == "optimum"}
    if not items:
        raise BtError(f"cohort {cohort!r} has no optimum rows")
    frames = []
    labels: set[str] = set()
    for run_dir in run_dirs(runs):
        label = run_dir.name
        while label in labels:
            label += "'"
        labels.add(label)
        with RunStore(run_dir, readonly=True) as store:
            manifest = store.manifest()
            samples = store.samples_frame(arrays=False, kind="base")
        run_variant = variant or manifest_variant(manifest)
        if "extra" in samples:
            per_sample = samples["extra"].map(_sample_variant)
            samples = samples.assign(variant=per_sample.where(per_sample.notna(), run_variant))
        frames.append(
            graded_frame(
                samples, items, run=label, variant=run_variant, thinking=manifest_thinking(manifest)
            )
        )
    df = summarize_runs(frames)
    if df.empty:
        raise BtError(
            f"no samples of cohort {cohort!r} in {', '.join(map(str, runs))} "
            "(run e.g. `bt base --cohort uoo29 ...` first)"
        )
    return check(GRADED, pd.DataFrame(df))


def uoo_report(
    runs: Sequence[Path],
    *,
    cohort: str = "uoo87",
    variant: str | None = None,
    ci: str = "wilson",
    figure: Path | None = None,
    out: Path | None = None,
) -> list[TextTable]:
    """`bt report uoo RUN...`: the tables of the runs' regraded samples; with `figure`, also
    the claimed-vs-true count figure (log axes, by size) written there as a PNG; with `out`,
    the page OUT/index.html (tables and figure)."""
    df = load_graded(runs, cohort, variant)
    tables = uoo_tables(df, ci)
    if figure is not None:
        claimed_vs_true_figure(df, figure)
    if out is not None:
        write_uoo_page(out, df, tables, cohort)
    return tables

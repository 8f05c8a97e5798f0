"""Everything `bt classify` derives from one run's frames (pure: frames in, results out).

`classify_frames(samples, cells, protocol=...)` builds the panels, labels every cell that ran
its protocol (a cell not continued, or left incomplete, gets no regime: it is listed apart,
`classify.completeness`), measures how robust each label is under the posterior, plans the next
work under the chosen `--topup` rules (and under the study's and the posterior rule, for
comparison) and summarizes. Reading a
run's store is `breakthrough.analyses.classify_run`; writing tables, figures and HTML is
`breakthrough.report.classify_outputs`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import pandas as pd

from breakthrough.classify.arms import a2_table, a2_verdict, arm_labels
from breakthrough.classify.beta import describe_prior
from breakthrough.classify.completeness import status_counts, unfinished_cells
from breakthrough.classify.hardening import hardening_counts, topup_resolution
from breakthrough.classify.panels import probe_panel, restart_panel, rows_by_cell
from breakthrough.classify.plan import PlanItem, plan_next
from breakthrough.classify.pooling import whole_beyond_rule
from breakthrough.classify.posterior import regime_survival, with_posterior
from breakthrough.classify.regimes import cell_curves, label_panels, pooling_rule
from breakthrough.classify.settings import DEFAULT_SETTINGS, ClassifySettings
from breakthrough.classify.summary import summarize
from breakthrough.protocol import DEFAULT, Protocol

# The plans every summary compares, besides the chosen one: the study's rule and the posterior
# rule (both with A1 terminal replication).
COMPARED_TOPUPS = ("terminal,ambiguous", "terminal,posterior")


@dataclass
class ClassifyResult:
    """Everything `bt classify` derives from one run."""

    labels: pd.DataFrame  # one row per cell that ran its protocol (label_panels + survival)
    curves: pd.DataFrame  # one row per (cell, probed anchor): p, R̂, adv (regimes.cell_curves)
    probe_cells: pd.DataFrame  # probe panel + model, rate, post_mean, p_ge_tau
    restart_cells: pd.DataFrame  # restart panel + model, rate, post_mean, p_ge_tau
    plans: dict[str, list[PlanItem]]  # --topup text → plan: the chosen rules + COMPARED_TOPUPS
    topup: str  # the chosen --topup rules, canonical text ("terminal,ambiguous", "none", ...)
    summary: dict  # summary.summarize(...) plus topup, posterior band, survival draws, protocol
    protocol: Protocol  # the run's protocol with any overrides: every label was made under it
    arms: pd.DataFrame = field(default_factory=pd.DataFrame)  # per (cell, B) when a 2nd arm exists
    a2: pd.DataFrame = field(default_factory=pd.DataFrame)  # A2 comparison (arms.a2_table)
    label_hardening: pd.DataFrame = field(default_factory=pd.DataFrame)  # hardening_counts
    topup_resolution: pd.DataFrame = field(default_factory=pd.DataFrame)  # per model, 9.4
    # cells that have not run their protocol, unlabelled (completeness.unfinished_cells)
    unfinished: pd.DataFrame = field(default_factory=pd.DataFrame)
    # restart cells counted whole beyond the rule in force (pooling.whole_beyond_rule)
    restarts_whole: int = 0

    @property
    def plan(self) -> list[PlanItem]:
        """The plan of the chosen rules: what `bt continue --topup <topup>` runs next."""
        return self.plans[self.topup]


def classify_frames(
    samples: pd.DataFrame,
    cells: pd.DataFrame | None = None,
    *,
    protocol: Protocol = DEFAULT,
    settings: ClassifySettings = DEFAULT_SETTINGS,
    grids: dict[str, tuple[int, ...]] | None = None,
    base_gone: Iterable[str] = (),
) -> ClassifyResult:
    """Labels, posteriors, survival, the plans and the summary of one run's frames
    (`RunStore.samples_frame()`, `RunStore.cells_frame()`; cells may be None) under the run's
    protocol; `settings`' τ, δ, prior and posterior band override the protocol's when given. The
    chosen `settings.topup` rules also decide which top-up branches the labels count
    (`classify.pooling`): "terminal,ambiguous" labels as the study's wave 3 (A5.1 pooled),
    "terminal" as its development and supplement cohorts (canonical 4-branch probe summaries;
    restart cells count every attempt, `classify.pooling`). Cells that have not run their
    protocol (`completeness.unfinished_cells`; `grids`, `completeness.owed_grids` of the base
    traces: the anchors each cell's probes must hold; `base_gone`, cells whose base trace was
    deleted, `RunStore.base_trace_gone`) get no label:
    `ClassifyResult.unfinished`."""
    protocol = settings.protocol(protocol)
    chosen = settings.topup_text
    all_pp = probe_panel(samples, protocol)
    all_rp = restart_panel(samples, protocol)
    unfinished = unfinished_cells(
        samples,
        cells,
        probe_rows=rows_by_cell(all_pp, "anchor"),
        protocol=protocol,
        grids=grids,
        base_gone=base_gone,
    )
    skip = set(unfinished["cell_id"])
    pp = all_pp[~all_pp["cell_id"].isin(skip)]  # what the labels read: finished cells only
    rp = all_rp[~all_rp["cell_id"].isin(skip)]
    if cells is not None and len(cells):
        cells = cells[~cells["cell_id"].astype(str).isin(skip)]
    labels = label_panels(pp, rp, cells, protocol=protocol, topup=chosen)
    if len(labels):
        surv = regime_survival(pp, rp, labels, protocol=protocol, settings=settings)
        labels["regime_survival"] = labels["cell_id"].map(surv).astype(float)
    plans = {
        rule: plan_next(all_pp, all_rp, protocol=protocol, topup=rule)
        for rule in dict.fromkeys((chosen, *COMPARED_TOPUPS))
    }
    model_of = dict(zip(unfinished["cell_id"], unfinished["model"], strict=True)) | (
        dict(zip(labels["cell_id"], labels["model"], strict=True)) if len(labels) else {}
    )
    whole = whole_beyond_rule(
        [r for rows in rows_by_cell(rp, "budget").values() for r in rows],
        pooling_rule(protocol, chosen, protocol.tau),
    )

    def post(panel: pd.DataFrame) -> pd.DataFrame:
        out = with_posterior(panel, protocol.tau, protocol.prior)
        out.insert(1, "model", out["cell_id"].map(model_of))
        return out

    summary = summarize(
        labels, protocol=protocol, plans=plans, prior=describe_prior(protocol.prior)
    )
    summary.update(
        topup=chosen,
        posterior_band=list(protocol.posterior_band),
        survival_draws=settings.draws,
        survival_seed=settings.seed,
        unfinished_counts=status_counts(unfinished),
        restart_cells_whole=whole,
        protocol=protocol.to_dict()
        | {
            "scratch_budget": protocol.scratch_budget,
            "budget_limited_at": protocol.budget_limited_at,
        },
    )
    probe_cells = post(all_pp)
    arms, a2 = second_arms(
        samples[~samples["cell_id"].astype(str).isin(skip)] if len(samples) else samples,
        pp,
        labels,
        protocol,
    )
    before = label_panels(pp, rp, cells, protocol=protocol, topup="terminal")
    hardening = hardening_counts(before, labels)
    resolution = topup_resolution(
        probe_cells, tau=protocol.tau, target=protocol.topup_samples, canonical=protocol.samples
    )
    summary.update(extra_summary(a2, hardening, resolution))
    return ClassifyResult(
        labels=labels if len(labels) else pd.DataFrame(),
        curves=cell_curves(pp, rp, protocol=protocol, topup=chosen),
        probe_cells=probe_cells,
        restart_cells=post(all_rp),
        plans=plans,
        topup=chosen,
        summary=summary,
        protocol=protocol,
        arms=arms,
        a2=a2,
        label_hardening=hardening,
        topup_resolution=resolution,
        unfinished=unfinished,
        restarts_whole=whole,
    )


def second_arms(
    samples: pd.DataFrame, primary: pd.DataFrame, labels: pd.DataFrame, protocol: Protocol
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(arm labels, A2 comparison) when the run holds probes at a second budget (`bt continue
    --add-budget`), else two empty frames: every arm labelled at its own B
    (`arms.arm_labels`), each second arm compared with the primary one (`arms.a2_table`)."""
    probes = samples[samples["kind"] == "probe"] if len(samples) else samples
    budgets = sorted({int(b) for b in probes["budget"]}) if len(probes) else []
    others = [b for b in budgets if b != protocol.budget]
    if not others:
        return pd.DataFrame(), pd.DataFrame()
    panels = {protocol.budget: primary} | {
        b: probe_panel(samples, protocol, budget=b) for b in others
    }
    levels = (
        dict(zip(labels["cell_id"], labels["level"], strict=True))
        if len(labels) and "level" in labels.columns
        else {}
    )
    a2 = pd.concat(
        [
            a2_table(
                primary,
                panels[b],
                budget_1=protocol.budget,
                budget_2=b,
                tau=protocol.tau,
                levels=levels,
            )
            for b in others
        ],
        ignore_index=True,
    )
    return arm_labels(panels, protocol.tau), a2


def extra_summary(a2: pd.DataFrame, hardening: pd.DataFrame, resolution: pd.DataFrame) -> dict:
    """The summary entries of the second arms (A2 verdict per B2), label hardening and top-up
    resolution (JSON-ready records)."""
    out: dict = {}
    if len(a2):
        out["a2"] = {str(b): a2_verdict(g) for b, g in a2.groupby("budget_2")}
    out["label_hardening"] = hardening.to_dict(orient="records")
    out["topup_resolution"] = resolution.to_dict(orient="records")
    return out

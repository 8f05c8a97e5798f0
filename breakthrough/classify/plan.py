"""The plan of next work, as pure functions on panels (no I/O): what `bt continue` runs after
the grid anchors, and what `bt classify` writes to plan.json.

Reference protocol sections 3.1 (two rounds of bisection of the first stable crossing), 4
(restart budgets: instant cells get only the scratch budget), 3.5 (4 → 8 top-ups: A1 terminal
replication and A5.1 ambiguity enlargement) and, beyond the study, the posterior top-up rule
of `breakthrough.classify.posterior`.

The `--topup` words that choose the top-up rules (terminal, ambiguous, posterior, none) are
defined in `breakthrough.classify.topup`.

The rules read panels by cell (`panels.rows_by_cell`), so `plan_rows` needs no pandas: `bt
status` plans from rows it reads from the store (`panels.probe_rows`), `bt classify` and the
scheduler from their panel frames (`plan_next`), through the same function.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from breakthrough.classify.panels import PanelRow, rows_by_cell
from breakthrough.classify.pooling import enlarges
from breakthrough.classify.regimes import (
    budget_fit_time,
    canonical_rates,
    is_instant,
    terminal_candidate,
)
from breakthrough.classify.topup import TOPUP_DEFAULT, TOPUP_RULES, topup_rules
from breakthrough.protocol import DEFAULT, Protocol

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class PlanItem:
    """One unit of work for the scheduler, in samples_frame terms.

    kind "probe": continue the base trace from `anchor` with budget B (`budget`);
    kind "restart": a fresh attempt with reasoning budget C (`budget`), `anchor` = -1.
    `branches` are the branch indices to run (the scheduler skips any already stored);
    `reason` says which rule asked for it: "bisection", "terminal_a1", "ambiguity" (A5.1),
    "posterior" (--topup posterior), joined by "+" when two rules ask for the same cell."""

    cell_id: str
    kind: str
    anchor: int
    budget: int
    branches: range
    reason: str

    def to_dict(self) -> dict:
        return {
            "cell_id": self.cell_id,
            "kind": self.kind,
            "anchor": self.anchor,
            "budget": self.budget,
            "branches": [self.branches.start, self.branches.stop],
            "reason": self.reason,
        }


def bisection_midpoint(
    probe_rows: Sequence[PanelRow], tau: float, protocol: Protocol = DEFAULT
) -> int | None:
    """The next refinement anchor of a trajectory (3.1), or None when refinement is over:
    needs an event, fewer than `refinement_rounds` off-grid anchors probed, no top-up yet
    (A5.1 re-derives without new bisection), a midpoint > 0 not yet probed and a width above
    `refinement_min_width`."""
    if not probe_rows:
        return None
    anchors = [r[0] for r in probe_rows]
    if any(n > nc for _, n, _, nc, _ in probe_rows):
        return None
    rounds_done = sum(a not in protocol.anchors for a in anchors)
    if rounds_done >= protocol.refinement_rounds:
        return None
    tf = budget_fit_time(anchors, [k / n for _, n, k, _, _ in probe_rows], tau)
    lower, upper = tf.interval_lower, tf.interval_upper
    if not tf.event_observed or lower is None or upper is None:  # (both set on an event)
        return None
    mid = (lower + upper) // 2
    if mid <= 0 or mid in anchors or upper - lower <= protocol.refinement_min_width:
        return None
    return mid


def restart_budgets_for(instant: bool, protocol: Protocol = DEFAULT) -> tuple[int, ...]:
    """Restart budgets a cell gets (4): instant cells only the scratch budget (C = 1,024 = B,
    `Protocol.scratch_budget`), others the full grid."""
    return (protocol.scratch_budget,) if instant else tuple(protocol.restart_budgets)


def restart_budgets_of(
    probe_rows: Sequence[PanelRow], tau: float, protocol: Protocol = DEFAULT
) -> tuple[int, ...]:
    """Restart budgets of a trajectory (4), from its canonical probe summaries as the study
    decided them: a cell instant on the canonical rates gets only the scratch budget. A later
    top-up that pools an anchor does not change the restart panel a cell is owed."""
    canon = canonical_rates(probe_rows)
    tf = budget_fit_time(list(canon), list(canon.values()), tau)
    return restart_budgets_for(is_instant(tf.event_observed, tf.interval_upper, protocol), protocol)


def plan_rows(
    probes: dict[str, list[PanelRow]],
    restarts: dict[str, list[PanelRow]],
    *,
    protocol: Protocol = DEFAULT,
    tau: float | None = None,
    topup: str | Iterable[str] = TOPUP_DEFAULT,
    band: tuple[float, float] | None = None,
    prior: str | None = None,
) -> list[PlanItem]:
    """What the scheduler must run next, after the grid anchors and restarts are in, from the
    probe and restart panels by cell (`panels.rows_by_cell`, `panels.probe_rows`).

    Per trajectory: while a bisection midpoint is due (3.1) only that midpoint; otherwise the
    top-ups that the `--topup` rules ask for (`classify.topup`): "terminal" replicates the
    final anchor of an A1 candidate (censored on the canonical labels, canonical final rate
    ≥ τ; branches m … 2m−1), "ambiguous" enlarges every probe and restart cell at 1–3 of 4,
    "posterior" every probe and restart cell whose P(rate ≥ τ | canonical counts) lies strictly
    inside `band` (default `protocol.posterior_band`, prior `protocol.prior`); the uncertainty
    test is `pooling.enlarges`, the one that decides which rates count the extra branches.
    Cells already at `topup_samples` are not topped up again. Run the plan, rebuild the
    panels, call again until the plan is empty. Sorted by (cell_id, kind, anchor, budget)."""
    rules = topup_rules(topup)
    tau = protocol.tau if tau is None else tau
    band = protocol.posterior_band if band is None else cast(tuple[float, float], tuple(band))
    prior = protocol.prior if prior is None else prior
    if not 0 <= band[0] < band[1] <= 1:
        raise ValueError(f"posterior band must satisfy 0 <= lo < hi <= 1, got {band}")
    m, target, mr = protocol.samples, protocol.topup_samples, protocol.restart_samples
    reason, uncertain = enlarges(rules, protocol, tau=tau, band=band, prior=prior)
    items: dict[tuple, PlanItem] = {}

    def add(cell, kind, anchor, budget, branches, reason):
        key = (cell, kind, anchor, budget)
        if key in items:
            old = items[key]
            reasons = sorted(set(old.reason.split("+")) | {reason})
            items[key] = PlanItem(cell, kind, anchor, budget, old.branches, "+".join(reasons))
        else:
            items[key] = PlanItem(cell, kind, anchor, budget, branches, reason)

    for cell in sorted(set(probes) | set(restarts)):
        prow = probes.get(cell, [])
        mid = bisection_midpoint(prow, tau, protocol)
        if mid is not None:
            add(cell, "probe", mid, protocol.budget, range(0, m), "bisection")
            continue
        if prow and "terminal" in rules:
            final, n, _, _, _ = max(prow)
            if terminal_candidate(prow, tau) and n < target:
                add(
                    cell, "probe", final, protocol.budget, range(m, target), TOPUP_RULES["terminal"]
                )
        if reason is None:
            continue
        for a, n, _, nc, kc in prow:
            if n < target and uncertain(nc, kc):
                add(cell, "probe", a, protocol.budget, range(m, target), reason)
        for c, n, _, nc, kc in restarts.get(cell, []):
            if n < target and uncertain(nc, kc):
                add(cell, "restart", -1, c, range(mr, target), reason)
    return [items[k] for k in sorted(items)]


def plan_next(
    probe_panel: pd.DataFrame,
    restart_panel: pd.DataFrame,
    *,
    protocol: Protocol = DEFAULT,
    tau: float | None = None,
    topup: str | Iterable[str] = TOPUP_DEFAULT,
    band: tuple[float, float] | None = None,
    prior: str | None = None,
) -> list[PlanItem]:
    """`plan_rows` of a probe and a restart panel frame (`panels.probe_panel`,
    `panels.restart_panel`)."""
    return plan_rows(
        rows_by_cell(probe_panel, "anchor"),
        rows_by_cell(restart_panel, "budget"),
        protocol=protocol,
        tau=tau,
        topup=topup,
        band=band,
        prior=prior,
    )


def plan_counts(plan: Sequence[PlanItem]) -> dict:
    """Size of a plan: items, probe and restart items, samples, items per reason."""
    by_reason: dict[str, int] = {}
    for it in plan:
        by_reason[it.reason] = by_reason.get(it.reason, 0) + 1
    return {
        "items": len(plan),
        "probe": sum(it.kind == "probe" for it in plan),
        "restart": sum(it.kind == "restart" for it in plan),
        "samples": sum(len(it.branches) for it in plan),
        "by_reason": by_reason,
    }

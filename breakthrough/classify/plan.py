"""The plan of next work, as pure functions on panels (no I/O): what `bt continue` runs after
the grid anchors, and what `bt classify` writes to plan.json.

Reference protocol sections 3.1 (two rounds of bisection of the first stable crossing), 4
(restart budgets: instant cells get only the scratch budget), 3.5 (4 → 8 top-ups: A1 terminal
replication and A5.1 ambiguity enlargement) and, beyond the study, the posterior top-up rule
of `breakthrough.classify.posterior`.

The `--topup` words that choose the top-up rules (terminal, ambiguous, posterior, none) are
defined in `breakthrough.classify.topup`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import pandas as pd

from breakthrough.classify.panels import PanelRow, rows_by_cell
from breakthrough.classify.posterior import prob_rate_at_least
from breakthrough.classify.regimes import budget_fit_time, terminal_candidate
from breakthrough.classify.topup import TOPUP_DEFAULT, TOPUP_RULES, topup_rules
from breakthrough.protocol import DEFAULT, Protocol


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
        return {"cell_id": self.cell_id, "kind": self.kind, "anchor": self.anchor,
                "budget": self.budget, "branches": [self.branches.start, self.branches.stop],
                "reason": self.reason}


def bisection_midpoint(probe_rows: Sequence[PanelRow], tau: float,
                       protocol: Protocol = DEFAULT) -> int | None:
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
    if not tf.event_observed:
        return None
    lower, upper = tf.interval_lower, tf.interval_upper
    mid = (lower + upper) // 2
    if mid <= 0 or mid in anchors or upper - lower <= protocol.refinement_min_width:
        return None
    return mid


def restart_budgets_for(instant: bool, protocol: Protocol = DEFAULT) -> tuple[int, ...]:
    """Restart budgets a cell gets (4): instant cells only the scratch budget (C = 1,024 = B,
    `Protocol.scratch_budget`), others the full grid."""
    return (protocol.scratch_budget,) if instant else tuple(protocol.restart_budgets)


def _ambiguous(n: int, nc: int, kc: int, target: int) -> bool:
    """A5.1: not yet enlarged, and the canonical attempts are neither all right nor all wrong."""
    return n < target and nc > 0 and 0 < kc < nc


def _uncertain_rule(rules: tuple[str, ...], protocol: Protocol, tau: float,
                    band: tuple[float, float], prior: str
                    ) -> tuple[str, Callable[[int, int, int, int], bool]] | None:
    """(reason, test on (n, k, n_canon, k_canon)) of the rule that enlarges uncertain cells."""
    target = protocol.topup_samples
    if "posterior" in rules:
        lo, hi = band

        def posterior(n: int, k: int, nc: int, kc: int) -> bool:
            return n < target and lo < float(prob_rate_at_least(n, k, tau, prior)) < hi

        return TOPUP_RULES["posterior"], posterior
    if "ambiguous" in rules:
        return TOPUP_RULES["ambiguous"], lambda n, k, nc, kc: _ambiguous(n, nc, kc, target)
    return None


def plan_next(probe_panel: pd.DataFrame, restart_panel: pd.DataFrame, *,
              protocol: Protocol = DEFAULT, tau: float | None = None,
              topup: str | Iterable[str] = TOPUP_DEFAULT,
              band: tuple[float, float] | None = None, prior: str | None = None
              ) -> list[PlanItem]:
    """What the scheduler must run next, after the grid anchors and restarts are in.

    Per trajectory: while a bisection midpoint is due (3.1) only that midpoint; otherwise the
    top-ups that the `--topup` rules ask for (`classify.topup`): "terminal" replicates
    a censored trajectory's final anchor (branches m … 2m−1), "ambiguous" enlarges every probe
    and restart cell at 1–3 of 4, "posterior" every probe and restart cell whose P(rate ≥ τ)
    lies strictly inside `band` (default `protocol.posterior_band`, prior `protocol.prior`).
    Cells already at `topup_samples` are not topped up again. Run the plan, rebuild the
    panels, call again until the plan is empty. Sorted by (cell_id, kind, anchor, budget)."""
    rules = topup_rules(topup)
    tau = protocol.tau if tau is None else tau
    band = protocol.posterior_band if band is None else tuple(band)
    prior = protocol.prior if prior is None else prior
    if not 0 <= band[0] < band[1] <= 1:
        raise ValueError(f"posterior band must satisfy 0 <= lo < hi <= 1, got {band}")
    probes = rows_by_cell(probe_panel, "anchor")
    restarts = rows_by_cell(restart_panel, "budget")
    m, target, mr = protocol.samples, protocol.topup_samples, protocol.restart_samples
    uncertain = _uncertain_rule(rules, protocol, tau, band, prior)
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
            tf = budget_fit_time([r[0] for r in prow], [k / n for _, n, k, _, _ in prow], tau)
            final, n, _, _, _ = max(prow)
            if not tf.event_observed and terminal_candidate(prow, tau) and n < target:
                add(cell, "probe", final, protocol.budget, range(m, target),
                    TOPUP_RULES["terminal"])
        if uncertain is None:
            continue
        reason, wanted = uncertain
        for a, n, k, nc, kc in prow:
            if wanted(n, k, nc, kc):
                add(cell, "probe", a, protocol.budget, range(m, target), reason)
        for c, n, k, nc, kc in restarts.get(cell, []):
            if wanted(n, k, nc, kc):
                add(cell, "restart", -1, c, range(mr, target), reason)
    return [items[k] for k in sorted(items)]


def plan_counts(plan: Sequence[PlanItem]) -> dict:
    """Size of a plan: items, probe and restart items, samples, items per reason."""
    by_reason: dict[str, int] = {}
    for it in plan:
        by_reason[it.reason] = by_reason.get(it.reason, 0) + 1
    return {"items": len(plan), "probe": sum(it.kind == "probe" for it in plan),
            "restart": sum(it.kind == "restart" for it in plan),
            "samples": sum(len(it.branches) for it in plan), "by_reason": by_reason}

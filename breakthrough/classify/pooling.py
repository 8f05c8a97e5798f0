"""Which branches of a probe or restart cell its rate counts (protocol 3.5, 5.2).

A cell holds its canonical branches 0 … m−1 and, after a top-up, branches m … 2m−1. The study
pooled the extra branches only where its uncertainty rule enlarged the cell (A5.1: cells at
1–3 of 4 become k/8; cells at 0/4 or 4/4 "stay at 4"), and never pooled the A1 terminal
replication of a final anchor into p̂ (A1 is "annotated only"). So a cell's rate is the pooled
k/n exactly when the uncertainty rule in force (`--topup ambiguous` or `posterior`) enlarges
that cell judged on its canonical counts, and the canonical k_canon/n_canon otherwise; with
neither rule (`--topup terminal` or `none`) every rate is canonical, which is how the study
labelled its development and supplement cohorts. Branches added by A1 alone, or by a rule not
in force now, are kept for the A1 annotation and the plan but never move p̂ or R.

`enlarges` is also the test that `breakthrough.classify.plan` asks before topping a cell up,
so the cells that are enlarged and the cells whose rates are pooled are one set.
"""

from __future__ import annotations

from typing import Callable, Iterable

from breakthrough.classify.beta import prob_rate_at_least
from breakthrough.classify.panels import PanelRow
from breakthrough.classify.topup import TOPUP_RULES, topup_rules
from breakthrough.protocol import Protocol

# (n_canon, k_canon) → does the uncertainty rule in force enlarge this cell?
Enlarges = Callable[[int, int], bool]


def _never(nc: int, kc: int) -> bool:
    return False


def enlarges(rules: str | Iterable[str], protocol: Protocol, *, tau: float | None = None,
             band: tuple[float, float] | None = None, prior: str | None = None
             ) -> tuple[str | None, Enlarges]:
    """(plan reason, test) of the uncertainty rule among the `--topup` rules: "ambiguity"
    (A5.1: 0 < k_canon < n_canon), "posterior" (lo < P(rate ≥ τ | k_canon of n_canon) < hi
    under the protocol's prior and band unless given), or (None, never) without either rule."""
    words = topup_rules(rules)
    tau = protocol.tau if tau is None else tau
    if "posterior" in words:
        lo, hi = protocol.posterior_band if band is None else band
        prior = protocol.prior if prior is None else prior

        def posterior(nc: int, kc: int) -> bool:
            return nc > 0 and lo < float(prob_rate_at_least(nc, kc, tau, prior)) < hi

        return TOPUP_RULES["posterior"], posterior
    if "ambiguous" in words:
        return TOPUP_RULES["ambiguous"], lambda nc, kc: 0 < kc < nc
    return None, _never


def counted(row: PanelRow, pooled: Enlarges) -> tuple[int, int]:
    """(n, k) that a cell's rate counts: all graded branches when `pooled(n_canon, k_canon)`
    (or when no canonical branch is graded), else the canonical ones."""
    _, n, k, nc, kc = row
    if nc <= 0 or pooled(nc, kc):
        return n, k
    return nc, kc

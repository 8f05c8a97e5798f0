"""Which branches of a probe or restart cell its rate counts (protocol 3.5, 4, 5.2).

A cell holds its canonical branches 0 … m−1 and, after a top-up, branches m … 2m−1.

Probe cells. The study pooled the extra branches only where its uncertainty rule enlarged the
cell (A5.1: cells at 1–3 of 4 become k/8; cells at 0/4 or 4/4 "stay at 4"), and never pooled
the A1 terminal replication of a final anchor into p̂ (A1 is "annotated only"). So a probe
cell's rate is the pooled k/n exactly when the uncertainty rule in force (`--topup ambiguous`
or `posterior`) enlarges that cell judged on its canonical counts, and the canonical
k_canon/n_canon otherwise; with neither rule (`--topup terminal` or `none`) every probe rate
is canonical, which is how the study labelled its development and supplement cohorts.
Branches added by A1 alone, or by a rule not in force now, are kept for the A1 annotation and
the plan but never move p̂.

Restart cells. R counts every graded attempt of a restart cell, under every rule
(`counted_restart`). The study's development and supplement labels read a pooled restart
panel that holds its one enlarged cell whole: Gemma × math_03190 at 8 attempts per budget
(3/8, 6/8, 2/8, 4/8; protocol 4), including C = 4,096 at 0/4 in its first four. Wave 3 never
enlarged a restart cell (its panel has 4 attempts everywhere), so counting whole changes none
of its labels; a restart cell bt enlarges under `ambiguous` or `posterior` is pooled as
before. Cells holding extra attempts at 0/m or m/m in their first m, which no study rule
enlarged, are counted whole too, and `bt classify` says how many (`whole_beyond_rule`).

`enlarges` is also the test that `breakthrough.classify.plan` asks before topping a cell up,
so the probe cells that are enlarged and the probe cells whose rates are pooled are one set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from breakthrough.classify.beta import prob_rate_at_least
from breakthrough.classify.panels import PanelRow
from breakthrough.classify.topup import TOPUP_RULES, topup_rules
from breakthrough.protocol import Protocol

# (n_canon, k_canon) → does the uncertainty rule in force enlarge this cell?
Enlarges = Callable[[int, int], bool]


def _never(nc: int, kc: int) -> bool:
    return False


def enlarges(
    rules: str | Iterable[str],
    protocol: Protocol,
    *,
    tau: float | None = None,
    band: tuple[float, float] | None = None,
    prior: str | None = None,
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


def counted_restart(row: PanelRow) -> tuple[int, int]:
    """(n, k) that a restart cell's R counts: every graded attempt (module doc; protocol 4's
    pooled development/supplement panel)."""
    _, n, k, _, _ = row
    return n, k


def whole_beyond_rule(restart_rows: Iterable[PanelRow], pooled: Enlarges) -> int:
    """How many restart cells hold attempts beyond their canonical ones at 0/m or m/m in those
    (no study rule enlarges such a cell; the rule in force, `pooled`, does not either), whose
    R therefore counts attempts that only the protocol's pooled panel rule admits."""
    return sum(
        1 for _, n, _, nc, kc in restart_rows if n > nc > 0 and kc in (0, nc) and not pooled(nc, kc)
    )

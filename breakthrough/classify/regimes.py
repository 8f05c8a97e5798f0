"""Where a regime is decided: the labels of one cell, as pure functions on panels (no I/O).

Reference protocol sections 4.1 (R̂ interpolation), 5.1 (budget-fit time T_F), 5.2 (advantage
and prefix-value time T_V(δ)) and 5.3 (regime precedence). The plan of next work (3.1
bisection, 3.5 top-ups) is in `breakthrough.classify.plan`; the Beta posteriors in
`breakthrough.classify.posterior`; the run summary in `breakthrough.classify.summary`.

Inputs are the panels of `breakthrough.classify.panels` (one row per probe cell (cell_id,
anchor) and per restart cell (cell_id, budget), with pooled counts n, k and canonical-branch
counts n_canon, k_canon). `cell_counts` turns one cell's rows into what its labels read:
  * p̂ counts the pooled branches only where the `--topup` uncertainty rule in force
    enlarges the probe cell (`breakthrough.classify.pooling`: A5.1 pools cells at 1–3 of 4,
    keeps 0/4 and 4/4 at 4), the canonical ones elsewhere; the A1 replication of a final
    anchor is never pooled into p̂ (protocol 3.5: terminal events are annotated only);
  * R counts every graded attempt of a restart cell (protocol 4: the development and
    supplement labels read a pooled restart panel, Gemma × math_03190 at 8 attempts);
  * A1 candidacy is decided on the canonical labels, as the reference script
    (`probe_terminal_stability.py`) does: no event on the canonical rates and a canonical
    final-anchor rate ≥ τ;
  * the A1 terminal rate is the pooled rate over the graded branches of the final anchor once
    any replication branch is graded (an ungraded branch is left out of n, as everywhere: with
    7 of 8 graded, k/7 ≥ 0.75 iff k ≥ 6, the study's 6/8).
The rule constants (τ, δ, B, the instant bound of 16 tokens, the scratch budget B and the
budget-limited budget 4B) come from the run's `breakthrough.protocol.Protocol`.

Comparisons with τ and δ are inclusive (≥) and tolerate 1e-9 of floating-point noise, so a rate
of exactly 3/4 crosses τ = 0.75 and an advantage of exactly δ counts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from breakthrough.classify.panels import PanelRow, rows_by_cell
from breakthrough.classify.pooling import Enlarges, counted, counted_restart, enlarges
from breakthrough.classify.topup import TOPUP_DEFAULT
from breakthrough.protocol import DEFAULT, Protocol

if TYPE_CHECKING:
    import pandas as pd

EPS = 1e-9

# The fine labels of 5.3 in precedence order: the `regime` column of every table.
REGIMES = (
    "instant_scratch_solvable",
    "instant_prefix_advantaged",
    "instant_ambiguous",
    "budget_limited",
    "prefix_limited",
    "no_crossing_at_primary_delta",
    "terminal_A1",
    "unsolved_scratch_solvable",
    "unsolved_hard",
)
UNSOLVED = frozenset({"unsolved_scratch_solvable", "unsolved_hard"})

# Collapsed classes (5.3), the one place that names them. Tables keep the fine label (`regime`)
# and add its figure class (`regime_class`); figures, the HTML report and the README use the
# six figure classes, in the precedence order of 5.3. The "agreement" scheme is what
# cross-model agreement compares (no-crossing and terminal count as "other").
FIGURE_CLASS = {
    "instant_scratch_solvable": "instant",
    "instant_prefix_advantaged": "instant",
    "instant_ambiguous": "instant",
    "budget_limited": "budget-limited",
    "prefix_limited": "prefix-limited",
    "no_crossing_at_primary_delta": "no-crossing",
    "terminal_A1": "terminal",
    "unsolved_scratch_solvable": "unsolved",
    "unsolved_hard": "unsolved",
}
FIGURE_CLASSES = (
    "instant",
    "budget-limited",
    "prefix-limited",
    "no-crossing",
    "terminal",
    "unsolved",
)
AGREEMENT_CLASS = FIGURE_CLASS | {"no_crossing_at_primary_delta": "other", "terminal_A1": "other"}
COLLAPSE_SCHEMES = {"figure": FIGURE_CLASS, "agreement": AGREEMENT_CLASS}


def collapse_regime(regime: str, scheme: str = "figure") -> str:
    """Collapsed class of a regime: scheme "figure" (tables, regime map, README) or
    "agreement" (cross-model agreement)."""
    return COLLAPSE_SCHEMES[scheme][regime]


def _ge(value: float | None, threshold: float) -> bool:
    return (
        value is not None
        and not (isinstance(value, float) and math.isnan(value))
        and value >= threshold - EPS
    )


def delta_key(delta: float) -> str:
    """Column suffix of a δ: 0.25 → "d025", 0.5 → "d050", 0.75 → "d075"."""
    return f"d{int(round(delta * 100)):03d}"


# ---------------------------------------------------------------------------------------------
# 5.1 budget-fit time


@dataclass(frozen=True)
class BudgetFit:
    """T_F(B) as an interval-censored label (protocol 5.1)."""

    event_observed: bool
    interval_lower: int | None  # previous probed anchor (0 if first); final anchor if censored
    interval_upper: int | None  # the crossing anchor a_j; None if censored
    stable_anchor: int | None  # = event time proxy = T_F; None if censored
    stability_anchor: int | None  # next probed anchor a_{j+1}; None if censored
    censoring_time: int | None  # a_{j+1} for an event, the final anchor if censored


def _sorted_pairs(anchors: Sequence[int], values: Sequence) -> list[tuple]:
    anchors = [int(a) for a in anchors]
    if len(set(anchors)) != len(anchors):
        raise ValueError("probed anchors must be unique")
    return sorted(zip(anchors, values, strict=True), key=lambda r: r[0])


def budget_fit_time(anchors: Sequence[int], rates: Sequence[float], tau: float) -> BudgetFit:
    """First probed anchor with p ≥ τ whose next probed anchor is also ≥ τ (5.1)."""
    if not 0 < tau <= 1:
        raise ValueError(f"tau must be in (0, 1], got {tau}")
    pairs = _sorted_pairs(anchors, rates)
    for j in range(len(pairs) - 1):
        if _ge(pairs[j][1], tau) and _ge(pairs[j + 1][1], tau):
            lower = pairs[j - 1][0] if j > 0 else 0
            a_j, a_next = pairs[j][0], pairs[j + 1][0]
            return BudgetFit(True, lower, a_j, a_j, a_next, a_next)
    final = pairs[-1][0] if pairs else None
    return BudgetFit(False, final, None, None, None, final)


# ---------------------------------------------------------------------------------------------
# 4.1 restart interpolation


def r_hat(restart: Mapping[int, float], x: float, conservative: bool = False) -> float:
    """R̂(x): linear in log2 between the bracketing measured budgets, clamped at both ends.

    The conservative variant takes max(R(lo), R(hi)) of the bracketing pair. As in the
    reference script, the bracket is the first grid pair with lo ≤ x ≤ hi, so an interior x
    that equals a measured budget is bracketed by (previous budget, x). NaN if no budget was
    measured."""
    if not restart:
        return math.nan
    grid = sorted(restart)
    if x <= grid[0]:
        return float(restart[grid[0]])
    if x >= grid[-1]:
        return float(restart[grid[-1]])
    for lo, hi in pairwise(grid):
        if lo <= x <= hi:
            if conservative:
                return float(max(restart[lo], restart[hi]))
            frac = (math.log2(x) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
            return float(restart[lo] + frac * (restart[hi] - restart[lo]))
    raise AssertionError(x)  # unreachable: grid is sorted and x is inside it


def r_hat_position(restart: Mapping[int, float], x: float) -> str:
    """Where x lies relative to the measured budgets: "below" (clamped to the smallest),
    "inside" (interpolated or exactly measured) or "above" (clamped to the largest: a proxy,
    e.g. R(8,192) standing in for the unmeasured R(t + B) when t > 7,168); "none" if empty."""
    if not restart:
        return "none"
    grid = sorted(restart)
    if x < grid[0]:
        return "below"
    if x > grid[-1]:
        return "above"
    return "inside"


# ---------------------------------------------------------------------------------------------
# 5.2 advantage and prefix-value time


def advantages(
    probe: Mapping[int, float],
    restart: Mapping[int, float],
    budget: int,
    conservative: bool = False,
) -> dict[int, float]:
    """adv(t) = p(t; B) − R̂(t + B) for every probed anchor t."""
    return {int(t): float(p) - r_hat(restart, t + budget, conservative) for t, p in probe.items()}


def prefix_value_time(
    probe: Mapping[int, float], adv: Mapping[int, float], tau: float, delta: float
) -> int | None:
    """T_V(δ): earliest probed anchor with p ≥ τ and adv ≥ δ whose next probed anchor satisfies
    both too (5.2); None if there is none."""
    anchors = sorted(int(t) for t in probe)
    ok = [_ge(probe[t], tau) and _ge(adv.get(t), delta) for t in anchors]
    for k in range(len(anchors) - 1):
        if ok[k] and ok[k + 1]:
            return anchors[k]
    return None


# ---------------------------------------------------------------------------------------------
# 5.3 regime


def is_instant(
    event_observed: bool, interval_upper: int | None, protocol: Protocol = DEFAULT
) -> bool:
    """5.3: a T_F event whose interval upper bound is at most `protocol.instant_max_upper`
    (16) tokens. The regime label and the restart-budget choice (`plan.restart_budgets_for`)
    both ask this one rule."""
    return (
        bool(event_observed)
        and interval_upper is not None
        and interval_upper <= protocol.instant_max_upper
    )


def regime_label(
    *,
    event_observed: bool,
    interval_upper: int | None,
    restart: Mapping[int, float],
    t_v_primary: int | None,
    terminal: bool,
    tau: float,
    protocol: Protocol = DEFAULT,
) -> str:
    """Regime with the exact precedence of protocol 5.3 (reference script order). The rules'
    restart budgets come from the protocol: the instant sub-label reads R(scratch_budget)
    (1,024 = B), the budget-limited rule needs R(budget_limited_at) measured (4,096 = 4B)."""
    scratch, limited_at = protocol.scratch_budget, protocol.budget_limited_at
    instant = is_instant(event_observed, interval_upper, protocol)
    has_4096 = limited_at in restart
    if instant:
        if _ge(restart.get(scratch, 0.0), tau):
            return "instant_scratch_solvable"
        if t_v_primary is not None:
            return "instant_prefix_advantaged"
        return "instant_ambiguous"
    if has_4096 and _ge(r_hat(restart, limited_at), tau):
        return "budget_limited"
    if t_v_primary is not None:
        return "prefix_limited"
    if event_observed:
        return "no_crossing_at_primary_delta"
    if terminal:
        return "terminal_A1"
    if has_4096 and _ge(r_hat(restart, limited_at), tau):  # unreachable, as in 5.3
        return "unsolved_scratch_solvable"
    return "unsolved_hard"


def regime_of(
    probe: Mapping[int, float],
    restart: Mapping[int, float],
    *,
    terminal_rate: float | None,
    tau: float,
    delta: float,
    protocol: Protocol = DEFAULT,
) -> str:
    """Only the regime of a cell from its rates (the fast path used by resampling)."""
    tf = budget_fit_time(list(probe), [probe[t] for t in probe], tau)
    t_v = prefix_value_time(probe, advantages(probe, restart, protocol.budget), tau, delta)
    terminal = bool(probe) and terminal_rate is not None and _ge(terminal_rate, tau)
    return regime_label(
        event_observed=tf.event_observed,
        interval_upper=tf.interval_upper,
        restart=restart,
        t_v_primary=t_v,
        terminal=terminal,
        tau=tau,
        protocol=protocol,
    )


def _none_if_nan(v: float) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def label_from_rates(
    probe: Mapping[int, float],
    restart: Mapping[int, float],
    *,
    terminal_rate: float | None = None,
    protocol: Protocol = DEFAULT,
    tau: float | None = None,
    delta: float | None = None,
) -> dict:
    """Every label of one cell from its rates.

    probe: anchor → p(t; B); restart: C → R(C); terminal_rate: the pooled (replicated) rate at
    the final anchor when A1 replication ran on it (`CellCounts.a1_rate`: a candidate on the
    canonical labels with graded replication branches), else None. An A1 event (terminal rate
    ≥ τ) is annotated whatever the regime; it decides the regime only through rule 5. τ and δ
    default to the protocol's; T_V is reported for every δ of `protocol.deltas` and the
    primary δ. Returns a flat dict (the per-cell table columns)."""
    tau = protocol.tau if tau is None else tau
    delta = protocol.delta if delta is None else delta
    budget = protocol.budget
    deltas = sorted(set(float(d) for d in protocol.deltas) | {float(delta)})
    tf = budget_fit_time(list(probe), [probe[t] for t in probe], tau)
    adv = advantages(probe, restart, budget)
    adv_c = advantages(probe, restart, budget, conservative=True)
    t_v = {d: prefix_value_time(probe, adv, tau, d) for d in deltas}
    t_v_c = {d: prefix_value_time(probe, adv_c, tau, d) for d in deltas}
    anchors = sorted(probe)
    final = anchors[-1] if anchors else None
    terminal = final is not None and terminal_rate is not None and _ge(terminal_rate, tau)
    regime = regime_label(
        event_observed=tf.event_observed,
        interval_upper=tf.interval_upper,
        restart=restart,
        t_v_primary=t_v[float(delta)],
        terminal=terminal,
        tau=tau,
        protocol=protocol,
    )
    finite_adv = [a for a in adv.values() if not math.isnan(a)]
    row: dict[str, Any] = {
        "n_anchors": len(anchors),
        "final_anchor": final,
        "final_rate": float(probe[final]) if final is not None else None,
        "event_observed": tf.event_observed,
        "t_f": tf.stable_anchor,
        "interval_lower": tf.interval_lower,
        "interval_upper": tf.interval_upper,
        "stability_anchor": tf.stability_anchor,
        "censoring_time": tf.censoring_time,
        "instant": regime.startswith("instant_"),
        "regime": regime,
        "regime_class": collapse_regime(regime),
    }
    for c in protocol.restart_budgets:
        row[f"R_{c}"] = float(restart[c]) if c in restart else None
    row["max_advantage"] = round(max(finite_adv), 3) if finite_adv else None
    row["proxy_anchors"] = sum(r_hat_position(restart, t + budget) == "above" for t in anchors)
    for d in deltas:
        row[f"t_v_{delta_key(d)}"] = t_v[d]
    for d in deltas:
        row[f"t_v_cons_{delta_key(d)}"] = t_v_c[d]
    row["t_v"] = t_v[float(delta)]
    row["t_v_cons"] = t_v_c[float(delta)]
    row["conservative_agrees"] = (t_v[float(delta)] is None) == (t_v_c[float(delta)] is None)
    if terminal and final is not None and terminal_rate is not None:  # (what `terminal` says)
        matched = r_hat(restart, final + budget)
        row["terminal_a1_anchor"] = final
        row["terminal_a1_rate"] = float(terminal_rate)
        row["terminal_a1_matched_restart"] = _none_if_nan(matched)
        row["terminal_a1_advantage"] = (
            None if math.isnan(matched) else round(float(terminal_rate) - matched, 3)
        )
        row["terminal_a1_proxy"] = r_hat_position(restart, final + budget) == "above"
    else:
        row.update(
            terminal_a1_anchor=None,
            terminal_a1_rate=None,
            terminal_a1_matched_restart=None,
            terminal_a1_advantage=None,
            terminal_a1_proxy=None,
        )
    return row


# ---------------------------------------------------------------------------------------------
# panels → labels


def canonical_rates(probe_rows: Sequence[PanelRow]) -> dict[int, float]:
    """anchor → k_canon / n_canon: the canonical 4-branch summary of a trajectory (k / n where
    no canonical branch is graded)."""
    return {a: (kc / nc if nc > 0 else k / n) for a, n, k, nc, kc in probe_rows}


def terminal_candidate(probe_rows: Sequence[PanelRow], tau: float) -> bool:
    """A1 candidate (3.5, `probe_terminal_stability.py`), decided on the canonical labels: no
    T_F event on the canonical rates and a canonical final-anchor rate ≥ τ (3/4 or 4/4 at
    τ = 0.75). A top-up that removes (or adds) an event does not change candidacy."""
    if not probe_rows:
        return False
    canon = canonical_rates(probe_rows)
    if budget_fit_time(list(canon), list(canon.values()), tau).event_observed:
        return False
    return _ge(canon[max(canon)], tau)


@dataclass(frozen=True)
class CellCounts:
    """What the labels of one cell read from its panel rows (`cell_counts`)."""

    probe: dict[int, tuple[int, int]]  # anchor → (n, k) that p̂ counts
    restart: dict[int, tuple[int, int]]  # C → (n, k) that R counts
    a1_candidate: bool  # A1 candidate on the canonical labels
    a1: tuple[int, int] | None  # pooled (n, k) at the final anchor once replicated, else None

    def probe_rates(self) -> dict[int, float]:
        return {a: k / n for a, (n, k) in self.probe.items()}

    def restart_rates(self) -> dict[int, float]:
        return {c: k / n for c, (n, k) in self.restart.items()}

    @property
    def a1_rate(self) -> float | None:
        """The A1 terminal rate (pooled successes / graded branches at the final anchor), or
        None when the cell is no candidate or its replication has no graded branch yet."""
        return None if self.a1 is None else self.a1[1] / self.a1[0]


def cell_counts(
    probe_rows: Sequence[PanelRow],
    restart_rows: Sequence[PanelRow],
    *,
    tau: float,
    pooled: Enlarges,
) -> CellCounts:
    """The counts one cell's labels read: each probe cell pooled only where `pooled` (the
    uncertainty rule in force, `pooling.enlarges`) enlarges it, each restart cell whole
    (`pooling.counted_restart`), the A1 candidacy on the canonical labels, and the A1
    replication of the final anchor (annotation only)."""
    candidate = terminal_candidate(probe_rows, tau)
    a1 = None
    if candidate:
        _, n, k, nc, _ = max(probe_rows)
        if n > nc:
            a1 = (n, k)
    return CellCounts(
        probe={r[0]: counted(r, pooled) for r in probe_rows},
        restart={r[0]: counted_restart(r) for r in restart_rows},
        a1_candidate=candidate,
        a1=a1,
    )


def pooling_rule(protocol: Protocol, topup: str | Iterable[str], tau: float) -> Enlarges:
    """The pooling test of the `--topup` rules in force (`pooling.enlarges`) at τ."""
    return enlarges(topup, protocol, tau=tau)[1]


META_COLUMNS = ("model", "stage", "problem_id", "level", "subject", "reasoning_tokens")


def label_panels(
    probe_panel: pd.DataFrame,
    restart_panel: pd.DataFrame,
    cells: pd.DataFrame | None = None,
    *,
    protocol: Protocol = DEFAULT,
    tau: float | None = None,
    delta: float | None = None,
    topup: str | Iterable[str] = TOPUP_DEFAULT,
) -> pd.DataFrame:
    """The per-cell label table: one row per cell (cells frame ∪ cells seen in the panels),
    sorted by cell_id, with the cell's metadata columns (model, stage, problem_id, level,
    subject, reasoning_tokens) when a cells frame is given. `topup` is the `--topup` rules in
    force: their uncertainty rule decides which cells count pooled branches (`cell_counts`).
    Pass the run's protocol (`RunStore.protocol()`): B, the restart budgets and the rule
    constants are read from it."""
    import pandas as pd  # here, not with the module: `bt status` plans from its rules alone

    tau = protocol.tau if tau is None else tau
    delta = protocol.delta if delta is None else delta
    pooled = pooling_rule(protocol, topup, tau)
    probes = rows_by_cell(probe_panel, "anchor")
    restarts = rows_by_cell(restart_panel, "budget")
    meta: dict[str, dict] = {}
    if cells is not None and not cells.empty:
        for rec in cells.to_dict(orient="records"):
            meta[str(rec["cell_id"])] = {c: rec.get(c) for c in META_COLUMNS if c in rec}
    ids = sorted(set(meta) | set(probes) | set(restarts))
    rows = []
    for cell in ids:
        prow = probes.get(cell, [])
        rrow = restarts.get(cell, [])
        row: dict[str, Any] = {"cell_id": cell}
        model, _, pid = cell.partition(":")
        row.update({"model": model, "problem_id": pid or cell})
        row.update({k: v for k, v in meta.get(cell, {}).items() if v is not None})
        counts = cell_counts(prow, rrow, tau=tau, pooled=pooled)
        row.update(
            label_from_rates(
                counts.probe_rates(),
                counts.restart_rates(),
                terminal_rate=counts.a1_rate,
                protocol=protocol,
                tau=tau,
                delta=delta,
            )
        )
        row["terminal_candidate"] = counts.a1_candidate
        row["final_n"] = max(prow)[1] if prow else 0
        rows.append(row)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    for col in (
        "final_anchor",
        "t_f",
        "interval_lower",
        "interval_upper",
        "stability_anchor",
        "censoring_time",
        "terminal_a1_anchor",
        "t_v",
        "t_v_cons",
        "level",
        "reasoning_tokens",
        *[c for c in frame.columns if c.startswith("t_v_")],
    ):
        if col in frame.columns:
            frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("Int64")
    for col in [c for c in frame.columns if c.startswith("R_")] + [
        "final_rate",
        "max_advantage",
        "terminal_a1_rate",
        "terminal_a1_advantage",
        "terminal_a1_matched_restart",
    ]:
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    return frame


def cell_curves(
    probe_panel: pd.DataFrame,
    restart_panel: pd.DataFrame,
    *,
    protocol: Protocol = DEFAULT,
    tau: float | None = None,
    topup: str | Iterable[str] = TOPUP_DEFAULT,
) -> pd.DataFrame:
    """Per (cell, probed anchor): n, k (the branches p̂ counts, as in `label_panels`), p,
    x = t + B, R̂(x), R̂_cons(x), adv, adv_cons and the position of x among the measured
    budgets ("above" = proxy)."""
    import pandas as pd

    tau = protocol.tau if tau is None else tau
    pooled = pooling_rule(protocol, topup, tau)
    probes = rows_by_cell(probe_panel, "anchor")
    restarts = rows_by_cell(restart_panel, "budget")
    rows = []
    for cell in sorted(probes):
        counts = cell_counts(probes[cell], restarts.get(cell, []), tau=tau, pooled=pooled)
        rr = counts.restart_rates()
        for a, (n, k) in sorted(counts.probe.items()):
            x = a + protocol.budget
            rh, rc = r_hat(rr, x), r_hat(rr, x, conservative=True)
            rows.append(
                {
                    "cell_id": cell,
                    "anchor": a,
                    "n": n,
                    "k": k,
                    "p": k / n,
                    "x": x,
                    "r_hat": rh,
                    "r_hat_cons": rc,
                    "adv": k / n - rh,
                    "adv_cons": k / n - rc,
                    "position": r_hat_position(rr, x),
                    "proxy": r_hat_position(rr, x) == "above",
                }
            )
    cols = [
        "cell_id",
        "anchor",
        "n",
        "k",
        "p",
        "x",
        "r_hat",
        "r_hat_cons",
        "adv",
        "adv_cons",
        "position",
        "proxy",
    ]
    return pd.DataFrame(rows, columns=cols)

"""Labels and the plan of next work, as pure functions on panels (no I/O).

Reference protocol sections 3.1 (bisection), 3.5 (4 → 8 top-up: A1 terminal replication and
A5.1 ambiguity enlargement), 4.1 (R̂ interpolation), 5.1 (budget-fit time T_F), 5.2 (advantage
and prefix-value time T_V(δ)) and 5.3 (regime precedence).

Inputs are the panels of `breakthrough.classify.panels` (one row per probe cell (cell_id, anchor) and per
restart cell (cell_id, budget), with pooled counts n, k and canonical-branch counts n_canon,
k_canon). Labels use the pooled rates k/n (A5.1: pooled counts replace the 4-attempt counts);
the A1 candidate rule looks at the canonical counts of the final anchor.

Comparisons with τ and δ are inclusive (≥) and tolerate 1e-9 of floating-point noise, so a rate
of exactly 3/4 crosses τ = 0.75 and an advantage of exactly δ counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import pandas as pd

from breakthrough.protocol import DEFAULT, Protocol

EPS = 1e-9
INSTANT_MAX_UPPER = 16  # 5.3: "instant" = T_F event with interval upper bound ≤ 16 tokens
SCRATCH_BUDGET = 1024  # 5.3: instant sub-label looks at R(1,024) (= R(B))
BUDGET_LIMITED_AT = 4096  # 5.3: budget-limited iff the panel has C = 4,096 (= 4B) and R ≥ τ


def scratch_budget(protocol: Protocol = DEFAULT) -> int:
    """The restart budget of the instant sub-label and of instant cells' only restart: 1,024 in
    the study, which is B; a protocol with another B (e.g. a small demo) uses B when it is a
    restart budget, else the smallest restart budget."""
    if protocol.budget in protocol.restart_budgets:
        return int(protocol.budget)
    return int(min(protocol.restart_budgets))


def budget_limited_at(protocol: Protocol = DEFAULT) -> int:
    """The restart budget of the budget-limited rule: 4,096 = 4B in the study."""
    return int(4 * protocol.budget)

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

# Collapsed classes (5.3): "figure" for the regime map, "agreement" for cross-model agreement.
_FIGURE_CLASS = {
    "instant_scratch_solvable": "instant",
    "instant_prefix_advantaged": "instant",
    "instant_ambiguous": "instant",
    "budget_limited": "budget-limited",
    "prefix_limited": "prefix-limited",
    "no_crossing_at_primary_delta": "no-crossing",
    "terminal_A1": "terminal-A1",
    "unsolved_scratch_solvable": "unsolved",
    "unsolved_hard": "unsolved",
}
_AGREEMENT_CLASS = {
    "instant_scratch_solvable": "instant",
    "instant_prefix_advantaged": "instant",
    "instant_ambiguous": "instant",
    "budget_limited": "budget_limited",
    "prefix_limited": "prefix_limited",
    "no_crossing_at_primary_delta": "other",
    "terminal_A1": "other",
    "unsolved_scratch_solvable": "unsolved",
    "unsolved_hard": "unsolved",
}
FIGURE_CLASSES = ("instant", "budget-limited", "prefix-limited", "terminal-A1", "no-crossing",
                  "unsolved")


def collapse_regime(regime: str, scheme: str = "figure") -> str:
    """Collapsed class of a regime: scheme "figure" (regime map) or "agreement"."""
    table = _FIGURE_CLASS if scheme == "figure" else _AGREEMENT_CLASS
    return table[regime]


def _ge(value: float | None, threshold: float) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value)) \
        and value >= threshold - EPS


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
    return sorted(zip(anchors, values), key=lambda r: r[0])


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
    for lo, hi in zip(grid, grid[1:]):
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


def advantages(probe: Mapping[int, float], restart: Mapping[int, float], budget: int,
               conservative: bool = False) -> dict[int, float]:
    """adv(t) = p(t; B) − R̂(t + B) for every probed anchor t."""
    return {int(t): float(p) - r_hat(restart, t + budget, conservative) for t, p in probe.items()}


def prefix_value_time(probe: Mapping[int, float], adv: Mapping[int, float], tau: float,
                      delta: float) -> int | None:
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


def is_instant(event_observed: bool, interval_upper: int | None) -> bool:
    """5.3: a T_F event whose interval upper bound is at most 16 tokens."""
    return bool(event_observed) and interval_upper is not None and interval_upper <= INSTANT_MAX_UPPER


def regime_label(*, event_observed: bool, interval_upper: int | None,
                 restart: Mapping[int, float], t_v_primary: int | None, terminal: bool,
                 tau: float, scratch: int = SCRATCH_BUDGET,
                 limited_at: int = BUDGET_LIMITED_AT) -> str:
    """Regime with the exact precedence of protocol 5.3 (reference script order); `scratch`
    and `limited_at` are the restart budgets 1,024 and 4,096 of the rules."""
    instant = is_instant(event_observed, interval_upper)
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


def regime_of(probe: Mapping[int, float], restart: Mapping[int, float], *,
              terminal_rate: float | None, tau: float, delta: float, budget: int,
              scratch: int = SCRATCH_BUDGET, limited_at: int = BUDGET_LIMITED_AT) -> str:
    """Only the regime of a cell from its rates (the fast path used by resampling)."""
    tf = budget_fit_time(list(probe), [probe[t] for t in probe], tau)
    t_v = prefix_value_time(probe, advantages(probe, restart, budget), tau, delta)
    terminal = (not tf.event_observed) and bool(probe) and terminal_rate is not None \
        and _ge(terminal_rate, tau)
    return regime_label(event_observed=tf.event_observed, interval_upper=tf.interval_upper,
                        restart=restart, t_v_primary=t_v, terminal=terminal, tau=tau,
                        scratch=scratch, limited_at=limited_at)


def _none_if_nan(v: float) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def label_from_rates(probe: Mapping[int, float], restart: Mapping[int, float], *,
                     terminal_rate: float | None = None, tau: float, delta: float,
                     deltas: Iterable[float], budget: int,
                     restart_budgets: Iterable[int] = DEFAULT.restart_budgets,
                     scratch: int = SCRATCH_BUDGET, limited_at: int = BUDGET_LIMITED_AT) -> dict:
    """Every label of one cell from its rates.

    probe: anchor → p(t; B); restart: C → R(C); terminal_rate: the pooled (replicated) rate at
    the final anchor when A1 replication ran on it (candidate and ≥ topup_samples branches),
    else None. Returns a flat dict (the per-cell table columns)."""
    deltas = sorted(set(float(d) for d in deltas) | {float(delta)})
    tf = budget_fit_time(list(probe), [probe[t] for t in probe], tau)
    adv = advantages(probe, restart, budget)
    adv_c = advantages(probe, restart, budget, conservative=True)
    t_v = {d: prefix_value_time(probe, adv, tau, d) for d in deltas}
    t_v_c = {d: prefix_value_time(probe, adv_c, tau, d) for d in deltas}
    anchors = sorted(probe)
    final = anchors[-1] if anchors else None
    terminal = (not tf.event_observed) and final is not None and terminal_rate is not None \
        and _ge(terminal_rate, tau)
    regime = regime_label(event_observed=tf.event_observed, interval_upper=tf.interval_upper,
                          restart=restart, t_v_primary=t_v[float(delta)], terminal=terminal,
                          tau=tau, scratch=scratch, limited_at=limited_at)
    finite_adv = [a for a in adv.values() if not math.isnan(a)]
    row = {
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
    for c in restart_budgets:
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
    if terminal:
        matched = r_hat(restart, final + budget)
        row["terminal_a1_anchor"] = final
        row["terminal_a1_rate"] = float(terminal_rate)
        row["terminal_a1_matched_restart"] = _none_if_nan(matched)
        row["terminal_a1_advantage"] = (None if math.isnan(matched)
                                        else round(float(terminal_rate) - matched, 3))
        row["terminal_a1_proxy"] = r_hat_position(restart, final + budget) == "above"
    else:
        row.update(terminal_a1_anchor=None, terminal_a1_rate=None,
                   terminal_a1_matched_restart=None, terminal_a1_advantage=None,
                   terminal_a1_proxy=None)
    return row


# ---------------------------------------------------------------------------------------------
# panels → labels


def _by_cell(panel: pd.DataFrame | None, key: str) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    if panel is None or panel.empty:
        return out
    cols = ["cell_id", key, "n", "k", "n_canon", "k_canon"]
    for cell, point, n, k, nc, kc in panel[cols].itertuples(index=False):
        if int(n) > 0:
            out.setdefault(str(cell), []).append((int(point), int(n), int(k), int(nc), int(kc)))
    for rows in out.values():
        rows.sort()
    return out


def terminal_candidate(probe_rows: Sequence[tuple], tau: float) -> bool:
    """A1 candidate test on the final anchor's canonical counts (3/4 or 4/4 at τ = 0.75); the
    caller checks that the trajectory has no event."""
    if not probe_rows:
        return False
    _, n, k, nc, kc = max(probe_rows)
    if nc > 0:
        return _ge(kc / nc, tau)
    return _ge(k / n, tau)


def _terminal_rate(probe_rows: Sequence[tuple], tau: float, protocol: Protocol) -> float | None:
    if not terminal_candidate(probe_rows, tau):
        return None
    _, n, k, _, _ = max(probe_rows)
    return k / n if n >= protocol.topup_samples else None


META_COLUMNS = ("model", "stage", "problem_id", "level", "subject", "reasoning_tokens")


def label_panels(probe_panel: pd.DataFrame, restart_panel: pd.DataFrame,
                 cells: pd.DataFrame | None = None, *, protocol: Protocol = DEFAULT,
                 tau: float | None = None, delta: float | None = None) -> pd.DataFrame:
    """The per-cell label table: one row per cell (cells frame ∪ cells seen in the panels),
    sorted by cell_id, with the cell's metadata columns (model, stage, problem_id, level,
    subject, reasoning_tokens) when a cells frame is given."""
    tau = protocol.tau if tau is None else tau
    delta = protocol.delta if delta is None else delta
    probes = _by_cell(probe_panel, "anchor")
    restarts = _by_cell(restart_panel, "budget")
    meta: dict[str, dict] = {}
    if cells is not None and not cells.empty:
        for rec in cells.to_dict(orient="records"):
            meta[str(rec["cell_id"])] = {c: rec.get(c) for c in META_COLUMNS if c in rec}
    ids = sorted(set(meta) | set(probes) | set(restarts))
    rows = []
    for cell in ids:
        prow = probes.get(cell, [])
        rrow = restarts.get(cell, [])
        row = {"cell_id": cell}
        model, _, pid = cell.partition(":")
        row.update({"model": model, "problem_id": pid or cell})
        row.update({k: v for k, v in meta.get(cell, {}).items() if v is not None})
        row.update(label_from_rates(
            {a: k / n for a, n, k, _, _ in prow}, {c: k / n for c, n, k, _, _ in rrow},
            terminal_rate=_terminal_rate(prow, tau, protocol), tau=tau, delta=delta,
            deltas=protocol.deltas, budget=protocol.budget,
            restart_budgets=protocol.restart_budgets, scratch=scratch_budget(protocol),
            limited_at=budget_limited_at(protocol)))
        row["terminal_candidate"] = (not row["event_observed"]) and terminal_candidate(prow, tau)
        row["final_n"] = max(prow)[1] if prow else 0
        rows.append(row)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    for col in ("final_anchor", "t_f", "interval_lower", "interval_upper", "stability_anchor",
                "censoring_time", "terminal_a1_anchor", "t_v", "t_v_cons", "level",
                "reasoning_tokens", *[c for c in frame.columns if c.startswith("t_v_")]):
        if col in frame.columns:
            frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("Int64")
    for col in [c for c in frame.columns if c.startswith("R_")] + [
            "final_rate", "max_advantage", "terminal_a1_rate", "terminal_a1_advantage",
            "terminal_a1_matched_restart"]:
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    return frame


def cell_curves(probe_panel: pd.DataFrame, restart_panel: pd.DataFrame, *,
                protocol: Protocol = DEFAULT) -> pd.DataFrame:
    """Per (cell, probed anchor): n, k, p, x = t + B, R̂(x), R̂_cons(x), adv, adv_cons and the
    position of x among the measured budgets ("above" = proxy)."""
    probes = _by_cell(probe_panel, "anchor")
    restarts = _by_cell(restart_panel, "budget")
    rows = []
    for cell in sorted(probes):
        rr = {c: k / n for c, n, k, _, _ in restarts.get(cell, [])}
        for a, n, k, _, _ in probes[cell]:
            x = a + protocol.budget
            rh, rc = r_hat(rr, x), r_hat(rr, x, conservative=True)
            rows.append({"cell_id": cell, "anchor": a, "n": n, "k": k, "p": k / n, "x": x,
                         "r_hat": rh, "r_hat_cons": rc, "adv": k / n - rh,
                         "adv_cons": k / n - rc, "position": r_hat_position(rr, x),
                         "proxy": r_hat_position(rr, x) == "above"})
    cols = ["cell_id", "anchor", "n", "k", "p", "x", "r_hat", "r_hat_cons", "adv", "adv_cons",
            "position", "proxy"]
    return pd.DataFrame(rows, columns=cols)


# ---------------------------------------------------------------------------------------------
# plan of next work


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


def bisection_midpoint(probe_rows: Sequence[tuple], tau: float,
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
    """Restart budgets a cell gets (4): instant cells only C = 1,024 (`scratch_budget`),
    others the full grid."""
    return (scratch_budget(protocol),) if instant else tuple(protocol.restart_budgets)


def _ambiguous(n: int, nc: int, kc: int, target: int) -> bool:
    return n < target and nc > 0 and 0 < kc < nc


def plan_next(probe_panel: pd.DataFrame, restart_panel: pd.DataFrame, *,
              protocol: Protocol = DEFAULT, tau: float | None = None, topup: str = "fixed",
              band: tuple[float, float] = (0.1, 0.9), prior: str = "jeffreys") -> list[PlanItem]:
    """What the scheduler must run next, after the grid anchors and restarts are in.

    Per trajectory: while a bisection midpoint is due (3.1) only that midpoint; otherwise the
    top-up: A1 terminal replication of a censored trajectory's final anchor (canonical rate
    ≥ τ, branches m … 2m−1), plus either (topup="fixed") every probe and restart cell at 1–3 of
    4 (A5.1, restart cells included as the amendment asks) or (topup="posterior") every probe
    and restart cell whose posterior P(rate ≥ τ) lies strictly inside `band`. Cells already at
    `topup_samples` are not topped up again. Run the plan, rebuild the panels, call again until
    the plan is empty. Sorted by (cell_id, kind, anchor, budget)."""
    if topup not in ("fixed", "posterior"):
        raise ValueError(f"topup must be 'fixed' or 'posterior', got {topup!r}")
    tau = protocol.tau if tau is None else tau
    probes = _by_cell(probe_panel, "anchor")
    restarts = _by_cell(restart_panel, "budget")
    m, target, mr = protocol.samples, protocol.topup_samples, protocol.restart_samples
    if topup == "posterior":
        from breakthrough.classify.posterior import prob_rate_at_least

        def wanted(n, k, nc, kc):
            q = float(prob_rate_at_least(n, k, tau, prior))
            return n < target and band[0] < q < band[1]
    else:
        def wanted(n, k, nc, kc):
            return _ambiguous(n, nc, kc, target)

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
        if prow:
            tf = budget_fit_time([r[0] for r in prow], [k / n for _, n, k, _, _ in prow], tau)
            final, n, _, _, _ = max(prow)
            if not tf.event_observed and terminal_candidate(prow, tau) and n < target:
                add(cell, "probe", final, protocol.budget, range(m, target), "terminal_a1")
        for a, n, k, nc, kc in prow:
            if wanted(n, k, nc, kc):
                add(cell, "probe", a, protocol.budget, range(m, target),
                    "posterior" if topup == "posterior" else "ambiguity")
        for c, n, k, nc, kc in restarts.get(cell, []):
            if wanted(n, k, nc, kc):
                add(cell, "restart", -1, c, range(mr, target),
                    "posterior" if topup == "posterior" else "ambiguity")
    return [items[k] for k in sorted(items)]


# ---------------------------------------------------------------------------------------------
# summary


def _plan_counts(plan: Sequence[PlanItem]) -> dict:
    by_reason: dict[str, int] = {}
    for it in plan:
        by_reason[it.reason] = by_reason.get(it.reason, 0) + 1
    return {"items": len(plan), "probe": sum(it.kind == "probe" for it in plan),
            "restart": sum(it.kind == "restart" for it in plan),
            "samples": sum(len(it.branches) for it in plan), "by_reason": by_reason}


def _py(v):
    if v is None or v is pd.NA:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    if hasattr(v, "item"):
        return v.item()
    return v


def summarize(labels: pd.DataFrame, *, protocol: Protocol = DEFAULT, tau: float | None = None,
              delta: float | None = None, plans: Mapping[str, Sequence[PlanItem]] | None = None,
              prior: str | None = None) -> dict:
    """Summary (5.3 / 9.1): regime counts per model, the non-instant T_V(δ) events, δ
    sensitivity over non-instant cells, conservative disagreements, cross-model agreement of
    the collapsed classes, terminal events, plan sizes of both top-up rules."""
    tau = protocol.tau if tau is None else tau
    delta = protocol.delta if delta is None else delta
    deltas = sorted(set(protocol.deltas) | {float(delta)})
    out: dict = {"tau": tau, "budget": protocol.budget, "primary_delta": delta,
                 "deltas": deltas, "protocol_digest": protocol.digest()}
    if prior:
        out["prior"] = prior
    if labels.empty:
        out.update(n_cells=0, regime_counts={})
        return out
    out["n_cells"] = {str(m): int(len(g)) for m, g in labels.groupby("model")}
    out["regime_counts"] = {
        str(m): {r: int((g["regime"] == r).sum()) for r in REGIMES}
        for m, g in labels.groupby("model")}
    out["class_counts"] = {
        str(m): {c: int((g["regime_class"] == c).sum()) for c in FIGURE_CLASSES}
        for m, g in labels.groupby("model")}
    non_instant = labels[~labels["instant"].astype(bool)]
    ev = non_instant[non_instant["t_v"].notna()]
    cols = [c for c in ("model", "problem_id", "stage", "level", "t_f", "t_v", "max_advantage",
                        "regime") if c in ev.columns]
    out["t_v_events_primary"] = [{k: _py(v) for k, v in r.items()}
                                 for r in ev[cols].to_dict(orient="records")]
    out["delta_sensitivity_counts"] = {
        str(d): int(non_instant[f"t_v_{delta_key(d)}"].notna().sum()) for d in deltas}
    out["delta_sensitivity_counts_conservative"] = {
        str(d): int(non_instant[f"t_v_cons_{delta_key(d)}"].notna().sum()) for d in deltas}
    dis = labels[~labels["conservative_agrees"].astype(bool)]
    out["conservative_disagreements"] = [
        {k: _py(v) for k, v in r.items()}
        for r in dis[["model", "problem_id", "t_v", "t_v_cons"]].to_dict(orient="records")]
    # cross-model agreement of the collapsed ("agreement") classes, problems seen in ≥ 2 models
    agree = compared = 0
    for _, g in labels.groupby("problem_id"):
        if g["model"].nunique() < 2:
            continue
        compared += 1
        agree += g["regime"].map(lambda r: collapse_regime(r, "agreement")).nunique() == 1
    out["cross_model_agreement"] = {"agree": int(agree), "compared": int(compared),
                                    "text": f"{int(agree)}/{int(compared)}",
                                    "models": sorted(map(str, labels["model"].unique()))}
    term = labels[labels["terminal_a1_anchor"].notna()]
    out["terminal_a1"] = {
        str(m): {"events": int(len(g)),
                 "proxy_comparisons": int(g["terminal_a1_proxy"].fillna(False).astype(bool).sum()),
                 "prefix_wins": int((g["terminal_a1_advantage"] > 0).sum()),
                 "ties": int((g["terminal_a1_advantage"].abs() < EPS).sum())}
        for m, g in term.groupby("model")}
    out["proxy_anchor_comparisons"] = int(labels["proxy_anchors"].sum())
    if "regime_survival" in labels.columns:
        out["regime_survival"] = {
            str(m): {"mean": round(float(g["regime_survival"].mean()), 4),
                     "below_0.5": int((g["regime_survival"] < 0.5).sum())}
            for m, g in labels.groupby("model")}
    if plans:
        out["plans"] = {name: _plan_counts(p) for name, p in plans.items()}
    return out

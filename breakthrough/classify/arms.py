"""Probe arms at a second continuation budget and the A2 falsification readout (protocol 3.6).

A run's probes are made at its continuation budget B (the primary arm). `bt continue RUN
--add-budget B2` re-probes the same base traces at B2 with the identical branch seeds (a
second arm); every rule here is pure (panels in, tables out), so `bt continue` (which anchors
to re-probe) and `bt classify` (the comparison) read one definition:

* targets (3.6): trajectories with a T_F event at B on the canonical rates whose interval
  ends beyond the instant bound (upper > 16 tokens in the study); every probed anchor up to
  and including the stability anchor is re-probed at B2, m branches each;
* readout: the first τ-crossing anchor (p ≥ τ, no stability requirement) at each B;
* the frozen rule: "mechanical confound" if most first crossings move earlier by at least
  2B tokens (2,048 at B = 1,024); "construct supported" if the median shift is at most one
  anchor step either way (one doubling of the anchor, as the grid steps); otherwise "inconclusive".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from breakthrough.classify.panels import PanelRow, rows_by_cell
from breakthrough.classify.regimes import EPS, budget_fit_time, canonical_rates, is_instant
from breakthrough.protocol import Protocol

ARM_COLUMNS = [
    "cell_id",
    "model",
    "problem_id",
    "budget",
    "n_anchors",
    "first_crossing",
    "event_observed",
    "t_f",
    "interval_lower",
    "interval_upper",
    "censoring_time",
]
A2_COLUMNS = [
    "cell_id",
    "model",
    "problem_id",
    "level",
    "budget_1",
    "budget_2",
    "anchors_2",
    "last_anchor_2",
    "first_crossing_1",
    "first_crossing_2",
    "shift_tokens",
    "shift_steps",
    "earlier_by_2b",
]
RULE_TEXT = (
    "targets: a T_F event at B (canonical rates) whose interval ends beyond the "
    "instant bound; re-probed: every probed anchor up to the stability anchor"
)


def first_crossing(rates: Mapping[int, float], tau: float) -> int | None:
    """The first probed anchor with p ≥ τ (no stability requirement), or None."""
    for a in sorted(rates):
        if rates[a] >= tau - EPS:
            return int(a)
    return None


def arm_anchors(probe_rows: Sequence[PanelRow], tau: float, protocol: Protocol) -> list[int]:
    """The anchors one trajectory is re-probed at in a second arm (3.6), from its primary-arm
    panel rows; empty when it is no target (no event, or an instant one)."""
    canon = canonical_rates(probe_rows)
    tf = budget_fit_time(list(canon), list(canon.values()), tau)
    stable = tf.stability_anchor  # set whenever an event is observed
    if not tf.event_observed or stable is None or is_instant(True, tf.interval_upper, protocol):
        return []
    return sorted(a for a in canon if a <= int(stable))


def arm_targets(probe_panel: pd.DataFrame, tau: float, protocol: Protocol) -> dict[str, list[int]]:
    """cell_id → anchors to re-probe, for every target trajectory of a primary-arm panel."""
    out = {}
    for cell, rows in rows_by_cell(probe_panel, "anchor").items():
        anchors = arm_anchors(rows, tau, protocol)
        if anchors:
            out[cell] = anchors
    return out


def target_counts(probe_panel: pd.DataFrame, tau: float, protocol: Protocol) -> dict[str, int]:
    """Why a primary-arm panel has the A2 targets it has: its probed trajectories, those
    without a T_F event (p never stayed >= τ), those whose event is instant, and the targets."""
    out = {"trajectories": 0, "no_event": 0, "instant": 0, "targets": 0}
    for rows in rows_by_cell(probe_panel, "anchor").values():
        canon = canonical_rates(rows)
        tf = budget_fit_time(list(canon), list(canon.values()), tau)
        out["trajectories"] += 1
        if not tf.event_observed:
            out["no_event"] += 1
        elif is_instant(True, tf.interval_upper, protocol):
            out["instant"] += 1
        else:
            out["targets"] += 1
    return out


def _split(cell: str) -> tuple[str, str]:
    model, _, pid = cell.partition(":")
    return model, pid or cell


def arm_labels(panels: Mapping[int, pd.DataFrame], tau: float) -> pd.DataFrame:
    """One row per (cell, arm budget): anchors probed, first τ-crossing and T_F at that B (on
    the canonical rates, as the study's A2 readout used m = 4). `panels`: B → probe panel at
    B (`panels.probe_panel(samples, protocol, budget=B)`)."""
    rows = []
    for budget, panel in sorted(panels.items()):
        for cell, prow in rows_by_cell(panel, "anchor").items():
            canon = canonical_rates(prow)
            tf = budget_fit_time(list(canon), list(canon.values()), tau)
            model, pid = _split(cell)
            rows.append(
                {
                    "cell_id": cell,
                    "model": model,
                    "problem_id": pid,
                    "budget": int(budget),
                    "n_anchors": len(canon),
                    "first_crossing": first_crossing(canon, tau),
                    "event_observed": tf.event_observed,
                    "t_f": tf.stable_anchor,
                    "interval_lower": tf.interval_lower,
                    "interval_upper": tf.interval_upper,
                    "censoring_time": tf.censoring_time,
                }
            )
    frame = pd.DataFrame(rows, columns=ARM_COLUMNS)
    for col in ("first_crossing", "t_f", "interval_lower", "interval_upper", "censoring_time"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("Int64")
    return frame.sort_values(["budget", "cell_id"], ignore_index=True)


def a2_table(
    primary: pd.DataFrame,
    second: pd.DataFrame,
    *,
    budget_1: int,
    budget_2: int,
    tau: float,
    levels: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """The A2 comparison: one row per trajectory probed in the second arm. The first crossing
    at B1 reads the primary arm at the anchors the second arm probed (the study's re-probe of
    every anchor up to the stability anchor), at B2 the second arm; shift = B2 − B1 crossing in
    tokens and in anchor doublings (negative: earlier at B2); a trajectory without a crossing
    at B2 has no shift."""
    p1 = rows_by_cell(primary, "anchor")
    rows = []
    for cell, prow in sorted(rows_by_cell(second, "anchor").items()):
        c2 = canonical_rates(prow)
        c1 = {a: r for a, r in canonical_rates(p1.get(cell, [])).items() if a <= max(c2)}
        f1, f2 = first_crossing(c1, tau), first_crossing(c2, tau)
        shift = None if f1 is None or f2 is None else f2 - f1
        steps = None if f1 is None or f2 is None else math.log2(f2) - math.log2(f1)
        model, pid = _split(cell)
        level = (levels or {}).get(cell)
        rows.append(
            {
                "cell_id": cell,
                "model": model,
                "problem_id": pid,
                "level": None if level is None or pd.isna(level) else int(level),
                "budget_1": int(budget_1),
                "budget_2": int(budget_2),
                "anchors_2": len(c2),
                "last_anchor_2": max(c2),
                "first_crossing_1": f1,
                "first_crossing_2": f2,
                "shift_tokens": shift,
                "shift_steps": steps,
                "earlier_by_2b": shift is not None and shift <= -2 * budget_1,
            }
        )
    frame = pd.DataFrame(rows, columns=A2_COLUMNS)
    for col in ("level", "last_anchor_2", "first_crossing_1", "first_crossing_2", "shift_tokens"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("Int64")
    frame["shift_steps"] = pd.to_numeric(frame["shift_steps"], errors="coerce").astype(float)
    return frame


def a2_verdict(table: pd.DataFrame) -> dict:
    """The frozen A2 rule on a comparison table: counts, the median shift and the verdict."""
    n = int(len(table))
    earlier = int(table["earlier_by_2b"].astype(bool).sum()) if n else 0
    steps = table["shift_steps"].dropna()
    median = float(steps.median()) if len(steps) else None
    if n and earlier > n / 2:
        verdict = "mechanical confound"
    elif median is not None and abs(median) <= 1 + EPS:
        verdict = "construct supported"
    else:
        verdict = "inconclusive"
    budgets = sorted({int(b) for b in table.get("budget_2", [])})
    b1 = sorted({int(b) for b in table.get("budget_1", [])})
    return {
        "trajectories": n,
        "earlier_by_2b": earlier,
        "no_crossing_at_b2": int(table["first_crossing_2"].isna().sum()) if n else 0,
        "median_shift_steps": median,
        "verdict": verdict,
        "budget_1": b1[0] if b1 else None,
        "budgets_2": budgets,
        "rule": "mechanical confound if most first crossings move earlier by >= 2B tokens; "
        "construct supported if the median |shift| is <= one anchor step",
    }

"""Hand-built panels that hit every regime and every edge of protocol 3.1, 3.5, 4.1, 5.1–5.3."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from breakthrough.classify import regimes as C
from breakthrough.classify.panels import probe_panel, restart_panel
from breakthrough.classify.posterior import (posterior_plan, prob_rate_at_least, regime_survival,
                                    with_posterior)
from breakthrough.protocol import DEFAULT

GRID = (64, 128, 256, 512, 1024, 2048, 4096, 8192)


def _rows(cell, spec, key):
    rows = []
    for point, v in spec.items():
        k, n, *rest = v
        nc = min(n, 4)
        kc = rest[0] if rest else (k if n <= 4 else None)
        assert kc is not None, "give canonical successes for a pooled cell"
        rows.append({"cell_id": cell, key: point, "n": n, "k": k, "n_canon": nc, "k_canon": kc})
    return rows


def panels(probes: dict | None = None, restarts: dict | None = None):
    """probes / restarts: {cell_id: {anchor or budget: (k, n[, k_canon])}}."""
    pr = [r for cell, s in (probes or {}).items() for r in _rows(cell, s, "anchor")]
    rr = [r for cell, s in (restarts or {}).items() for r in _rows(cell, s, "budget")]
    pp = pd.DataFrame(pr, columns=["cell_id", "anchor", "n", "k", "n_canon", "k_canon"])
    rp = pd.DataFrame(rr, columns=["cell_id", "budget", "n", "k", "n_canon", "k_canon"])
    return pp, rp


def grid(*ks, n=4, anchors=GRID):
    """Probe spec over the grid with the given successes (of n)."""
    return {a: (k, n) for a, k in zip(anchors, ks)}


def R(r1024=0, r2048=0, r4096=0, r8192=0, n=4):
    return {1024: (r1024, n), 2048: (r2048, n), 4096: (r4096, n), 8192: (r8192, n)}


def label(probes, restarts, **kw) -> dict:
    pp, rp = panels({"m:p": probes}, {"m:p": restarts} if restarts is not None else None)
    frame = C.label_panels(pp, rp, **kw)
    assert len(frame) == 1
    return frame.iloc[0].to_dict()


def _na(v):
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


# ---------------------------------------------------------------------------------------------
# 5.1 T_F


def test_tf_first_anchor_crossing_has_lower_zero():
    tf = C.budget_fit_time([64, 128, 256], [1.0, 0.75, 0.0], 0.75)
    assert tf == C.BudgetFit(True, 0, 64, 64, 128, 128)


def test_tf_crossing_that_fails_stability_is_skipped():
    # 256 crosses but 512 does not; the first stable pair is (1024, 2048)
    tf = C.budget_fit_time(GRID, [0, 0, 1, 0.5, 0.75, 0.75, 0, 0], 0.75)
    assert tf.event_observed and (tf.interval_lower, tf.interval_upper) == (512, 1024)
    assert tf.stability_anchor == 2048 and tf.stable_anchor == 1024


def test_tf_right_censored_at_final_anchor():
    tf = C.budget_fit_time([64, 128, 256, 512], [0, 0.5, 0.25, 1.0], 0.75)
    assert not tf.event_observed
    assert tf.interval_lower == tf.censoring_time == 512
    assert tf.interval_upper is None and tf.stable_anchor is None
    empty = C.budget_fit_time([], [], 0.75)
    assert not empty.event_observed and empty.censoring_time is None


def test_tf_tie_exactly_at_tau_crosses_and_order_does_not_matter():
    tf = C.budget_fit_time([256, 64, 128], [0.0, 0.75, 6 / 8], 0.75)
    assert tf.event_observed and tf.interval_upper == 64
    assert not C.budget_fit_time([64, 128], [0.75 - 1e-6, 1.0], 0.75).event_observed


def test_tf_validates_input():
    with pytest.raises(ValueError):
        C.budget_fit_time([64, 64], [1, 1], 0.75)
    with pytest.raises(ValueError):
        C.budget_fit_time([64], [1], 0.0)


# ---------------------------------------------------------------------------------------------
# 4.1 R̂


def test_r_hat_inside_below_above_and_conservative():
    panel = {1024: 0.0, 2048: 1.0}
    x = 1024 * math.sqrt(2)
    assert C.r_hat(panel, x) == pytest.approx(0.5)
    assert C.r_hat(panel, x, conservative=True) == 1.0
    assert C.r_hat(panel, 512) == 0.0 and C.r_hat_position(panel, 512) == "below"
    assert C.r_hat(panel, 9216) == 1.0 and C.r_hat_position(panel, 9216) == "above"
    assert C.r_hat_position(panel, 2048) == "inside"
    assert C.r_hat_position({}, 2048) == "none" and math.isnan(C.r_hat({}, 2048))
    full = {1024: 0.25, 2048: 0.0, 4096: 0.5, 8192: 1.0}
    # 3072 = 2048·1.5: log-linear between 2048 and 4096
    assert C.r_hat(full, 3072) == pytest.approx(0.5 * math.log2(1.5))
    # an interior measured point: exact value, conservative bracket (previous, x) as in the
    # reference script
    assert C.r_hat(full, 2048) == 0.0
    assert C.r_hat(full, 2048, conservative=True) == 0.25
    # clamped ends identical in both variants
    assert C.r_hat(full, 9216, conservative=True) == 1.0 == C.r_hat(full, 9216)


def test_proxy_flag_only_beyond_largest_measured_budget():
    # t = 7,168 → x = 8,192 is measured; t = 8,192 → x = 9,216 uses R(8,192) as a proxy
    row = label({7168: (0, 4), 8192: (4, 4)}, R(0, 0, 0, 1))
    assert row["proxy_anchors"] == 1
    pp, rp = panels({"m:p": {7168: (0, 4), 8192: (4, 4)}}, {"m:p": R(0, 0, 0, 1)})
    cur = C.cell_curves(pp, rp).set_index("anchor")
    assert not cur.loc[7168, "proxy"] and cur.loc[7168, "r_hat"] == 0.25
    assert cur.loc[8192, "proxy"] and cur.loc[8192, "position"] == "above"
    assert cur.loc[8192, "r_hat"] == 0.25


def test_interpolation_below_inside_above_in_the_label_table():
    # restarts measured at 2,048 and 4,096 only: t = 64 → x = 1,088 is below (R(2,048)),
    # t = 2,048 → x = 3,072 inside, t = 4,096 → x = 5,120 above (R(4,096), a proxy)
    pp, rp = panels({"m:p": {64: (4, 4), 2048: (4, 4), 4096: (4, 4)}},
                    {"m:p": {2048: (1, 4), 4096: (3, 4)}})
    cur = C.cell_curves(pp, rp).set_index("anchor")
    assert list(cur["position"]) == ["below", "inside", "above"]
    assert cur.loc[64, "r_hat"] == 0.25 and cur.loc[4096, "r_hat"] == 0.75
    assert cur.loc[2048, "r_hat"] == pytest.approx(0.25 + 0.5 * math.log2(1.5))
    assert cur.loc[2048, "r_hat_cons"] == 0.75
    row = C.label_panels(pp, rp).iloc[0]
    assert row["proxy_anchors"] == 1 and row["max_advantage"] == 0.75
    assert row["regime"] == "budget_limited"


def test_instant_cell_with_only_r1024_uses_it_everywhere():
    adv = C.advantages({16: 1.0, 2048: 1.0}, {1024: 0.5}, 1024)
    assert adv == {16: 0.5, 2048: 0.5}


# ---------------------------------------------------------------------------------------------
# 5.2 T_V


def test_tv_tie_exactly_at_delta_counts():
    row = label(grid(0, 3, 3, 3, 3, 3, 3, 3), R(1, 1, 1, 1))
    # p = 0.75, R̂ = 0.25 everywhere: adv = 0.5 exactly
    assert row["t_v_d050"] == 128 and row["t_v_d025"] == 128
    assert _na(row["t_v_d075"])
    assert row["max_advantage"] == 0.5
    assert row["regime"] == "prefix_limited"


def test_tv_needs_stability_of_both_conditions():
    probe = {64: 1.0, 128: 1.0, 256: 1.0}
    adv = {64: 0.6, 128: 0.4, 256: 0.6}
    assert C.prefix_value_time(probe, adv, 0.75, 0.5) is None
    assert C.prefix_value_time(probe, adv, 0.75, 0.4) == 64


def test_conservative_variant_disagrees():
    restarts = {1024: (0, 4), 2048: (0, 4), 4096: (5, 8, 2), 8192: (4, 4)}
    row = label({512: (2, 4), 1024: (4, 4), 2048: (4, 4), 4096: (0, 4)}, restarts)
    assert row["t_v"] == 1024 and _na(row["t_v_cons"])
    assert not row["conservative_agrees"]
    assert row["regime"] == "prefix_limited"
    pp, rp = panels({"m:p": {512: (2, 4), 1024: (4, 4), 2048: (4, 4), 4096: (0, 4)}},
                    {"m:p": restarts})
    s = C.summarize(C.label_panels(pp, rp))
    assert len(s["conservative_disagreements"]) == 1


# ---------------------------------------------------------------------------------------------
# 5.3 regimes


def test_instant_sub_labels():
    instant = {16: (4, 4), 32: (4, 4), 64: (4, 4), 128: (4, 4), 256: (4, 4)}
    assert label(instant, {1024: (3, 4)})["regime"] == "instant_scratch_solvable"
    row = label(instant, {1024: (1, 4)})
    assert row["regime"] == "instant_prefix_advantaged" and row["instant"]
    assert row["interval_lower"] == 0 and row["interval_upper"] == 16
    # p = 3/4 and R = 1/2: adv 0.25 < 0.5 → ambiguous
    amb = {a: (3, 4) for a in instant}
    assert label(amb, {1024: (2, 4)})["regime"] == "instant_ambiguous"
    # no restart panel at all → R(1024) treated as 0, no T_V → ambiguous
    assert label(instant, None)["regime"] == "instant_ambiguous"


def test_instant_needs_upper_at_most_16():
    row = label({32: (4, 4), 64: (4, 4), 128: (4, 4)}, {1024: (4, 4)})
    assert row["interval_upper"] == 32 and not row["instant"]


def test_budget_limited_beats_prefix_limited_and_needs_measured_4096():
    row = label(grid(0, 4, 4, 4, 4, 4, 4, 4), R(0, 0, 3, 4))
    assert row["regime"] == "budget_limited" and row["t_v"] == 128
    # R̂(4096) interpolated (4096 not measured) ≥ τ is not budget-limited; rule 6 mirrors
    # rule 2, so the cell falls through to the prefix / event rules
    row = label(grid(0, 4, 4, 4, 4, 4, 4, 4), {1024: (0, 4), 8192: (4, 4)})
    assert row["regime"] == "prefix_limited"


def test_no_crossing_at_primary_delta_and_unsolved():
    row = label(grid(0, 0, 3, 3, 3, 3, 3, 3), R(2, 2, 2, 2))
    assert row["event_observed"] and _na(row["t_v"]) and row["t_v_d025"] == 256
    assert row["regime"] == "no_crossing_at_primary_delta"
    row = label(grid(0, 1, 2, 0, 1, 2, 1, 2), R(0, 1, 2, 2))
    assert row["regime"] == "unsolved_hard" and not row["event_observed"]


def test_terminal_event_at_six_of_eight():
    probes = grid(0, 0, 1, 0, 2, 1, 1, 0) | {8192: (6, 8, 3)}
    row = label(probes, R(0, 0, 1, 2))
    assert row["regime"] == "terminal_A1"
    assert row["terminal_a1_anchor"] == 8192 and row["terminal_a1_rate"] == 0.75
    assert row["terminal_a1_proxy"]  # 8,192 + 1,024 > 8,192: R(8,192) as proxy
    assert row["terminal_a1_advantage"] == pytest.approx(0.25)


def test_terminal_at_five_of_eight_is_no_event():
    probes = grid(0, 0, 1, 0, 2, 1, 1, 0) | {8192: (5, 8, 3)}
    row = label(probes, R(0, 0, 1, 2))
    assert row["regime"] == "unsolved_hard" and _na(row["terminal_a1_anchor"])
    assert row["terminal_candidate"]


def test_terminal_needs_replication_and_canonical_candidate():
    # only 4 branches at the final anchor: candidate, not yet an event
    row = label(grid(0, 0, 0, 0, 0, 0, 0, 4), R())
    assert row["regime"] == "unsolved_hard" and row["terminal_candidate"]
    # pooled 6/8 but canonical 2/4 (A5.1 top-up, not an A1 candidate) → no terminal event
    row = label(grid(0, 0, 0, 0, 0, 0, 0) | {8192: (6, 8, 2)}, R())
    assert row["regime"] == "unsolved_hard" and not row["terminal_candidate"]


def test_terminal_annotated_but_budget_limited_wins():
    probes = grid(0, 0, 0, 0, 0, 0) | {4096: (7, 8, 4)}
    row = label(probes, R(0, 1, 3, 4))
    assert row["regime"] == "budget_limited"
    assert row["terminal_a1_anchor"] == 4096 and not row["terminal_a1_proxy"]
    # matched restart R̂(5,120) inside the grid
    expect = 0.75 + math.log2(5120 / 4096) * 0.25
    assert row["terminal_a1_matched_restart"] == pytest.approx(expect)


def test_regime_precedence_table():
    tau = 0.75
    base = dict(event_observed=True, interval_upper=16, restart={1024: 1.0, 4096: 1.0},
                t_v_primary=64, terminal=False, tau=tau)
    assert C.regime_label(**base) == "instant_scratch_solvable"
    assert C.regime_label(**(base | {"interval_upper": 17})) == "budget_limited"
    assert C.regime_label(**(base | {"interval_upper": 32, "restart": {4096: 0.5}})) \
        == "prefix_limited"
    assert C.regime_label(**(base | {"interval_upper": 32, "restart": {}, "t_v_primary": None})) \
        == "no_crossing_at_primary_delta"
    assert C.regime_label(event_observed=False, interval_upper=None, restart={}, t_v_primary=None,
                          terminal=True, tau=tau) == "terminal_A1"
    assert C.regime_label(event_observed=False, interval_upper=None, restart={4096: 0.5},
                          t_v_primary=None, terminal=False, tau=tau) == "unsolved_hard"


def test_collapse():
    assert C.collapse_regime("terminal_A1") == "terminal-A1"
    assert C.collapse_regime("terminal_A1", "agreement") == "other"
    assert C.collapse_regime("instant_ambiguous", "agreement") == "instant"
    assert C.delta_key(0.25) == "d025" and C.delta_key(0.5) == "d050"


# ---------------------------------------------------------------------------------------------
# 3.1 / 3.5 plans


def plan(probes, restarts=None, **kw):
    pp, rp = panels({"m:p": probes}, {"m:p": restarts} if restarts else None)
    return C.plan_next(pp, rp, **kw)


def test_bisection_to_instant_two_rounds():
    p = plan(grid(4, 4, 0, 0, 0, 0, 0, 0))
    assert [(i.kind, i.anchor, i.reason, i.branches) for i in p] == \
        [("probe", 32, "bisection", range(0, 4))]
    p = plan(grid(4, 4, 0, 0, 0, 0, 0, 0) | {32: (3, 4)})
    assert [(i.anchor, i.reason) for i in p] == [(16, "bisection")]
    # two rounds done → no more bisection; instant; no ambiguous cells besides 32 at 3/4
    probes = grid(4, 4, 0, 0, 0, 0, 0, 0) | {32: (3, 4), 16: (4, 4)}
    p = plan(probes)
    assert [(i.anchor, i.reason) for i in p] == [(32, "ambiguity")]
    assert label(probes, {1024: (4, 4)})["regime"] == "instant_scratch_solvable"


def test_bisection_interior_and_failed_midpoint():
    probes = grid(0, 0, 0, 1, 4, 4, 4, 4)
    assert [i.anchor for i in plan(probes)] == [768]
    probes[768] = (2, 4)  # midpoint fails → interval (768, 1024] → next midpoint 896
    assert [i.anchor for i in plan(probes)] == [896]
    probes[896] = (3, 4)
    tf = C.budget_fit_time(list(probes), [k / n for k, n in probes.values()], 0.75)
    assert (tf.interval_lower, tf.interval_upper) == (768, 896)
    assert all(i.reason != "bisection" for i in plan(probes))


def test_bisection_stops_at_min_width_and_after_topup():
    proto = DEFAULT.with_overrides(refinement_rounds=5)
    probes = grid(4, 4, 0, 0, 0, 0, 0, 0) | {32: (4, 4), 16: (4, 4)}
    assert all(i.reason != "bisection" for i in plan(probes, protocol=proto))  # width 16
    # an event that appears only after a top-up is not refined (A5.1: no new bisection)
    probes = grid(0, 0, 0, 2, 4, 4, 0, 0) | {512: (6, 8, 2)}
    assert all(i.reason != "bisection" for i in plan(probes))
    # no event → nothing to refine
    assert plan(grid(0, 0, 0, 0, 0, 0, 0, 0)) == []


def test_terminal_and_ambiguity_plans():
    probes = grid(0, 1, 2, 0, 4, 0, 0, 3)  # censored, final 3/4: A1 and A5.1 at 8192
    items = plan(probes, R(1, 0, 4, 3))
    got = {(i.kind, i.anchor, i.budget): (i.reason, i.branches) for i in items}
    assert got[("probe", 8192, 1024)] == ("ambiguity+terminal_a1", range(4, 8))
    assert got[("probe", 128, 1024)] == ("ambiguity", range(4, 8))
    assert got[("probe", 256, 1024)] == ("ambiguity", range(4, 8))
    assert ("probe", 1024, 1024) not in got and ("probe", 64, 1024) not in got
    assert got[("restart", -1, 1024)] == ("ambiguity", range(4, 8))
    assert got[("restart", -1, 8192)] == ("ambiguity", range(4, 8))
    assert ("restart", -1, 4096) not in got and ("restart", -1, 2048) not in got
    # final anchor 4/4: A1 only
    items = plan(grid(0, 0, 0, 0, 0, 0, 0, 4))
    assert [(i.anchor, i.reason) for i in items] == [(8192, "terminal_a1")]
    # after the top-up, nothing is left
    done = grid(0, 0, 0, 0, 0, 0, 0) | {8192: (5, 8, 4)}
    assert plan(done) == []
    assert items[0].to_dict() == {"cell_id": "m:p", "kind": "probe", "anchor": 8192,
                                  "budget": 1024, "branches": [4, 8], "reason": "terminal_a1"}


def test_posterior_topup_plan_band():
    probes = grid(0, 1, 2, 3, 0, 0, 0, 0)
    pp, rp = panels({"m:p": probes}, {"m:p": R(0, 1, 2, 3)})
    items = posterior_plan(pp, rp, band=(0.1, 0.9))
    got = {(i.kind, i.anchor, i.budget) for i in items}
    # Jeffreys P(rate ≥ .75): 1/4 → .016 (out), 2/4 → .127, 3/4 → .457 (in)
    assert got == {("probe", 256, 1024), ("probe", 512, 1024), ("restart", -1, 4096),
                   ("restart", -1, 8192)}
    assert all(i.reason == "posterior" for i in items)
    with pytest.raises(ValueError):
        C.plan_next(pp, rp, topup="sometimes")


def test_restart_budgets_for():
    assert C.restart_budgets_for(True) == (1024,)
    assert C.restart_budgets_for(False) == (1024, 2048, 4096, 8192)


# ---------------------------------------------------------------------------------------------
# panels and posterior


def _samples():
    rows = []
    sid = 0

    def add(kind, anchor, budget, branch, correct, cell="m:p"):
        nonlocal sid
        sid += 1
        rows.append({"sample_id": sid, "cell_id": cell, "kind": kind, "anchor": anchor,
                     "budget": budget, "branch": branch, "correct": correct})

    add("base", -1, 0, 0, True)
    for b in range(8):
        add("probe", 64, 1024, b, b % 2 == 0)  # 4/8, canonical 2/4
    add("probe", 128, 1024, 0, np.nan)  # ungraded: left out
    add("probe", 128, 1024, 1, True)
    add("probe", 128, 4096, 0, True)  # A2 re-probe at another B: ignored
    for b in range(4):
        add("restart", -1, 2048, b, b == 0)
    return pd.DataFrame(rows)


def test_panels_from_samples():
    s = _samples()
    pp = probe_panel(s)
    assert pp.to_dict(orient="records") == [
        {"cell_id": "m:p", "anchor": 64, "n": 8, "k": 4, "n_canon": 4, "k_canon": 2},
        {"cell_id": "m:p", "anchor": 128, "n": 1, "k": 1, "n_canon": 1, "k_canon": 1},
    ]
    rp = restart_panel(s)
    assert rp.to_dict(orient="records") == [
        {"cell_id": "m:p", "budget": 2048, "n": 4, "k": 1, "n_canon": 4, "k_canon": 1}]
    # row order does not matter
    assert probe_panel(s.sample(frac=1, random_state=3)).equals(pp)
    empty = probe_panel(s[s.kind == "base"])
    assert list(empty.columns) == ["cell_id", "anchor", "n", "k", "n_canon", "k_canon"]


def test_posterior_probabilities():
    assert float(prob_rate_at_least(4, 4, 0.75)) == pytest.approx(0.8828, abs=1e-3)
    assert float(prob_rate_at_least(4, 4, 0.75, "uniform")) == pytest.approx(1 - 0.75 ** 5)
    pp, _ = panels({"m:p": grid(0, 4)})
    w = with_posterior(pp, 0.75)
    assert w["p_ge_tau"].iloc[0] < 0.01 and w["p_ge_tau"].iloc[1] == pytest.approx(0.883, abs=1e-3)
    assert list(w["rate"]) == [0.0, 1.0]
    with pytest.raises(ValueError):
        prob_rate_at_least(4, 4, 0.75, "haldane")


def test_regime_survival_seeded_and_sensible():
    pp, rp = panels({"a:x": grid(0, 0, 0, 0, 0, 0, 0, 0),
                     "a:y": {a: (8, 8, 4) for a in GRID}},
                    {"a:x": R(), "a:y": {c: (8, 8, 4) for c in (1024, 2048, 4096, 8192)}})
    lab = C.label_panels(pp, rp)
    s1 = regime_survival(pp, rp, lab, draws=50, seed=1)
    s2 = regime_survival(pp, rp, lab.iloc[::-1], draws=50, seed=1)
    assert s1.sort_index().equals(s2.sort_index())
    assert s1["a:x"] > 0.9  # 0 of 4 everywhere: unsolved almost surely
    assert 0.0 <= s1["a:y"] <= 1.0


# ---------------------------------------------------------------------------------------------
# summary


def test_summary_counts_and_cross_model_agreement():
    probes = {"g:p1": grid(0, 0, 0, 0, 0, 0, 0, 0), "m:p1": grid(0, 0, 0, 0, 0, 0, 0, 0),
              "g:p2": grid(0, 4, 4, 4, 4, 4, 4, 4), "m:p2": grid(0, 0, 0, 0, 0, 0, 0, 0)}
    restarts = {c: R() for c in probes} | {"m:p2": R(0, 0, 4, 4)}
    pp, rp = panels(probes, restarts)
    lab = C.label_panels(pp, rp)
    plans = {"fixed": C.plan_next(pp, rp), "posterior": posterior_plan(pp, rp)}
    s = C.summarize(lab, plans=plans, prior="jeffreys Beta(0.5, 0.5)")
    assert s["regime_counts"]["g"]["prefix_limited"] == 1
    assert s["regime_counts"]["m"]["budget_limited"] == 1
    assert s["regime_counts"]["g"]["unsolved_hard"] == 1
    assert s["cross_model_agreement"] == {"agree": 1, "compared": 2, "text": "1/2",
                                          "models": ["g", "m"]}
    assert s["delta_sensitivity_counts"] == {"0.25": 1, "0.5": 1, "0.75": 1}
    assert s["t_v_events_primary"][0]["t_v"] == 128
    assert s["plans"]["fixed"]["items"] == 1  # g:p2 event at 128 → bisection midpoint 96
    import json

    json.dumps(s)

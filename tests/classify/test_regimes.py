"""Labels on hand-built panels: every regime and every edge of protocol 4.1 and 5.1–5.3."""

from __future__ import annotations

import math

import pytest
from panel_builders import GRID, R, grid, label, na, panels

from breakthrough.classify import regimes as C
from breakthrough.classify.summary import summarize
from breakthrough.protocol import DEFAULT

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
    pp, rp = panels(
        {"m:p": {64: (4, 4), 2048: (4, 4), 4096: (4, 4)}}, {"m:p": {2048: (1, 4), 4096: (3, 4)}}
    )
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
    assert na(row["t_v_d075"])
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
    assert row["t_v"] == 1024 and na(row["t_v_cons"])
    assert not row["conservative_agrees"]
    assert row["regime"] == "prefix_limited"
    pp, rp = panels(
        {"m:p": {512: (2, 4), 1024: (4, 4), 2048: (4, 4), 4096: (0, 4)}}, {"m:p": restarts}
    )
    s = summarize(C.label_panels(pp, rp))
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
    assert row["event_observed"] and na(row["t_v"]) and row["t_v_d025"] == 256
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
    assert row["regime"] == "unsolved_hard" and na(row["terminal_a1_anchor"])
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
    base = dict(
        event_observed=True,
        interval_upper=16,
        restart={1024: 1.0, 4096: 1.0},
        t_v_primary=64,
        terminal=False,
        tau=tau,
    )
    assert C.regime_label(**base) == "instant_scratch_solvable"
    assert C.regime_label(**(base | {"interval_upper": 17})) == "budget_limited"
    assert (
        C.regime_label(**(base | {"interval_upper": 32, "restart": {4096: 0.5}}))
        == "prefix_limited"
    )
    assert (
        C.regime_label(**(base | {"interval_upper": 32, "restart": {}, "t_v_primary": None}))
        == "no_crossing_at_primary_delta"
    )
    assert (
        C.regime_label(
            event_observed=False,
            interval_upper=None,
            restart={},
            t_v_primary=None,
            terminal=True,
            tau=tau,
        )
        == "terminal_A1"
    )
    assert (
        C.regime_label(
            event_observed=False,
            interval_upper=None,
            restart={4096: 0.5},
            t_v_primary=None,
            terminal=False,
            tau=tau,
        )
        == "unsolved_hard"
    )


def test_collapse():
    assert C.collapse_regime("terminal_A1") == "terminal"
    assert C.collapse_regime("terminal_A1", "agreement") == "other"
    assert C.collapse_regime("instant_ambiguous", "agreement") == "instant"
    assert C.delta_key(0.25) == "d025" and C.delta_key(0.5) == "d050"


def test_figure_classes_are_the_readme_names_in_precedence_order():
    # one name per collapsed class, in the order of 5.3 (and of the README's list)
    assert C.FIGURE_CLASSES == (
        "instant",
        "budget-limited",
        "prefix-limited",
        "no-crossing",
        "terminal",
        "unsolved",
    )
    assert [C.collapse_regime(r) for r in C.REGIMES] == [
        "instant",
        "instant",
        "instant",
        "budget-limited",
        "prefix-limited",
        "no-crossing",
        "terminal",
        "unsolved",
        "unsolved",
    ]
    assert set(C.AGREEMENT_CLASS.values()) == {
        "instant",
        "budget-limited",
        "prefix-limited",
        "other",
        "unsolved",
    }


def test_rule_constants_come_from_the_protocol():
    # the instant bound (16 tokens), the scratch budget (B) and the budget-limited budget (4B)
    assert (DEFAULT.instant_max_upper, DEFAULT.scratch_budget, DEFAULT.budget_limited_at) == (
        16,
        1024,
        4096,
    )
    probes = {32: (4, 4), 64: (4, 4), 128: (4, 4)}
    assert not label(probes, {1024: (4, 4)})["instant"]
    wide = DEFAULT.with_overrides(instant_max_upper=32)
    assert label(probes, {1024: (4, 4)}, protocol=wide)["regime"] == "instant_scratch_solvable"
    # a small-budget protocol: B = 64 is the scratch budget, R(256) decides budget-limited
    small = DEFAULT.with_overrides(budget=64, restart_budgets=(64, 128, 256, 512))
    assert (small.scratch_budget, small.budget_limited_at) == (64, 256)
    row = label(
        grid(0, 0, 0, 0, anchors=(8, 16, 32, 48)),
        {64: (0, 4), 128: (1, 4), 256: (3, 4), 512: (4, 4)},
        protocol=small,
    )
    assert row["regime"] == "budget_limited"
    assert (
        C.regime_label(
            event_observed=True,
            interval_upper=8,
            restart={64: 0.75},
            t_v_primary=None,
            terminal=False,
            tau=0.75,
            protocol=small,
        )
        == "instant_scratch_solvable"
    )

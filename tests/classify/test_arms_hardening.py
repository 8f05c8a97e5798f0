"""Second probe arms (protocol 3.6, A2) and label hardening (appendix) on planted panels: the
targets and anchors re-probed, the first crossings and shifts, the frozen verdict, the
before/after categories and the top-up resolution counts, each from known inputs."""

from __future__ import annotations

import math

import pandas as pd
from panel_builders import panels

from breakthrough.classify.arms import a2_table, a2_verdict, arm_labels, arm_targets
from breakthrough.classify.hardening import categories, hardening_counts, topup_resolution
from breakthrough.classify.regimes import label_panels
from breakthrough.protocol import DEFAULT

TAU = DEFAULT.tau
PRIMARY = {
    # T_F = 256 (stable at 512): re-probed at 64 ... 512
    "m:a": {64: (0, 4), 128: (0, 4), 256: (4, 4), 512: (4, 4), 1024: (4, 4)},
    # T_F = 4,096 (stable at 8,192): re-probed at every anchor
    "m:b": {a: (0, 4) for a in (64, 128, 256, 512, 1024, 2048)} | {4096: (3, 4), 8192: (4, 4)},
    # T_F = 256 at both budgets
    "g:c": {64: (0, 4), 128: (1, 4), 256: (3, 4), 512: (4, 4)},
    # instant (0, 16]: never a target
    "g:d": {16: (4, 4), 32: (4, 4), 64: (4, 4)},
    # censored: never a target
    "g:e": {64: (0, 4), 128: (4, 4)},
}
SECOND = {
    "m:a": {64: (4, 4), 128: (4, 4), 256: (4, 4), 512: (4, 4)},
    "m:b": {64: (3, 4), 128: (4, 4), 256: (4, 4)}
    | {a: (4, 4) for a in (512, 1024, 2048, 4096, 8192)},
    "g:c": {64: (0, 4), 128: (2, 4), 256: (4, 4), 512: (4, 4)},
}


def test_targets_are_non_instant_events_up_to_the_stability_anchor():
    pp, _ = panels(PRIMARY)
    assert arm_targets(pp, TAU, DEFAULT) == {
        "m:a": [64, 128, 256, 512],
        "m:b": [64, 128, 256, 512, 1024, 2048, 4096, 8192],
        "g:c": [64, 128, 256, 512],
    }


def test_a2_first_crossings_shifts_and_verdict():
    p1, _ = panels(PRIMARY)
    p2, _ = panels(SECOND)
    t = a2_table(p1, p2, budget_1=1024, budget_2=4096, tau=TAU, levels={"m:b": 3}).set_index(
        "cell_id"
    )
    assert t.loc["m:a", "first_crossing_1"] == 256 and t.loc["m:a", "first_crossing_2"] == 64
    assert t.loc["m:a", "shift_tokens"] == -192 and t.loc["m:a", "shift_steps"] == -2
    assert not t.loc["m:a", "earlier_by_2b"]
    assert t.loc["m:b", "shift_tokens"] == 64 - 4096 and t.loc["m:b", "earlier_by_2b"]
    assert t.loc["m:b", "level"] == 3 and pd.isna(t.loc["m:a", "level"])
    assert t.loc["g:c", "shift_tokens"] == 0
    v = a2_verdict(t.reset_index())
    # 1 of 3 earlier by >= 2B, median shift -2 steps: neither frozen outcome
    assert (v["trajectories"], v["earlier_by_2b"], v["median_shift_steps"], v["verdict"]) == (
        3,
        1,
        -2.0,
        "inconclusive",
    )
    assert a2_verdict(t.loc[["g:c"]].reset_index())["verdict"] == "construct supported"
    assert a2_verdict(t.loc[["m:b"]].reset_index())["verdict"] == "mechanical confound"


def test_no_crossing_at_b2_has_no_shift():
    p1, _ = panels({"m:a": PRIMARY["m:a"]})
    p2, _ = panels({"m:a": {64: (0, 4), 128: (1, 4), 256: (2, 4), 512: (2, 4)}})
    t = a2_table(p1, p2, budget_1=1024, budget_2=4096, tau=TAU)
    assert pd.isna(t.loc[0, "first_crossing_2"]) and pd.isna(t.loc[0, "shift_tokens"])
    assert a2_verdict(t)["no_crossing_at_b2"] == 1


def test_arm_labels_per_budget():
    p1, _ = panels(PRIMARY)
    p2, _ = panels(SECOND)
    t = arm_labels({1024: p1, 4096: p2}, TAU).set_index(["budget", "cell_id"])
    assert t.loc[(1024, "m:a"), "t_f"] == 256 and t.loc[(4096, "m:a"), "t_f"] == 64
    assert t.loc[(4096, "m:b"), "first_crossing"] == t.loc[(4096, "m:b"), "t_f"] == 64
    assert len(t.loc[4096]) == 3 and len(t.loc[1024]) == 5


def _labels(probes, restarts, topup):
    pp, rp = panels(probes, restarts)
    return label_panels(pp, rp, protocol=DEFAULT, topup=topup)


R0 = {1024: (0, 4), 2048: (0, 4), 4096: (0, 4), 8192: (0, 4)}
HARD = {
    "m:i": {16: (4, 4), 32: (4, 4)},  # instant
    "m:j": {64: (0, 4), 128: (4, 4), 256: (4, 4)},  # interior
    # canonical event at 128 (3/4, 3/4); pooled 4/8, 4/8: the ambiguity top-up removes it
    "m:x": {64: (0, 4), 128: (4, 8, 3, 4), 256: (4, 8, 3, 4), 512: (4, 4)},
    # canonical censored with final 3/4; replicated 6/8: an A1 event
    "m:y": {64: (0, 4), 128: (0, 4), 256: (6, 8, 3, 4)},
    "g:z": {64: (0, 4), 128: (0, 4)},  # censored
}


def test_hardening_counts_before_and_after_the_topups():
    restarts = {c: R0 for c in HARD}
    before = _labels(HARD, restarts, "terminal")
    after = _labels(HARD, restarts, "terminal,ambiguous")
    assert categories(before).to_dict() == {
        "g:z": "censored",
        "m:i": "instant",
        "m:j": "interior",
        "m:x": "interior",
        "m:y": "A1 event",
    }
    assert categories(after)["m:x"] == "censored"
    counts = hardening_counts(before, after).set_index(["model", "when"])
    m_before = counts.loc[("m", "before top-ups")]
    m_after = counts.loc[("m", "after top-ups")]
    assert [m_before[c] for c in ("instant", "interior", "A1 event", "censored")] == [1, 2, 1, 0]
    assert [m_after[c] for c in ("instant", "interior", "A1 event", "censored")] == [1, 1, 1, 1]
    assert (m_after["changed"], m_after["events_removed"], m_after["events_added"]) == (1, 1, 0)
    assert counts.loc[("g", "after top-ups"), "censored"] == 1
    assert math.isnan(m_before["changed"])


def test_topup_resolution_counts_pooled_and_added_successes():
    pc = pd.DataFrame(
        [
            {"model": "m", "n": 8, "k": 2, "k_canon": 1},  # low; added 1
            {"model": "m", "n": 8, "k": 4, "k_canon": 2},  # intermediate; added 2
            {"model": "m", "n": 8, "k": 6, "k_canon": 2},  # high; added 4
            {"model": "m", "n": 8, "k": 7, "k_canon": 3},  # high; added 4
            {"model": "m", "n": 4, "k": 4, "k_canon": 4},  # not enlarged
            {"model": "g", "n": 8, "k": 5, "k_canon": 3},  # intermediate; added 2
        ]
    )
    t = topup_resolution(pc, tau=0.75, target=8, canonical=4).set_index("model")
    assert list(t.loc["m", ["cells", "low", "intermediate", "high"]]) == [4, 1, 1, 2]
    assert list(t.loc["m", [f"added_{i}" for i in range(5)]]) == [0, 1, 1, 0, 2]
    assert list(t.loc["g", ["cells", "intermediate", "added_2"]]) == [1, 1, 1]

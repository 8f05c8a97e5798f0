"""The plan of next work on hand-built panels (protocol 3.1 bisection, 3.5 top-ups, the
posterior rule) and the one `--topup` vocabulary of `bt continue` and `bt classify`."""

from __future__ import annotations

import pytest
from panel_builders import R, grid, label, panels

from breakthrough.classify import plan as P
from breakthrough.classify.regimes import budget_fit_time
from breakthrough.classify.topup import TOPUP_RULES, parse_topup, topup_rules, topup_text
from breakthrough.errors import BtError
from breakthrough.protocol import DEFAULT, Protocol


def plan(probes, restarts=None, **kw):
    pp, rp = panels({"m:p": probes}, {"m:p": restarts} if restarts else None)
    return P.plan_next(pp, rp, **kw)


def test_bisection_to_instant_two_rounds():
    p = plan(grid(4, 4, 0, 0, 0, 0, 0, 0))
    assert [(i.kind, i.anchor, i.reason, i.branches) for i in p] == [
        ("probe", 32, "bisection", range(0, 4))
    ]
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
    tf = budget_fit_time(list(probes), [k / n for k, n in probes.values()], 0.75)
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
    assert items[0].to_dict() == {
        "cell_id": "m:p",
        "kind": "probe",
        "anchor": 8192,
        "budget": 1024,
        "branches": [4, 8],
        "reason": "terminal_a1",
    }


def test_posterior_topup_plan_band():
    probes = grid(0, 1, 2, 3, 0, 0, 0, 0)
    pp, rp = panels({"m:p": probes}, {"m:p": R(0, 1, 2, 3)})
    items = P.plan_next(pp, rp, topup="terminal,posterior", band=(0.1, 0.9))
    got = {(i.kind, i.anchor, i.budget) for i in items}
    # Jeffreys P(rate ≥ .75): 1/4 → .016 (out), 2/4 → .127, 3/4 → .457 (in)
    assert got == {
        ("probe", 256, 1024),
        ("probe", 512, 1024),
        ("restart", -1, 4096),
        ("restart", -1, 8192),
    }
    assert all(i.reason == "posterior" for i in items)
    with pytest.raises(ValueError):
        P.plan_next(pp, rp, topup="sometimes")
    with pytest.raises(ValueError):
        P.plan_next(pp, rp, topup="posterior", band=(0.9, 0.1))


def test_restart_budgets_for():
    assert P.restart_budgets_for(True) == (1024,)
    assert P.restart_budgets_for(False) == (1024, 2048, 4096, 8192)


def test_topup_words_are_one_vocabulary():
    assert parse_topup("terminal,ambiguous") == ("terminal", "ambiguous")
    assert parse_topup(" ambiguous , terminal ") == ("terminal", "ambiguous")  # canonical order
    assert parse_topup("posterior") == ("posterior",)
    assert parse_topup("terminal,posterior") == ("terminal", "posterior")
    assert parse_topup("none") == ()
    assert (
        topup_text(()) == "none" and topup_text(("ambiguous", "terminal")) == "terminal,ambiguous"
    )
    assert topup_rules(["posterior"]) == ("posterior",)
    for bad in ("fixed", "", "terminal,sometimes", "ambiguous,posterior", "none,terminal"):
        with pytest.raises(BtError) as err:
            parse_topup(bad)
        assert str(err.value).startswith("--topup: ") and "\n" not in str(err.value)
    # every word names the reason of the plan items it asks for
    assert TOPUP_RULES == {
        "terminal": "terminal_a1",
        "ambiguous": "ambiguity",
        "posterior": "posterior",
    }


def test_each_topup_word_asks_for_its_rule_only():
    probes = grid(0, 1, 2, 0, 4, 0, 0, 3)  # censored, final 3/4: A1 and A5.1 at 8192
    reasons = {
        rules: {r for i in plan(probes, R(1, 0, 4, 3), topup=rules) for r in i.reason.split("+")}
        for rules in ("terminal,ambiguous", "terminal", "ambiguous", "posterior", "none")
    }
    assert reasons["terminal,ambiguous"] == {"terminal_a1", "ambiguity"}
    assert reasons["terminal"] == {"terminal_a1"}
    assert reasons["ambiguous"] == {"ambiguity"}
    assert reasons["posterior"] == {"posterior"}
    assert reasons["none"] == set()
    # bisection is not a top-up: every rule set keeps it
    assert [i.reason for i in plan(grid(4, 4, 0, 0, 0, 0, 0, 0), topup="none")] == ["bisection"]


def test_posterior_band_and_prior_come_from_the_protocol():
    narrow = DEFAULT.with_overrides(posterior_band=(0.4, 0.5))
    assert Protocol.from_dict(narrow.to_dict()) == narrow  # the band round-trips as a tuple
    probes = grid(0, 1, 2, 3, 0, 0, 0, 0)  # P(rate ≥ .75): 1/4 .016, 2/4 .127, 3/4 .457
    assert {i.anchor for i in plan(probes, topup="posterior")} == {256, 512}
    assert {i.anchor for i in plan(probes, topup="posterior", protocol=narrow)} == {512}
    # 2/4 under Beta(1, 1): .104, below a band starting at .11 (Jeffreys: .127, inside)
    band = DEFAULT.with_overrides(posterior_band=(0.11, 0.9))
    assert {i.anchor for i in plan(probes, topup="posterior", protocol=band)} == {256, 512}
    uniform = band.with_overrides(prior="uniform")
    assert {i.anchor for i in plan(probes, topup="posterior", protocol=uniform)} == {512}

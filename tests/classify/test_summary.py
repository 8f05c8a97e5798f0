"""The summary of a label table: counts, agreement, δ sensitivity, plan sizes per --topup."""

from __future__ import annotations

import json

from panel_builders import R, grid, panels

from breakthrough.classify.plan import plan_next
from breakthrough.classify.regimes import label_panels
from breakthrough.classify.summary import summarize


def test_summary_counts_and_cross_model_agreement():
    probes = {
        "g:p1": grid(0, 0, 0, 0, 0, 0, 0, 0),
        "m:p1": grid(0, 0, 0, 0, 0, 0, 0, 0),
        "g:p2": grid(0, 4, 4, 4, 4, 4, 4, 4),
        "m:p2": grid(0, 0, 0, 0, 0, 0, 0, 0),
    }
    restarts = {c: R() for c in probes} | {"m:p2": R(0, 0, 4, 4)}
    pp, rp = panels(probes, restarts)
    lab = label_panels(pp, rp)
    plans = {
        "terminal,ambiguous": plan_next(pp, rp),
        "terminal,posterior": plan_next(pp, rp, topup="terminal,posterior"),
    }
    s = summarize(lab, plans=plans, prior="jeffreys Beta(0.5, 0.5)")
    assert s["regime_counts"]["g"]["prefix_limited"] == 1
    assert s["regime_counts"]["m"]["budget_limited"] == 1
    assert s["regime_counts"]["g"]["unsolved_hard"] == 1
    assert s["cross_model_agreement"] == {
        "agree": 1,
        "compared": 2,
        "text": "1/2",
        "models": ["g", "m"],
    }
    assert s["delta_sensitivity_counts"] == {"0.25": 1, "0.5": 1, "0.75": 1}
    assert s["t_v_events_primary"][0]["t_v"] == 128
    # g:p2 event at 128 → bisection midpoint 96
    assert s["plans"]["terminal,ambiguous"]["items"] == 1
    assert s["class_counts"]["m"]["budget-limited"] == 1
    json.dumps(s)

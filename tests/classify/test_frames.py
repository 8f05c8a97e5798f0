"""`classify_frames`: labels, survival, the plans per --topup rule and the summary of one run's
frames, under the protocol it is given (the run's, never guessed from the samples)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from classify_fixture import SMALL, frames, small_spec

from breakthrough.classify.frames import classify_frames
from breakthrough.classify.settings import ClassifySettings
from breakthrough.errors import BtError


def test_classify_frames_labels_plans_summary():
    samples, cells = frames()
    res = classify_frames(samples, cells, settings=ClassifySettings(draws=20))
    reg = dict(zip(res.labels["cell_id"], res.labels["regime"], strict=True))
    assert reg == {
        "g:p1": "prefix_limited",
        "m:p1": "budget_limited",
        "g:p2": "instant_scratch_solvable",
        "m:p2": "terminal_A1",
        "g:p3": "unsolved_hard",
    }
    row = res.labels.set_index("cell_id").loc["g:p1"]
    assert row["t_f"] == 128 and row["interval_lower"] == 112 and row["t_v_d050"] == 128
    assert res.labels["regime_survival"].between(0, 1).all()
    assert res.labels.set_index("cell_id").loc["m:p2", "terminal_a1_anchor"] == 8192
    study = {
        (i.cell_id, i.kind, i.anchor, i.budget, i.reason) for i in res.plans["terminal,ambiguous"]
    }
    assert ("g:p3", "probe", 1024, 1024, "ambiguity") in study
    assert ("g:p3", "probe", 2048, 1024, "ambiguity") in study
    assert ("g:p1", "probe", 112, 1024, "ambiguity") in study
    assert ("m:p1", "restart", -1, 2048, "ambiguity") in study
    assert ("m:p1", "restart", -1, 4096, "ambiguity") in study
    assert not any(c == "m:p2" for c, *_ in study)  # already replicated to 8
    post = {(i.cell_id, i.anchor, i.budget) for i in res.plans["terminal,posterior"]}
    assert ("g:p3", 1024, 1024) not in post  # 1/4: P(rate ≥ .75) ≈ .016, outside the band
    assert res.topup == "terminal,ambiguous" and res.plan == res.plans["terminal,ambiguous"]
    s = res.summary
    assert s["regime_counts"]["g"]["prefix_limited"] == 1
    assert s["class_counts"]["m"]["terminal"] == 1
    assert s["cross_model_agreement"]["compared"] == 2
    assert s["prior"].startswith("jeffreys") and s["topup"] == "terminal,ambiguous"
    assert set(s["plans"]) == {"terminal,ambiguous", "terminal,posterior"}
    assert s["posterior_band"] == [0.1, 0.9]
    assert set(res.probe_cells.columns) >= {"cell_id", "model", "anchor", "n", "k", "p_ge_tau"}
    json.dumps(s)


def test_classify_frames_topup_words_overrides_and_errors():
    samples, cells = frames()
    res = classify_frames(
        samples, cells, settings=ClassifySettings(topup="posterior", draws=5, prior="uniform")
    )
    assert res.topup == "posterior" and res.plan == res.plans["posterior"]
    assert {r for i in res.plan for r in i.reason.split("+")} <= {"posterior", "bisection"}
    assert res.summary["prior"].startswith("uniform") and res.protocol.prior == "uniform"
    assert set(res.summary["plans"]) == {"posterior", "terminal,ambiguous", "terminal,posterior"}
    # one side of the band overrides the protocol's, the other side is kept
    res = classify_frames(
        samples, cells, settings=ClassifySettings(draws=2, band=(0.2, None), tau=0.5)
    )
    assert res.protocol.posterior_band == (0.2, 0.9) and res.summary["tau"] == 0.5
    for bad, option in (
        ({"topup": "fixed"}, "--topup"),
        ({"tau": 0}, "--tau"),
        ({"prior": "haldane"}, "--prior"),
        ({"band": (0.9, 0.1)}, "band"),
    ):
        with pytest.raises(BtError, match=option):
            classify_frames(samples, cells, settings=ClassifySettings(draws=2, **bad))


def test_classify_frames_cells_without_samples():
    samples, cells = frames()
    extra = pd.DataFrame(
        [
            {
                "cell_id": "g:p9",
                "problem_id": "p9",
                "model": "g",
                "stage": "dev",
                "level": 2,
                "subject": "x",
                "answer": "1",
                "reasoning_tokens": 10,
            }
        ]
    )
    res = classify_frames(samples, pd.concat([cells, extra]), settings=ClassifySettings(draws=5))
    # issue 29, item 9: a cell with no probe and no restart has not run its protocol: no regime
    # (it was `unsolved_hard`), listed apart and counted in the summary
    assert "g:p9" not in set(res.labels["cell_id"])
    row = res.unfinished.set_index("cell_id").loc["g:p9"]
    assert row["status"] == "not continued" and row["model"] == "g"
    assert res.summary["unfinished_counts"] == {"g": {"not continued": 1}}


def test_small_budget_run_classifies_under_its_protocol():
    # B = 64 with restarts 64 … 512: 4B = 256 is the budget-limited budget, B the scratch one
    samples, cells = frames(small_spec(), budget=64)
    res = classify_frames(samples, cells, protocol=SMALL, settings=ClassifySettings(draws=2))
    reg = dict(zip(res.labels["cell_id"], res.labels["regime"], strict=True))
    assert reg["m:p1"] == "budget_limited" and reg["g:p2"] == "instant_scratch_solvable"
    assert res.summary["protocol"]["budget_limited_at"] == 256
    assert res.summary["protocol"]["budget"] == 64
    # under the default protocol the same samples hold no probe at B = 1,024 and none of its
    # restart budgets: no cell ran that protocol, so none is labelled (issue 29, item 9)
    default = classify_frames(samples, cells, settings=ClassifySettings(draws=2))
    assert default.labels.empty and set(default.unfinished["status"]) == {"incomplete"}
    assert all("restarts at 1024" in m for m in default.unfinished["missing"])

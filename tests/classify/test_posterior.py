"""Beta posteriors of cell rates and the regime survival under posterior redraws."""

from __future__ import annotations

import pytest
from panel_builders import GRID, R, grid, panels

from breakthrough.classify.posterior import prob_rate_at_least, regime_survival, with_posterior
from breakthrough.classify.regimes import label_panels
from breakthrough.classify.settings import ClassifySettings


def test_posterior_probabilities():
    assert float(prob_rate_at_least(4, 4, 0.75)) == pytest.approx(0.8828, abs=1e-3)
    assert float(prob_rate_at_least(4, 4, 0.75, "uniform")) == pytest.approx(1 - 0.75**5)
    pp, _ = panels({"m:p": grid(0, 4)})
    w = with_posterior(pp, 0.75)
    assert w["p_ge_tau"].iloc[0] < 0.01 and w["p_ge_tau"].iloc[1] == pytest.approx(0.883, abs=1e-3)
    assert list(w["rate"]) == [0.0, 1.0]
    with pytest.raises(ValueError):
        prob_rate_at_least(4, 4, 0.75, "haldane")


def test_regime_survival_seeded_and_sensible():
    pp, rp = panels(
        {"a:x": grid(0, 0, 0, 0, 0, 0, 0, 0), "a:y": {a: (8, 8, 4) for a in GRID}},
        {"a:x": R(), "a:y": {c: (8, 8, 4) for c in (1024, 2048, 4096, 8192)}},
    )
    lab = label_panels(pp, rp)
    s1 = regime_survival(pp, rp, lab, settings=ClassifySettings(draws=50, seed=1))
    s2 = regime_survival(pp, rp, lab.iloc[::-1], settings=ClassifySettings(draws=50, seed=1))
    assert s1.sort_index().equals(s2.sort_index())
    assert s1["a:x"] > 0.9  # 0 of 4 everywhere: unsolved almost surely
    assert 0.0 <= s1["a:y"] <= 1.0

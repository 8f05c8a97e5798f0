"""The study page of a run whose confirmatory test could not be fit (issue 40 section 5): it
says so plainly, first, with the reason, never that the test ran; the forest and the sweep,
which would be empty frames, are one line each instead; the table gives no verdict where no
test ran. And the figures of `bt confirm` themselves: a "not fit" note is wrapped at word
boundaries, never cut mid-word, and a legend names only what is drawn (no t = 512 star when
t = 512 was not swept)."""

from __future__ import annotations

import json
import re

import pandas as pd

from breakthrough.report import headlines as HL
from breakthrough.signals.confirm import sweep_row
from breakthrough.signals.confirm_figures import forest, sweep

REASON = (
    "train+validation has 0 problems with class 0 and 0 with class 1 "
    "(the power gate needs 5 of each)"
)


def _unfit(endpoint="primary", variant="main", reason=REASON):
    return {
        "endpoint": endpoint,
        "variant": variant,
        "status": "not fit",
        "reason": reason,
        "test_rows": 0,
        "test_problems": 0,
        "baseline_auroc": None,
        "early_auroc": None,
        "delta_auroc": None,
        "ci": [None, None],
        "success": False,
    }


def test_the_headline_says_the_test_could_not_be_fit_and_why():
    doc = {
        "forecast_token": 512,
        "cells": {"labelled": 1, "included": 1},
        "excluded": {"short_base_run": 0, "no_base_run": 0, "rule": "r"},
        "results": [_unfit(e, v) for e in ("primary", "secondary") for v in ("main", "lf")],
    }
    h = HL.confirmatory(doc, None)
    assert h.sentences == [
        f"The confirmatory early-signal test at forecast token 512 could not be fit: {REASON}.",
        "1 of 1 labelled cells included.",
    ]
    assert h.figures == () and set(h.gaps) == {"confirmatory_forest"}
    assert h.numbers["fit"] is False
    assert h.tables["confirmatory"]["success"].isna().all()  # no test, no verdict
    # different reasons: each endpoint says its own
    doc["results"][1] = _unfit("primary", "lf", "too few test problems")
    h = HL.confirmatory(doc, None)
    assert h.sentences[0].endswith("could not be fit: no endpoint had enough data.")
    assert "Primary (lf): not fit (too few test problems)." in h.sentences
    # one endpoint fit: the test ran, and the page shows its forest
    doc["results"][0] |= {
        "status": "fit",
        "test_rows": 9,
        "test_problems": 3,
        "baseline_auroc": 0.5,
        "early_auroc": 0.6,
        "delta_auroc": 0.1,
        "ci": [-0.1, 0.3],
    }
    h = HL.confirmatory(doc, None)
    assert h.sentences[0] == (
        "Confirmatory early-signal test at forecast token 512: 1 of 1 labelled cells included."
    )
    assert h.figures == ("confirmatory_forest",) and h.gaps == {}


def test_the_real_unfit_study_page(unfit_study):
    run, out = unfit_study
    page = (out / "index.html").read_text()
    doc = json.loads((out / "headlines.json").read_text())
    conf = next(h for h in doc["headlines"] if h["key"] == "confirmatory")
    first = conf["sentences"][0]
    assert first.startswith("The confirmatory early-signal test at forecast token 512 could not")
    assert "base run reached fewer than 512 generated tokens" in conf["sentences"][1]
    assert conf["figures"] == []
    assert "no point could be fit" in conf["sentences"][2]
    item = re.search(r'<li><a href="#confirmatory">.*?</li>', page, re.S).group(0)
    assert "could not be fit" in item  # the headline list says it too
    srcs = re.findall(r'<img src="([^"]+)"', page)
    assert not {"figures/confirmatory_forest.png", "figures/prefix_sweep.png"} & set(srcs)
    assert (
        "confirmatory forest: no data because no endpoint of the confirmatory test could be fit."
        in page
    )
    assert "prefix sweep: no data because no forecast point of the sweep could be fit." in page
    section = page.split('id="confirmatory"')[1].split("</section>")[0]
    confirmatory = section.split('<table class="confirmatory">')[1].split("</table>")[0]
    assert ">no<" not in confirmatory  # no "success: no" where nothing was tested
    assert '<td class="l">not fit</td><td>no</td>' not in section  # nor in the sweep


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_a_not_fit_note_wraps_at_word_boundaries_and_the_legend_names_what_is_drawn():
    long = REASON + " and a further explanation that runs well past sixty characters"
    fig = forest([_unfit(reason=long), _unfit("secondary", reason="short")], 512)
    right = fig.axes[1]
    notes = _texts(right)
    assert [" ".join(n.split()) for n in notes] == [f"not fit: {long}", "not fit: short"]
    assert all(len(line) <= 60 for n in notes for line in n.split("\n"))
    assert right.get_legend() is None  # nothing drawn, nothing named


def _sweep_table(tokens, fit=True):
    rows = []
    for t in tokens:
        res = [
            {
                **_unfit(e),
                **(
                    {"status": "fit", "delta_auroc": 0.05, "ci": [-0.1, 0.2], "test_rows": 9}
                    if fit
                    else {}
                ),
            }
            for e in ("primary", "secondary")
        ]
        rows.append(sweep_row(t, res))
    return pd.DataFrame(rows)


def test_the_sweep_legend_has_a_star_only_when_t_512_is_drawn():
    fig = sweep(_sweep_table([128, 256]))
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert labels == ["post-hoc t", "95% CI"]
    assert "*" not in fig.axes[0].get_xlabel()
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["128", "256"]
    fig = sweep(_sweep_table([256, 512]))
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert labels == ["t = 512 (pre-registered)", "post-hoc t", "95% CI"]
    assert sweep(_sweep_table([128, 512], fit=False)).axes[1].get_legend() is None

"""`bt report study`: every headline number computed from known inputs (planted runs, planted
`bt confirm` / `bt probe` outputs) and stated in its sentence; the page, its figures and tables
on disk; what is missing named with its command; the real tiny-model run's page references only
files that exist and images that open."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from bt_cli import assert_one_line_error, run_bt
from classify_fixture import cell_spec, write_store

from breakthrough.analyses.study import study_report
from breakthrough.report import headlines as HL
from breakthrough.signals.confirm import sweep_row
from breakthrough.signals.confirm_figures import forest_figure, sweep_figure

# protocol 9.5's tables: the confirmatory result and the post-hoc sweep
RESULTS = [
    ("primary", "main", 0.8276, 0.8534, 0.0258, -0.0538, 0.1667, 33, 17),
    ("primary", "level-free", 0.9138, 0.8793, -0.0345, -0.1562, 0.0239, 33, 17),
    ("secondary", "main", 0.875, 0.7847, -0.0903, -0.2133, 0.0334, 25, 14),
    ("secondary", "level-free", 0.8403, 0.7708, -0.0695, -0.1736, 0.0556, 25, 14),
]
SWEEP = {
    128: ((-0.083, -0.281, 0.016, 34), (-0.118, -0.274, 0.048, 25)),
    256: ((0.092, -0.032, 0.384, 34), (-0.035, -0.133, 0.053, 25)),
    512: ((0.026, -0.054, 0.167, 33), (-0.090, -0.213, 0.033, 25)),
    1024: ((-0.125, -0.409, 0.0, 24), (-0.137, -0.287, 0.018, 22)),
    2048: ((-0.133, -0.364, 0.0, 13), (-0.259, -0.800, 0.0, 12)),
}


def _result(e, v, base, early, d, lo, hi, n, problems):
    return {
        "endpoint": e,
        "variant": v,
        "status": "fit",
        "reason": None,
        "test_rows": n,
        "test_problems": problems,
        "baseline_auroc": base,
        "early_auroc": early,
        "delta_auroc": d,
        "ci": [lo, hi],
        "success": lo > 0,
    }


def write_confirm(folder: Path) -> Path:
    """A `bt confirm` output folder holding the study's numbers (9.5)."""
    results = [_result(*r) for r in RESULTS]
    doc = {"forecast_token": 512, "cells": {"labelled": 178, "included": 163}, "results": results}
    folder.mkdir(parents=True)
    (folder / "confirm.json").write_text(json.dumps(doc))
    rows = []
    for t, ((d1, l1, h1, n1), (d2, l2, h2, n2)) in SWEEP.items():
        rows.append(
            sweep_row(
                t,
                [
                    _result("primary", "main", 0.5, 0.5, d1, l1, h1, n1, 1),
                    _result("secondary", "main", 0.5, 0.5, d2, l2, h2, n2, 1),
                ],
            )
        )
    table = pd.DataFrame(rows)
    deltas = [r[k] for r in rows for k in ("primary_delta", "secondary_delta")]
    zero = sum(
        r[f"{e}_ci_low"] <= 0 <= r[f"{e}_ci_high"] for r in rows for e in ("primary", "secondary")
    )
    (folder / "sweep.json").write_text(
        json.dumps(
            {
                "forecast_tokens": list(SWEEP),
                "preregistered": 512,
                "rows": rows,
                "estimates": len(deltas),
                "negative_estimates": sum(d < 0 for d in deltas),
                "ci_including_zero": int(zero),
            }
        )
    )
    forest_figure(results, 512, folder / "figures" / "confirmatory_forest.png")
    sweep_figure(table, folder / "figures" / "prefix_sweep.png")
    return folder


def write_probe(folder: Path) -> Path:
    """A `bt probe` output folder: the study's pooled / within AUROCs at t = 4 and 512."""
    table = [
        {
            "arm": "hidden",
            "score": "probe",
            "t": 4,
            "pooled": 0.849,
            "pooled_lo": 0.735,
            "pooled_hi": 0.919,
            "within_failure_weighted": 0.496,
            "within_failure_weighted_lo": 0.466,
            "within_failure_weighted_hi": 0.527,
            "within_pair_weighted": 0.515,
            "rows": 6480,
        },
        {
            "arm": "hidden",
            "score": "probe",
            "t": 512,
            "pooled": 0.547,
            "pooled_lo": 0.428,
            "pooled_hi": 0.656,
            "within_failure_weighted": 0.497,
            "within_failure_weighted_lo": 0.468,
            "within_failure_weighted_hi": 0.526,
            "within_pair_weighted": 0.499,
            "rows": 6102,
        },
        {
            "arm": "loo",
            "score": "loo",
            "t": None,
            "pooled": 0.981,
            "pooled_lo": 0.955,
            "pooled_hi": 0.991,
        },
    ]
    folder.mkdir(parents=True)
    (folder / "probe_summary.json").write_text(json.dumps({"table": table}))
    from PIL import Image

    Image.fromarray(np.full((40, 60, 3), 90, np.uint8)).save(folder / "probe_figure.png")
    return folder


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    run = write_store(root / "runs" / "a", cell_spec())
    write_probe(run / "probe")
    rep = study_report(
        [run], root / "out", confirm=write_confirm(root / "confirm"), draws=2, cell_pages=False
    )
    return run, rep


def _sentences(rep, key):
    return next(h for h in rep.headlines if h.key == key).sentences


def test_each_headline_sentence_holds_the_numbers_of_its_inputs(study):
    _, rep = study
    assert _sentences(rep, "regimes") == [
        "5 cells (3 problems × 2 models); g: 1 instant, 1 prefix-limited, 1 unsolved; "
        "m: 1 budget-limited, 1 terminal.",
        "1 of 5 cells is prefix-limited.",
    ]
    assert _sentences(rep, "tv_events") == [
        "Non-instant T_V events at the primary δ: 1: g × p1: T_F = 128, T_V = 128, max "
        "advantage 1.000 → prefix-limited."
    ]
    assert _sentences(rep, "delta_sensitivity") == [
        "δ sensitivity over 4 non-instant cells: δ = 0.25 → 1, δ = 0.5 → 1, δ = 0.75 → 1.",
        "Conservative R̂ disagreements at δ = 0.5: none (5/5 agree).",
    ]
    # p1: prefix-limited vs budget-limited, p2: instant vs terminal ("other"): no agreement
    assert _sentences(rep, "cross_model") == [
        "Collapsed cross-model agreement (g, m): 0/2 problems."
    ]
    assert _sentences(rep, "dose_response")[1].startswith(
        "m (n = 2 of 2 cells: the non-instant cells measured at every budget): 0% → 0% → 50% "
        "→ 50% at 1,024 → 2,048 → 4,096 → 8,192 (0, 0, 1, 1 of 2)"
    )
    # m:p2: A1 at the final anchor 8,192 (t + B beyond 8,192: a proxy), 6/8 against R = 0
    assert _sentences(rep, "matched_compute") == [
        "m: 1 cell with an A1 terminal event; in-grid (0): prefix > restart in 0/0, median "
        "advantage —; boundary proxies (t + B beyond 8,192; 1): 1 win, 0 ties; R(8,192) ≥ τ "
        "in 0/1; R(8,192) ≥ the prefix's pooled rate in 0/1."
    ]
    assert _sentences(rep, "topup_resolution") == [
        "m: 1 probe cell at 8 branches → 0 at ≤ 2/8, 0 intermediate, 1 high (≥ τ); the added "
        "branches alone give 0/1/2/3/4 successes in 0/0/0/1/0 cells."
    ]
    assert _sentences(rep, "label_hardening")[1] == (
        "m: instant/interior/A1-event/censored 0/0/1/1 before → 0/0/1/1 after the top-ups; "
        "labels changed on 0 of 2 trajectories; 0 events removed, 0 added."
    )
    conf = _sentences(rep, "confirmatory")
    assert conf[0] == (
        "Confirmatory early-signal test at forecast token 512: 163 of 178 labelled cells included."
    )
    assert conf[1] == (
        "Primary (main): ΔAUROC +0.026 [-0.054, +0.167] on 33 test rows (17 "
        "problems; baseline 0.828, + early 0.853) → no success."
    )
    # the paper's "8 of 10 post-hoc point estimates negative; all CIs include 0"
    assert conf[-1].endswith("8 of 10 point estimates negative; 10 of 10 CIs include 0.")
    probe = _sentences(rep, "probe_dissection")
    assert probe[0].endswith(
        "hidden probe: t = 4: pooled 0.849 [0.735, 0.919], within "
        "(failure-weighted) 0.496 [0.466, 0.527]; t = 512: pooled 0.547 "
        "[0.428, 0.656], within (failure-weighted) 0.497 [0.468, 0.526]."
    )
    assert probe[1].endswith("LOO pass-rate reference pooled 0.981 [0.955, 0.991].")


def test_the_page_figures_tables_and_missing_items(study):
    run, rep = study
    out = rep.out_dir
    page = (out / "index.html").read_text()
    for h in rep.headlines:
        for s in h.sentences:
            assert (
                s.replace("&", "&amp;")
                .replace("'", "&#39;")
                .replace(">", "&gt;")
                .replace("<", "&lt;")
                in page
            ), s
    srcs = re.findall(r'<img src="([^"]+)"', page)
    assert sorted(srcs) == sorted(f"figures/{n}.png" for n in rep.figures)
    assert {
        "regime_map",
        "swimmer",
        "label_hardening",
        "confirmatory_forest",
        "prefix_sweep",
        "probe_dissection",
        "matched_compute",
        "topup_resolution",
        "dose_response",
    } <= set(rep.figures)
    assert "budget_falsification" not in rep.figures  # no second arm in this run
    for p in rep.figures.values():
        assert p.stat().st_size > 100
    for href in re.findall(r'href="(?!data:)([^"#]+)"', page):
        assert (out / href).exists(), href
    names = {p.name for p in rep.tables}
    for t in (
        "regime_counts",
        "delta_sensitivity",
        "conservative_agreement",
        "cross_model_agreement",
        "dose_response",
        "matched_compute",
        "topup_resolution",
        "label_hardening",
        "tv_events",
        "confirmatory",
        "forecast_sweep",
        "probe_dissection",
    ):
        assert {f"{t}.csv", f"{t}.parquet"} <= names, t
    assert pd.read_csv(out / "tables" / "matched_compute.csv").loc[0, "proxy_wins"] == 1
    assert len(pd.read_parquet(out / "tables" / "forecast_sweep.parquet")) == 5
    missing = {m.what: m.command for m in rep.missing}
    # the fixture's target trajectory has no base trace, so `--add-budget 4096` would do
    # nothing: the page says why and names no command (it named that command before)
    a2 = next(m for m in rep.missing if m.what == "continuation-budget falsification (3.6, A2)")
    assert a2.command.startswith("none for these runs"), a2
    assert "with a base trace and room for B2=4096" in a2.why, a2
    assert not any("confirmatory" in w or "probe" in w for w in missing)
    assert "--add-budget 4096" not in page
    doc = json.loads((out / "headlines.json").read_text())
    assert [h["key"] for h in doc["headlines"]] == [h.key for h in rep.headlines]
    assert not list(out.rglob("*.tmp"))


def test_matched_compute_in_grid_wins_median_proxies_and_matches():
    rows = [
        (1024, 0.3, False, 0.875, 1.0),
        (2048, 0.5, False, 0.75, 0.25),
        (4096, -0.1, False, 0.75, 0.75),
        (8192, 0.25, True, 0.75, 0.5),
        (8192, 0.0, True, 1.0, 1.0),
    ]
    labels = pd.DataFrame(
        [
            {
                "cell_id": f"m:{i}",
                "model": "ministral3-3b",
                "problem_id": str(i),
                "terminal_a1_anchor": t,
                "terminal_a1_advantage": a,
                "terminal_a1_proxy": p,
                "terminal_a1_rate": rate,
                "R_8192": r,
            }
            for i, (t, a, p, rate, r) in enumerate(rows)
        ]
    )
    h = HL.matched_compute(labels, (1024, 2048, 4096, 8192), 0.75)
    assert h.sentences == [
        "Ministral-3 3B: 5 cells with an A1 terminal event; in-grid (3): prefix > restart in "
        "2/3, median advantage +0.30; boundary proxies (t + B beyond 8,192; 2): 1 win, 1 tie; "
        "R(8,192) ≥ τ in 3/5; R(8,192) ≥ the prefix's pooled rate in 3/5."
    ]


def test_dose_response_counts_decreases_and_reversals():
    labels = pd.DataFrame(
        [
            {
                "model": "gemma4-e4b",
                "instant": False,
                "R_1024": 0.0,
                "R_2048": 0.75,
                "R_4096": 0.5,
                "R_8192": 1.0,
            },  # a decrease and a reversal
            {
                "model": "gemma4-e4b",
                "instant": False,
                "R_1024": 0.0,
                "R_2048": 0.25,
                "R_4096": 0.75,
                "R_8192": 0.75,
            },
            {
                "model": "gemma4-e4b",
                "instant": True,
                "R_1024": 1.0,
                "R_2048": None,
                "R_4096": None,
                "R_8192": None,
            },
        ]
    )
    h = HL.dose_response(labels, (1024, 2048, 4096, 8192), 0.75)
    assert h.sentences == [
        "Gemma-4 E4B (n = 2 of 3 cells: the non-instant cells measured at every budget; 1 "
        "instant cell left out): 0% → 50% → 50% → 100% at 1,024 → 2,048 → 4,096 → 8,192 "
        "(0, 1, 1, 2 of 2); 1 of 2 curves decrease between consecutive budgets, 1 cross back "
        "below τ."
    ]


def test_a2_sentence_and_missing_items_without_data():
    table = pd.DataFrame([{"model": "m", "first_crossing_1": 256, "first_crossing_2": 256}])
    h = HL.a2(
        table,
        {
            "4096": {
                "trajectories": 8,
                "earlier_by_2b": 0,
                "no_crossing_at_b2": 0,
                "median_shift_steps": 0.0,
                "verdict": "construct supported",
                "budget_1": 1024,
            }
        },
    )
    assert h.sentences == [
        "8 trajectories re-probed at B = 4,096 beside B = 1,024: 0/8 first "
        "crossings moved earlier by ≥ 2,048 tokens, 0 without a crossing at "
        "B = 4,096; median shift +0.0 anchor steps → construct supported."
    ]
    assert HL.confirmatory(None, None) is None and HL.probe_dissection({}) is None
    assert HL.cross_model(pd.DataFrame([{"model": "m", "problem_id": "p", "regime": "x"}])) is None


def test_real_run_study_page_references_only_files_that_exist(studied):
    from PIL import Image

    run, out = studied
    page = (out / "index.html").read_text()
    srcs = re.findall(r'<img src="([^"]+)"', page)
    assert "figures/budget_falsification.png" in srcs and "figures/swimmer.png" in srcs
    for src in srcs:
        with Image.open(out / src) as img:
            assert img.size[0] > 200 and img.size[1] > 100, src
    for href in re.findall(r'href="(?!data:)([^"#]+)"', page):
        assert (out / href).exists(), href
    doc = json.loads((out / "headlines.json").read_text())
    a2 = next(h for h in doc["headlines"] if h["key"] == "a2")
    assert a2["sentences"][0].startswith("1 trajectory re-probed at B = 32 beside B = 8")
    assert a2["sentences"][0].endswith("construct supported.")
    assert (out / "classify" / "index.html").is_file()


def test_study_cli_writes_the_page_and_refuses_a_confirm_folder_without_results(tmp_path):
    from typer.testing import CliRunner

    from breakthrough.cli import app

    run = write_store(tmp_path / "runs" / "a", cell_spec())
    proc = run_bt("report", "study", run, "--confirm", tmp_path / "nothing")
    assert_one_line_error(proc, 2, "--confirm", "confirm.json")
    assert not (run / "study").exists()
    res = CliRunner().invoke(app, ["report", "study", str(run), "--no-cell-pages", "--draws", "0"])
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "Regime map (9.1): 5 cells (3 problems × 2 models)" in said
    assert "missing: continuation-budget falsification (3.6, A2): none for these runs" in said
    assert (run / "study" / "index.html").is_file()
    assert not (run / "study" / "classify" / "cells").exists()

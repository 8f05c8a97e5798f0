"""`bt confirm` through the installed console script on a real run store: `bt signals` and
`bt classify` write its inputs, it writes confirm.json / confirm.csv; a missing input or a bad
option is one line, a non-zero exit and nothing written."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from bt_cli import assert_one_line_error, bt_in_process, run_bt

from breakthrough.classify.settings import ClassifySettings
from breakthrough.errors import BtError
from breakthrough.protocol import DEFAULT
from breakthrough.signals.confirm import hash_splits
from breakthrough.store import RunStore, SampleRecord
from breakthrough.tasks.grade import Grade

PROBLEMS, TOKENS, SHORT = 30, 80, ("math_003", "math_017")


def _grade(ok: bool) -> Grade:
    return Grade(
        correct=ok,
        status="correct" if ok else "wrong",
        method="numeric",
        grader="math",
        version="t",
    )


def write_run(run):
    """One model × PROBLEMS cells: a graded, instrumented base run each (TOKENS tokens; the
    SHORT problems' only 40) whose surprisal decides its success, and 4 restarts at 4,096."""
    rng = np.random.default_rng(7)
    pids = [f"math_{i:03d}" for i in range(PROBLEMS)]
    split_of = hash_splits(pids, 3)
    recs, grades = [], []
    with RunStore(run, create=True) as store:
        # restarts at 4,096 only: the run's protocol says so, so every cell ran its protocol
        # (a cell missing owed restart budgets would get no label: classify.completeness)
        store.update_manifest(
            {
                "protocol": DEFAULT.with_overrides(restart_budgets=(4096,)).to_dict(),
                "model_id": "tiny",
                "cohort_digest": "fixture",
            }
        )
        store.add_cells(
            [
                {
                    "cell_id": f"tiny:{p}",
                    "model": "tiny",
                    "prompt_ids": [1, 2, 3],
                    "item": {
                        "id": p,
                        "family": "math",
                        "stage": "t",
                        "answer": "1",
                        "problem": f"Find $x$ if $x + {i} = {2 * i}$.",
                        "level": 1 + i % 5,
                        "subject": "Algebra",
                        "split": split_of[p],
                    },
                }
                for i, p in enumerate(pids)
            ]
        )
        for i, p in enumerate(pids):
            n = 40 if p in SHORT else TOKENS
            hard = i % 2 == 1
            lp = -(rng.random(n) * 0.5 + (2.0 if hard else 0.2)).astype(np.float32)
            sig = {
                k: rng.random(n).astype(np.float32)
                for k in (
                    "normalized_entropy",
                    "top1_top2_probability_margin",
                    "successive_js_divergence",
                    "successive_kl_divergence",
                )
            }
            recs.append(
                SampleRecord(
                    cell_id=f"tiny:{p}",
                    kind="base",
                    anchor=-1,
                    budget=0,
                    branch=0,
                    seed=11,
                    prefix_len=0,
                    token_ids=np.arange(n, dtype=np.int32),
                    text="x",
                    finish_reason="eos",
                    logprobs=lp,
                    entropies=rng.random(n).astype(np.float32),
                    signals=sig,
                )
            )
            grades.append(_grade(not hard))
            for b in range(4):
                recs.append(
                    SampleRecord(
                        cell_id=f"tiny:{p}",
                        kind="restart",
                        anchor=-1,
                        budget=4096,
                        branch=b,
                        seed=b,
                        prefix_len=0,
                        token_ids=np.array([1, 2], np.int32),
                        text="x",
                        finish_reason="eos",
                    )
                )
                grades.append(_grade(b < (i % 5)))
        store.add_samples(recs, grades, reasoning_tokens={f"tiny:{p}": TOKENS for p in pids})
    return run


@pytest.fixture
def run(tmp_path):
    return write_run(tmp_path / "run")


def test_missing_signals_is_one_line_and_writes_nothing(run):
    proc = run_bt("confirm", run)
    assert_one_line_error(proc, 2, "signals.parquet", f"bt signals {run}")
    assert not (run / "confirm").exists()


@pytest.mark.heavy
def test_confirm_on_a_real_run_writes_json_and_csv(run):
    # `bt signals` and `bt classify` make confirm's inputs (setup: in this process); every
    # `bt confirm` is the installed script
    bt_in_process("signals", run, "--window", "64")
    # refusals first: no labels yet, summaries over another window, a bad option
    assert_one_line_error(
        run_bt("confirm", run, "--forecast-token", "64"), 2, "labels.parquet", "bt classify"
    )
    assert_one_line_error(
        run_bt("confirm", run),
        2,
        "first 64 tokens",
        "--forecast-token 512",
        "bt signals RUN --window 512",
    )
    assert_one_line_error(run_bt("confirm", run, "--draws", "0"), 2, "--draws")
    assert not (run / "confirm").exists()

    bt_in_process("classify", run, "--no-cell-pages")
    proc = run_bt("confirm", run, "--forecast-token", "64", "--draws", "200")
    assert proc.returncode == 0, proc.stderr
    out = run / "confirm"
    report = json.loads((out / "confirm.json").read_text())
    assert report["forecast_token"] == 64 and report["splits"]["source"] == "cohort"
    assert report["cells"]["labelled"] == PROBLEMS
    assert report["cells"]["included"] == report["cells"]["problems"] == PROBLEMS - 2
    assert sum(report["cells"]["included_by_split"].values()) == PROBLEMS - 2
    assert report["excluded"]["short_base_run"] == 2 and report["excluded"]["no_base_run"] == 0
    assert report["endpoints"]["secondary_restart_budget"] == 4096
    results = {(r["endpoint"], r["variant"]): r for r in report["results"]}
    assert list(results) == [
        (e, v) for e in ("primary", "secondary") for v in ("main", "level-free")
    ]
    primary = results[("primary", "main")]
    assert primary["status"] == "fit", primary["reason"]
    assert primary["test_rows"] == sum(primary["class_counts"]) > 0
    assert primary["trainval_rows"] + primary["test_rows"] == PROBLEMS - 2
    assert primary["skipped_draws"] is not None and primary["draws"] == 200
    # the base run's surprisal decides its success: out of fold, the summaries find it
    assert primary["oof_auroc"]["early_blocks"] > 0.9 > primary["oof_auroc"]["baseline"]
    table = pd.read_csv(out / "confirm.csv")
    assert list(table.endpoint) == ["primary", "primary", "secondary", "secondary"]
    assert table.loc[0, "early_auroc"] == pytest.approx(primary["early_auroc"])
    assert "primary" in proc.stdout and "wrote" in proc.stdout
    assert (out / "figures" / "confirmatory_forest.png").stat().st_size > 1000  # its forest
    assert not list(out.glob("*.tmp"))


@pytest.mark.heavy
def test_forecast_token_sweep_in_one_call(run):
    """`--forecast-token 32,64`: one row per t, each t's results beside it, the figures; the
    summaries computed from the store at t = 64 give what `bt signals --window 64` gives."""
    from breakthrough.analyses.classify_run import classify_runs
    from breakthrough.analyses.confirm import base_signals
    from breakthrough.signals.confirm import parse_forecast_tokens
    from breakthrough.signals.run_signals import run_signals

    for bad, why in (("32,x", "integers"), ("64,64", "repeated"), ("1,64", "at least 2")):
        with pytest.raises(BtError, match=why):
            parse_forecast_tokens(bad)
    classify_runs([run], cell_pages=False, settings=ClassifySettings(draws=2))
    proc = run_bt("confirm", run, "--forecast-token", "64,32", "--draws", "20")
    assert proc.returncode == 0, proc.stderr
    out = run / "confirm"
    sweep = pd.read_csv(out / "sweep.csv")
    assert list(sweep["forecast_token"]) == [32, 64] and not sweep["preregistered"].any()
    for t in (32, 64):
        rep = json.loads((out / f"t_{t}" / "confirm.json").read_text())
        assert rep["forecast_token"] == t
        prim = next(
            r for r in rep["results"] if (r["endpoint"], r["variant"]) == ("primary", "main")
        )
        row = sweep[sweep["forecast_token"] == t].iloc[0]
        assert row["primary_n"] == prim["test_rows"] and row["primary_status"] == prim["status"]
        if prim["status"] == "fit":
            assert row["primary_delta"] == pytest.approx(prim["delta_auroc"])
            assert row["primary_ci_low"] == pytest.approx(prim["ci"][0])
    # the base runs hold 80 tokens (2 hold 40): at t = 64 the 2 short ones are excluded
    assert (
        json.loads((out / "t_64" / "confirm.json").read_text())["excluded"]["short_base_run"] == 2
    )
    assert (
        json.loads((out / "t_32" / "confirm.json").read_text())["excluded"]["short_base_run"] == 0
    )
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["forecast_tokens"] == [32, 64] and len(doc["rows"]) == 2
    for fig in ("prefix_sweep", "confirmatory_forest"):
        assert (out / "figures" / f"{fig}.png").stat().st_size > 1000
    assert "forecast-point sweep" in proc.stdout
    # the summaries the sweep computes from the store are `bt signals --window 64`'s
    path, _ = run_signals(run, window=64)
    table = pd.read_parquet(path)
    table = table[table["kind"] == "base"].set_index("sample_id").sort_index()
    swept = base_signals(run, 64).set_index("sample_id").sort_index()
    pd.testing.assert_frame_equal(
        swept[table.columns.intersection(swept.columns)],
        table[table.columns.intersection(swept.columns)],
        check_dtype=False,
    )

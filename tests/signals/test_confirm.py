"""Protocol 9.5's confirmatory test on synthetic cells whose answer is planted: a summary that
decides the outcome beyond the difficulty columns is found (CI above 0), pure noise is not, the
bootstrap resamples problems, the level-free variant has no level, short base runs are excluded
and counted, and --split-seed assigns splits deterministically by problem."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

from breakthrough.errors import BtError
from breakthrough.signals.confirm import (
    clustered_delta,
    evaluate,
    feature_columns,
    feature_table,
    hash_splits,
    problem_text_counts,
)
from breakthrough.signals.summaries import FROZEN_SUMMARIES

RUN = "r"
SUBJECTS = ("Algebra", "Geometry", "Number Theory")


def world(
    outcome: str,
    *,
    n_problems: int = 60,
    models=("g", "m"),
    seed: int = 0,
    short: frozenset = frozenset(),
    no_base: frozenset = frozenset(),
    splits: bool = True,
    restarts: dict | None = None,
):
    """(signals, labels, items) of n_problems × models cells. Summaries, problem texts and
    subjects are random; `outcome` decides the base run's success: "summary" (surprisal_mean
    > 0: only the early block knows), "level" (level >= 3: the baseline knows), "noise-level"
    (mostly by level, some chance; the summaries know nothing). `short` cells' base runs stop
    at 300 tokens; `no_base` cells have no base run; R_4096 is random unless `restarts` gives
    other columns."""
    rng = np.random.default_rng(seed)
    pids = [f"math_{i:03d}" for i in range(n_problems)]
    split_of = hash_splits(pids, 11)
    sig, lab, items = [], [], {}
    sid = 0
    for i, pid in enumerate(pids):
        level = 1 + i % 5
        words = " ".join(str(int(x)) if rng.random() < 0.4 else "x" for x in rng.integers(0, 99, 8))
        text = f"Solve {words} = {int(rng.integers(0, 9))}" + " + y" * int(rng.integers(0, 4))
        subject = SUBJECTS[int(rng.integers(0, 3))]
        for m in models:
            cid = f"{m}:{pid}"
            s = {k: float(rng.normal()) for k in FROZEN_SUMMARIES}
            if outcome == "summary":
                ok = s["surprisal_mean"] > 0
            elif outcome == "level":
                ok = level >= 3
            else:
                ok = rng.random() < (0.85 if level <= 3 else 0.25)
            item = {
                "id": pid,
                "family": "math",
                "problem": text,
                "level": level,
                "subject": subject,
                "answer": "1",
            }
            if splits:
                item["split"] = split_of[pid]
            items[(RUN, cid)] = item
            row = {
                "run": RUN,
                "cell_id": cid,
                "problem_id": pid,
                "model": m,
                "level": level,
                "subject": subject,
                "instant": False,
                "regime": "unsolved_hard",
            }
            row |= (
                restarts(i, m)
                if restarts
                else {"R_1024": 0.0, "R_4096": float(rng.integers(0, 5)) / 4}
            )
            lab.append(row)
            if cid in no_base:
                continue
            sid += 1
            sig.append(
                {
                    "run": RUN,
                    "sample_id": sid,
                    "cell_id": cid,
                    "kind": "base",
                    "finish_reason": "eos",
                    "observed_token_count": 300 if cid in short else 512,
                    "correct": bool(ok),
                    **s,
                }
            )
            sid += 1  # a probe of the same cell: never a feature row
            sig.append(
                {
                    "run": RUN,
                    "sample_id": sid,
                    "cell_id": cid,
                    "kind": "probe",
                    "finish_reason": "eos",
                    "observed_token_count": 512,
                    "correct": not ok,
                    **{k: 0.0 for k in FROZEN_SUMMARIES},
                }
            )
    return pd.DataFrame(sig), pd.DataFrame(lab), items


def test_problem_text_counts_by_hand():
    c = problem_text_counts("If $x + 2 = -3.5$ and $y=4$, find x*y.")
    assert c == {
        "problem_character_count": 38.0,
        "problem_token_proxy_count": 10.0,
        "problem_numeric_count": 3.0,  # 2, -3.5, 4
        "problem_operator_count": 5.0,  # + = - = *
        "problem_equation_count": 2.0,
    }
    assert all(np.isnan(v) for v in problem_text_counts(None).values())


def test_a_planted_summary_beats_the_difficulty_baseline():
    ft = feature_table(*world("summary"), forecast_token=512)
    assert len(ft.table) == 120 and ft.split_source == "cohort"
    r = evaluate(ft.table, "primary", draws=500)
    assert r["status"] == "fit", r["reason"]
    assert r["test_rows"] == 2 * r["test_problems"] and r["test_problems"] == 12
    assert sum(r["class_counts"]) == r["test_rows"] and min(r["class_counts"]) > 0
    assert r["early_auroc"] > 0.9 and r["baseline_auroc"] < 0.8
    assert r["delta_auroc"] == pytest.approx(r["early_auroc"] - r["baseline_auroc"])
    assert 0 < r["ci"][0] <= r["delta_auroc"] <= r["ci"][1]
    assert r["success"] is True
    assert r["oof_auroc"]["early_blocks"] > r["oof_auroc"]["baseline"]
    assert set(r["per_model"]) == {"g", "m"} and sum(v["n"] for v in r["per_model"].values()) == 24
    assert r["trainval_rows"] == 96 and r["trainval_problems"] == 48


def test_noise_summaries_do_not_succeed():
    ft = feature_table(*world("noise-level", seed=3), forecast_token=512)
    for endpoint in ("primary", "secondary"):
        r = evaluate(ft.table, endpoint, draws=500)
        assert r["status"] == "fit", r["reason"]
        assert r["ci"][0] <= 0 and r["success"] is False


def test_the_level_free_variant_drops_level():
    base, early = feature_columns("level-free")
    assert "level" not in base + early and "category" in base
    assert feature_columns("main")[0] == ["dataset", "level", *base[1:]]
    ft = feature_table(*world("level"), forecast_token=512)
    main = evaluate(ft.table, "primary", "main", draws=50)
    free = evaluate(ft.table, "primary", "level-free", draws=50)
    assert "level" in main["columns"]["baseline"] and "level" not in free["columns"]["baseline"]
    assert main["baseline_auroc"] > 0.95  # the outcome is the level
    assert free["baseline_auroc"] < 0.8  # without it the baseline is near chance


def test_the_bootstrap_resamples_problems_not_cells():
    # Problem a: three successes; problem b: three failures. Resampling the two problems gives
    # a one-class draw whenever both picks are the same problem (half the draws); resampling
    # the six cells would give one in 32.
    pid = np.array(["a", "a", "a", "b", "b", "b"])
    y = np.array([1, 1, 1, 0, 0, 0])
    s = np.array([0.9, 0.8, 0.7, 0.3, 0.2, 0.1])
    ci = clustered_delta(pid, y, s, s[::-1].copy(), draws=2000, seed=1)
    assert ci.draws == 2000 and 850 <= ci.skipped <= 1150
    # both problems mixed: every draw has both classes, none is skipped
    y2 = np.array([1, 0, 1, 0, 1, 0])
    assert clustered_delta(pid, y2, s, s, draws=300, seed=1).skipped == 0


def test_short_and_missing_base_runs_are_excluded_and_counted():
    short = frozenset({"g:math_000", "m:math_000", "g:math_007"})
    sig, lab, items = world("summary", short=short, no_base=frozenset({"m:math_009"}))
    ft = feature_table(sig, lab, items, forecast_token=512)
    assert ft.excluded["short_base_run"] == 3 and ft.excluded["no_base_run"] == 1
    want = Counter(items[(RUN, c)]["split"] for c in short)
    assert ft.excluded["short_base_run_by_split"] == {
        s: want.get(s, 0) for s in ("train", "validation", "test")
    }
    assert len(ft.table) == 120 - 4
    assert not set(ft.table["cell_id"]) & (short | {"m:math_009"})
    # the probes of a cell are never its features: the base run's summaries are
    row = ft.table.set_index("cell_id").loc["g:math_001"]
    assert (
        row["surprisal_mean"]
        == sig[(sig.cell_id == "g:math_001") & (sig.kind == "base")]["surprisal_mean"].item()
    )
    # a lower forecast point keeps the 300-token runs
    assert feature_table(sig, lab, items, forecast_token=256).excluded["short_base_run"] == 0


def test_split_seed_is_deterministic_and_problem_wise():
    ids = [f"math_{i:03d}" for i in range(89)]
    a = hash_splits(ids, 5)
    assert a == hash_splits(list(reversed(ids)) + ids[:3], 5)  # order and repeats don't matter
    assert Counter(a.values()) == {"train": 54, "validation": 18, "test": 17}
    assert a != hash_splits(ids, 6)
    sig, lab, items = world("summary", splits=False)
    with pytest.raises(BtError, match="--split-seed"):
        feature_table(sig, lab, items)
    ft = feature_table(sig, lab, items, split_seed=5)
    assert ft.split_source == "hash seed 5"
    per_problem = ft.table.groupby("problem_id")["split"].nunique()
    assert (per_problem == 1).all()  # both models' cells of a problem share its split
    assert dict(zip(ft.table.problem_id, ft.table.split, strict=True)) == hash_splits(
        lab.problem_id, 5
    )


def test_cohort_rows_that_disagree_on_a_split_are_refused():
    sig, lab, items = world("summary")
    items[(RUN, "m:math_004")] = items[(RUN, "m:math_004")] | {"split": "test"}
    items[(RUN, "g:math_004")] = items[(RUN, "g:math_004")] | {"split": "train"}
    with pytest.raises(BtError, match="math_004.*disagree"):
        feature_table(sig, lab, items)


def test_too_few_problems_is_not_fit_with_a_reason():
    ft = feature_table(*world("summary", n_problems=8), forecast_token=512)
    r = evaluate(ft.table, "primary", draws=50)
    assert r["status"] == "not fit" and "power gate" in r["reason"]
    assert r["success"] is False and r["delta_auroc"] is None


def test_secondary_reads_r4096_on_non_instant_cells_else_the_largest_restart():
    sig, lab, items = world("summary")
    lab.loc[:9, "instant"] = True
    ft = feature_table(sig, lab, items)
    assert ft.secondary_budget == 4096 and not ft.notes
    t = ft.table.set_index("cell_id")
    assert t.loc[lab.cell_id[:10], "secondary"].isna().all()
    rest = lab.iloc[10:].set_index("cell_id")
    assert (t.loc[rest.index, "secondary"] == (rest["R_4096"] >= 0.75).astype(float)).all()
    sig, lab, items = world(
        "summary", restarts=lambda i, m: {"R_64": 0.5, "R_512": (i % 4) / 3, "R_4096": None}
    )
    ft = feature_table(sig, lab, items)
    assert ft.secondary_budget == 512 and "R(512)" in ft.notes[0]

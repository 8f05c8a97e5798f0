"""The A1 terminal rules of protocol 3.5 / 5.3 (issue 14): A1 branches are annotated, never
pooled into p̂; A1 candidacy is decided on the canonical labels; posterior redraws only give
labels a cell can have; an ungraded branch does not erase a terminal event. Each example of the
issue is one test, with its exact numbers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from bt_cli import run_bt
from classify_fixture import write_store
from panel_builders import R, grid, label, na, panels

from breakthrough.classify import plan as P
from breakthrough.classify import regimes as C
from breakthrough.classify.frames import classify_frames
from breakthrough.classify.panels import probe_panel, restart_panel, rows_by_cell
from breakthrough.classify.posterior import regime_draws, regime_survival
from breakthrough.classify.settings import ClassifySettings
from breakthrough.protocol import DEFAULT

ZERO_R = R(0, 0, 0, 0)


# ---------------------------------------------------------------------------------------------
# deviation 1: A1 branches are not pooled into p̂


def test_a1_branches_do_not_move_p_hat_at_the_final_anchor():
    # 4096: 0/4, 8192: 4/4 plus A1 1/4 → p̂(8192) stays 4/4: max adv 1.0 (was 0.625)
    row = label({4096: (0, 4), 8192: (5, 8, 4)}, ZERO_R)
    assert row["max_advantage"] == 1.0
    assert row["final_rate"] == 1.0 and row["final_n"] == 8
    # the replication is the annotation: 5/8 < 6/8, no terminal event
    assert row["terminal_candidate"] and na(row["terminal_a1_anchor"])
    assert row["regime"] == "unsolved_hard"
    pp, rp = panels({"m:p": {4096: (0, 4), 8192: (5, 8, 4)}}, {"m:p": ZERO_R})
    cur = C.cell_curves(pp, rp).set_index("anchor")
    assert (cur.loc[8192, "n"], cur.loc[8192, "k"], cur.loc[8192, "adv"]) == (4, 4, 1.0)


def test_a1_with_a51_topup_is_prefix_limited_as_the_protocol():
    # 2048: 0/4, 4096: 2/4 topped to 6/8, 8192: 4/4 + A1 (1/4) → prefix_limited, T_V = 4096
    probes = {2048: (0, 4), 4096: (6, 8, 2), 8192: (5, 8, 4)}
    row = label(probes, ZERO_R)
    assert row["regime"] == "prefix_limited" and row["t_v"] == 4096 and row["t_f"] == 4096
    # the study's dev/supplement labels (canonical 4-branch summaries): no event at 4096
    dev = label(probes, ZERO_R, topup="terminal")
    assert dev["regime"] == "unsolved_hard" and na(dev["t_f"])


def test_bt_planner_produces_the_a1_plus_a51_input():
    # the canonical panel of the example: the default plan asks for exactly the two top-ups
    items = {
        (i.anchor, i.reason, i.branches)
        for i in P.plan_next(
            *panels({"m:p": {2048: (0, 4), 4096: (2, 4), 8192: (4, 4)}}, {"m:p": ZERO_R})
        )
    }
    assert items == {(4096, "ambiguity", range(4, 8)), (8192, "terminal_a1", range(4, 8))}


def test_zero_and_four_of_four_cells_stay_at_four_under_a51():
    # extra branches on a 0/4 or 4/4 cell (a rule not in force added them) are not counted
    row = label({1024: (2, 8, 0), 2048: (6, 8, 4), 4096: (8, 8, 4)}, ZERO_R)
    assert row["t_f"] == 2048  # p̂ = 0, 1, 1
    # under the posterior rule a 4/4 cell is enlarged (P(rate ≥ .75 | 4/4) = .88), so pooled
    post = label(
        {1024: (2, 8, 0), 2048: (6, 8, 4), 4096: (8, 8, 4)}, ZERO_R, topup="terminal,posterior"
    )
    assert post["t_f"] == 2048 and post["max_advantage"] == 1.0
    post = label(
        {1024: (0, 4), 2048: (5, 8, 4), 4096: (4, 8, 4)}, ZERO_R, topup="terminal,posterior"
    )
    assert not post["event_observed"]  # 5/8 and 4/8 pooled


# ---------------------------------------------------------------------------------------------
# deviation 2: A1 candidacy on the canonical labels


def test_candidacy_uses_canonical_labels_not_the_pooled_ones():
    # 4096 and 8192 both canonical 3/4 (an event), pooled 5/8 and 6/8, R = 0 → unsolved_hard
    row = label({4096: (5, 8, 3), 8192: (6, 8, 3)}, ZERO_R)
    assert row["regime"] == "unsolved_hard"
    assert not row["terminal_candidate"] and na(row["terminal_a1_anchor"])
    assert not C.terminal_candidate([(4096, 8, 5, 4, 3), (8192, 8, 6, 4, 3)], 0.75)
    # and the plan asks for no A1 replication of a trajectory with a canonical event
    items = P.plan_next(
        *panels({"m:p": {4096: (3, 4), 8192: (3, 4)}}, {"m:p": ZERO_R}), topup="terminal"
    )
    assert all(i.reason != "terminal_a1" for i in items)


def test_terminal_event_is_annotated_even_when_a_pooled_event_wins():
    # canonical 2/4 then 4/4: A1 candidate, replicated 8/8; A5.1 pools 4096 to 6/8 → T_F event
    row = label({2048: (0, 4), 4096: (6, 8, 2), 8192: (8, 8, 4)}, ZERO_R)
    assert row["regime"] == "prefix_limited"
    assert row["terminal_a1_anchor"] == 8192 and row["terminal_a1_rate"] == 1.0


# ---------------------------------------------------------------------------------------------
# deviation 3: posterior redraws apply the A1 candidacy


def _draws(probes, restarts, draws=400, **kw):
    pp, rp = panels({"m:p": probes}, {"m:p": restarts})
    return regime_draws(
        "m:p",
        rows_by_cell(pp, "anchor").get("m:p", []),
        rows_by_cell(rp, "budget").get("m:p", []),
        draws=draws,
        **kw,
    )


def test_non_candidate_never_draws_terminal():
    # unsolved_hard with final 6/8, canonical 2/4: no A1 candidate (bt drew 44 % terminal_A1)
    probes = grid(0, 0, 0, 0, 0, 0, 0) | {8192: (6, 8, 2)}
    assert label(probes, ZERO_R)["regime"] == "unsolved_hard"
    got = _draws(probes, ZERO_R)
    assert "terminal_A1" not in got
    pp, rp = panels({"m:p": probes}, {"m:p": ZERO_R})
    lab = C.label_panels(pp, rp)
    assert (
        regime_survival(pp, rp, lab, settings=ClassifySettings(draws=400))["m:p"]
        == got.count("unsolved_hard") / 400
    )
    # the control: a replicated candidate at 6/8 (canonical 4/4) does draw terminal_A1
    cand = grid(0, 0, 0, 0, 0, 0, 0) | {8192: (6, 8, 4)}
    assert label(cand, ZERO_R)["regime"] == "terminal_A1"
    assert 0.2 < _draws(cand, ZERO_R).count("terminal_A1") / 400 < 0.9


# ---------------------------------------------------------------------------------------------
# an ungraded branch of eight


def _samples(final: list) -> pd.DataFrame:
    rows, sid = [], 0
    for anchor, oks in {4096: [False] * 4, 8192: final}.items():
        for b, ok in enumerate(oks):
            sid += 1
            rows.append(
                {
                    "sample_id": sid,
                    "cell_id": "m:p",
                    "kind": "probe",
                    "anchor": anchor,
                    "budget": 1024,
                    "branch": b,
                    "correct": ok,
                }
            )
    for c in (1024, 2048, 4096, 8192):
        for b in range(4):
            sid += 1
            rows.append(
                {
                    "sample_id": sid,
                    "cell_id": "m:p",
                    "kind": "restart",
                    "anchor": -1,
                    "budget": c,
                    "branch": b,
                    "correct": False,
                }
            )
    return pd.DataFrame(rows)


def test_one_ungraded_branch_of_eight_keeps_the_terminal_event():
    y, n = True, False
    full = _samples([y, y, y, y, y, y, n, n])  # 6/8
    gap = _samples([y, y, y, y, y, y, n, np.nan])  # 6 of 7 graded (one grading failed)
    short = _samples([y, y, y, y, y, n, n, np.nan])  # 5 of 7: below τ, as 5/8 or 6/8 would be
    for frame, regime, rate in (
        (full, "terminal_A1", 0.75),
        (gap, "terminal_A1", 6 / 7),
        (short, "unsolved_hard", None),
    ):
        res = classify_frames(frame, None, settings=ClassifySettings(draws=2))
        row = res.labels.iloc[0]
        assert row["regime"] == regime
        if rate is None:
            assert na(row["terminal_a1_rate"])
        else:
            assert row["terminal_a1_rate"] == pytest.approx(rate)
    pp = probe_panel(gap)
    assert pp.set_index("anchor").loc[8192, ["n", "k"]].tolist() == [7, 6]
    assert restart_panel(gap)["n"].tolist() == [4] * 4


def test_ungraded_canonical_branch_still_a_candidate():
    # canonical 3 of 3 graded, replication 3 of 4: 6/7
    row = label(grid(0, 0, 0, 0, 0, 0, 0) | {8192: (6, 7, 3, 3)}, ZERO_R)
    assert row["terminal_candidate"] and row["regime"] == "terminal_A1"
    assert math.isclose(row["terminal_a1_rate"], 6 / 7)


def test_raising_a_canonical_rate_can_end_a1_candidacy():
    # why the monotonicity property leaves terminal_A1 out (tests/classify/test_properties.py)
    lo = label({4096: (3, 8, 2), 8192: (6, 8, 3)}, ZERO_R)
    hi = label({4096: (5, 8, 3), 8192: (6, 8, 3)}, ZERO_R)
    assert (lo["regime"], hi["regime"]) == ("terminal_A1", "unsolved_hard")


def test_restart_budgets_come_from_the_canonical_summaries():
    # instant on the canonical rates (16: 4/4, 32: 3/4): only C = B, even after a top-up pooled
    # 32 to 5/8 and removed the event; and the reverse
    instant = [(16, 4, 4, 4, 4), (32, 8, 5, 4, 3), (64, 4, 4, 4, 4)]
    assert P.restart_budgets_of(instant, 0.75) == (1024,)
    assert not C.label_panels(
        *panels({"m:p": {16: (4, 4), 32: (5, 8, 3), 64: (4, 4)}}), topup="terminal,ambiguous"
    ).iloc[0]["instant"]
    late = [(16, 8, 6, 4, 2), (32, 4, 4, 4, 4), (64, 4, 4, 4, 4)]
    assert P.restart_budgets_of(late, 0.75) == (1024, 2048, 4096, 8192)
    small = DEFAULT.with_overrides(budget=64, restart_budgets=(64, 128, 256, 512))
    assert P.restart_budgets_of(instant, 0.75, small) == (64,)


@pytest.mark.heavy
def test_bt_classify_labels_the_a1_example_as_the_protocol(tmp_path):
    # issue 14's example through the installed console script: 2048: 0/4, 4096: 2/4 topped to
    # 6/8, 8192: 4/4 + A1 1/4 → prefix_limited (T_V 4096); `--topup terminal` labels on the
    # canonical 4-branch counts as the study's development cohort → unsolved_hard
    y, n = True, False
    spec = {
        "m:p": {
            "probes": {2048: [n] * 4, 4096: [y, y, n, n, y, y, y, y], 8192: [y] * 4 + [y, n, n, n]},
            "restarts": {c: [n] * 4 for c in (1024, 2048, 4096, 8192)},
            "level": 2,
            "stage": "supplement",
        }
    }
    run = write_store(tmp_path / "run", spec)
    for topup, regime, t_v in (
        ("terminal,ambiguous", "prefix_limited", 4096),
        ("terminal", "unsolved_hard", None),
    ):
        done = run_bt(
            "classify",
            run,
            "--draws",
            "20",
            "--no-cell-pages",
            "--topup",
            topup,
            "-o",
            tmp_path / topup,
        )
        assert done.returncode == 0, done.stderr
        row = pd.read_csv(tmp_path / topup / "labels.csv").iloc[0]
        assert row["regime"] == regime and row["max_advantage"] == 1.0
        assert na(row["t_v"]) if t_v is None else row["t_v"] == t_v
        assert row["terminal_candidate"] and na(row["terminal_a1_anchor"])  # 5/8: no event

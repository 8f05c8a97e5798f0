"""`bt continue RUN --add-budget 32` on the tiny model's real run (the report tests' `studied`
copy of `classified`, B = 8): the A2 targets re-probed at B2 with the same seeds, stored with
their B, recorded as an arm, the protocol and the primary arm untouched; `bt classify` labels
each arm and writes the A2 table, verdict and figure; a rerun adds nothing; the run's own B is
refused in one line with nothing written."""

from __future__ import annotations

import json
import shutil

import pandas as pd
from bt_cli import assert_one_line_error, run_bt
from typer.testing import CliRunner

from breakthrough.cli import app
from breakthrough.store import RunStore


def _probes(run):
    with RunStore(run, readonly=True) as s:
        return s.samples_frame(arrays=False, kind="probe"), s.manifest()


def test_the_arm_reprobes_the_targets_at_b2_with_the_same_seeds(classified, studied):
    before, man0 = _probes(classified[0])
    after, man = _probes(studied[0])
    arm = after[after["budget"] == 32]
    # only pA has a (non-instant) T_F event: re-probed at every anchor up to its stability anchor
    assert set(arm["cell_id"].str.split(":").str[1]) == {"pA"}
    pa = before[(before["budget"] == 8) & before["cell_id"].str.endswith(":pA")]
    crossing = sorted(pa.groupby("anchor")["correct"].mean().loc[lambda r: r >= 0.75].index)
    want = [a for a in sorted(set(pa["anchor"])) if a <= crossing[1]]
    assert sorted(set(arm["anchor"])) == want and (arm.groupby("anchor").size() == 4).all()
    seeds1 = pa.set_index(["anchor", "branch"])["seed"]
    seeds2 = arm.set_index(["anchor", "branch"])["seed"]
    assert (seeds2 == seeds1.loc[seeds2.index]).all()
    # the box is in the prefix or not: p(t) is the same at both budgets
    assert (
        arm.groupby("anchor")["correct"].mean()
        == pa[pa["anchor"].isin(want)].groupby("anchor")["correct"].mean()
    ).all()
    assert len(after[after["budget"] == 8]) == len(before)
    assert man["protocol"] == man0["protocol"] and man["protocol"]["budget"] == 8
    arms = {a["budget"]: a for a in man["probe_arms"]}
    assert arms[8]["role"] == "primary" and arms[32]["targets"] == 1


def test_classify_labels_each_arm_and_writes_the_a2_outputs(studied):
    out = studied[1] / "classify"
    arms = pd.read_csv(out / "arms.csv")
    assert sorted(set(arms["budget"])) == [8, 32]
    assert set(arms.loc[arms["budget"] == 32, "problem_id"]) == {"pA"}
    a2 = pd.read_csv(out / "a2.csv")
    assert len(a2) == 1 and a2.loc[0, "first_crossing_1"] == a2.loc[0, "first_crossing_2"]
    assert a2.loc[0, "shift_tokens"] == 0 and a2.loc[0, "level"] == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["a2"]["32"]["verdict"] == "construct supported"
    assert (out / "figures" / "budget_falsification.png").stat().st_size > 1000
    assert "Second probe arm B = 32" in (out / "index.html").read_text()
    labels = pd.read_csv(out / "labels.csv").set_index("problem_id")
    assert labels.loc["pA", "regime"] == "prefix_limited"  # the primary labels read B = 8


def test_a_rerun_adds_nothing_and_the_own_budget_is_refused(studied, tmp_path):
    run = shutil.copytree(studied[0], tmp_path / "runs" / "fx")  # `studied` is shared: read-only
    n = len(_probes(run)[0])
    assert CliRunner().invoke(app, ["continue", str(run), "--add-budget", "32"]).exit_code == 0
    assert len(_probes(run)[0]) == n
    assert_one_line_error(run_bt("continue", run, "--add-budget", "8"), 2, "--add-budget 8", "B=8")
    assert len(_probes(run)[0]) == n

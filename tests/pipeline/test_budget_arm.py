"""`bt continue RUN --add-budget B2` on the tiny model: a second probe arm on the same base
traces (protocol 3.6), stored with its own B and identical seeds, recorded as an arm, the run's
protocol untouched; refusals are one line with nothing written."""

from __future__ import annotations

from pathlib import Path

from bt_cli import assert_one_line_error, run_bt
from typer.testing import CliRunner

from breakthrough.cli import app
from breakthrough.store import RunStore

ARGS = ["--budget", "8", "--answer-budget", "4", "--restarts", "8,16", "--anchors", "64,128,256"]


def _probes(run: Path):
    with RunStore(run, readonly=True) as s:
        return s.samples_frame(arrays=False, kind="probe"), s.manifest()


def test_add_budget_probes_the_a2_targets_at_b2_with_the_same_seeds(fixture_run: Path, tmp_path) -> None:
    assert CliRunner().invoke(app, ["continue", str(fixture_run), *ARGS]).exit_code == 0
    before, man0 = _probes(fixture_run)
    res = CliRunner().invoke(app, ["continue", str(fixture_run), "--add-budget", "32"])
    assert res.exit_code == 0, res.output
    after, man = _probes(fixture_run)
    arm = after[after["budget"] == 32]
    # Only pA has a (non-instant) T_F event: re-probed at every anchor up to its stability anchor.
    assert set(arm["cell_id"].str.split(":").str[1]) == {"pA"}
    pa = before[(before["budget"] == 8) & before["cell_id"].str.endswith(":pA")]
    crossing = sorted(pa.groupby("anchor")["correct"].mean().loc[lambda r: r >= 0.75].index)
    want = [a for a in sorted(set(pa["anchor"])) if a <= crossing[1]]
    assert sorted(set(arm["anchor"])) == want
    assert (arm.groupby("anchor").size() == 4).all()
    # identical branch seeds; p(t) equal at both budgets (the box is in the prefix or not)
    seeds1 = pa.set_index(["anchor", "branch"])["seed"]
    seeds2 = arm.set_index(["anchor", "branch"])["seed"]
    assert (seeds2 == seeds1.loc[seeds2.index]).all()
    assert (arm.groupby("anchor")["correct"].mean()
            == pa[pa["anchor"].isin(want)].groupby("anchor")["correct"].mean()).all()
    # the primary arm and the protocol are untouched; the arm is recorded
    assert len(after[after["budget"] == 8]) == len(before)
    assert man["protocol"] == man0["protocol"] and man["protocol"]["budget"] == 8
    arms = {a["budget"]: a for a in man["probe_arms"]}
    assert arms[8]["role"] == "primary" and arms[32]["targets"] == 1
    # a rerun adds nothing
    assert CliRunner().invoke(app, ["continue", str(fixture_run), "--add-budget", "32"]).exit_code == 0
    assert len(_probes(fixture_run)[0]) == len(after)
    # `bt classify` labels each arm and writes the A2 comparison, its figure and its summary
    import pandas as pd

    from breakthrough.report.classify_outputs import classify_runs

    rep = classify_runs([fixture_run], tmp_path / "c", draws=2, cell_pages=False)
    arms = pd.read_csv(tmp_path / "c" / "arms.csv")
    assert sorted(set(arms["budget"])) == [8, 32]
    assert set(arms.loc[arms["budget"] == 32, "problem_id"]) == {"pA"}
    a2 = pd.read_csv(tmp_path / "c" / "a2.csv")
    assert len(a2) == 1 and a2.loc[0, "first_crossing_1"] == a2.loc[0, "first_crossing_2"]
    assert a2.loc[0, "shift_tokens"] == 0 and a2.loc[0, "level"] == 1
    assert rep.summary["a2"]["32"]["verdict"] == "construct supported"
    assert (tmp_path / "c" / "figures" / "budget_falsification.png").stat().st_size > 1000
    assert "Second probe arm B = 32" in (tmp_path / "c" / "index.html").read_text()
    # the primary labels read B = 8 only
    labels = pd.read_csv(tmp_path / "c" / "labels.csv").set_index("problem_id")
    assert labels.loc["pA", "regime"] == "prefix_limited"
    # the run's own B is refused, in one line, nothing written
    proc = run_bt("continue", fixture_run, "--add-budget", "8")
    assert_one_line_error(proc, 2, "--add-budget 8", "B=8")
    assert len(_probes(fixture_run)[0]) == len(after)


def test_add_budget_before_any_probe_is_refused(fixture_run: Path) -> None:
    proc = run_bt("continue", fixture_run, "--add-budget", "32")
    assert_one_line_error(proc, 2, "bt continue")
    with RunStore(fixture_run, readonly=True) as s:
        assert "probe_arms" not in s.manifest()


def test_add_budget_option_refusals_before_any_read(tmp_path: Path) -> None:
    import pytest
    from rich.console import Console

    from breakthrough.commands.continue_ import _add_budget
    from breakthrough.errors import BtError

    args = ("mlx", "", 4, False, 8, 1.0)
    with pytest.raises(BtError, match="--add-budget: expected a positive"):
        _add_budget(Console(), [tmp_path], 0, False, *args)
    with pytest.raises(BtError, match="--dry-run"):
        _add_budget(Console(), [tmp_path], 4096, True, *args)

"""`bt classify` end to end over run stores written with the RunStore API: the protocol comes
whole from each run, and a run without one is refused."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest
from classify_fixture import SMALL, cell_spec, small_spec, write_store
from typer.testing import CliRunner

from breakthrough.cli import app, main


def test_bt_classify_end_to_end(tmp_path):
    spec = cell_spec()
    write_store(tmp_path / "runs" / "g", {c: s for c, s in spec.items() if c.startswith("g:")})
    write_store(tmp_path / "runs" / "m", {c: s for c, s in spec.items() if c.startswith("m:")})
    result = CliRunner().invoke(
        app, ["classify", str(tmp_path / "runs"), "--draws", "5", "--no-cell-pages"]
    )
    assert result.exit_code == 0, result.output
    assert "prefix_limited" in result.output and "report:" in result.output
    assert "--topup terminal,ambiguous" in result.output
    out = tmp_path / "runs" / "classify"
    table = pd.read_csv(out / "labels.csv")
    assert dict(zip(table["cell_id"], table["regime"], strict=True))["m:p2"] == "terminal_A1"
    assert set(table["run"]) == {"g", "m"}
    assert (out / "index.html").is_file() and not (out / "g" / "index.html").exists()  # one report
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cross_model_agreement"]["compared"] == 2


@pytest.mark.heavy
def test_bt_classify_reads_the_stored_protocol_and_options_override_it(tmp_path):
    run = write_store(tmp_path / "small", small_spec(), SMALL.with_overrides(tau=0.5))
    result = CliRunner().invoke(
        app,
        ["classify", str(run), "--draws", "2", "--no-cell-pages", "--topup", "terminal,posterior"],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((run / "classify" / "summary.json").read_text())
    assert summary["budget"] == 64 and summary["tau"] == 0.5  # both from the run
    assert summary["protocol"]["budget_limited_at"] == 256
    assert summary["regime_counts"]["m"]["budget_limited"] == 1
    assert json.loads((run / "classify" / "plan.json").read_text())["topup"] == "terminal,posterior"
    result = CliRunner().invoke(
        app, ["classify", str(run), "--draws", "2", "--no-cell-pages", "--tau", "0.75"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads((run / "classify" / "summary.json").read_text())["tau"] == 0.75


def _bt(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    """Run `bt ARGS` as the console script does: (exit code, stderr)."""
    monkeypatch.setattr(sys, "argv", ["bt", *args])
    with pytest.raises(SystemExit) as done:
        main()
    return done.value.code, capsys.readouterr().err


def test_run_without_protocol_is_refused(tmp_path, monkeypatch, capsys):
    run = write_store(tmp_path / "old", cell_spec(), protocol=None)
    code, err = _bt(monkeypatch, capsys, "classify", str(run), "--draws", "2")
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("bt: error: ") and str(run) in err
    assert not (run / "classify").exists()


def test_bad_topup_word_is_refused_naming_the_option(tmp_path, monkeypatch, capsys):
    run = write_store(tmp_path / "r", cell_spec())
    code, err = _bt(monkeypatch, capsys, "classify", str(run), "--topup", "fixed")
    assert code == 2 and err.startswith("bt: error: --topup: ") and err.count("\n") == 1

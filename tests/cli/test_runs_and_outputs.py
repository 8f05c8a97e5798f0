"""Issue 30, item 1, through the installed `bt`: analysis outputs are never taken for runs, and
every command that takes many runs finds them the same way (`store.find_runs`).

After the README's pipeline `runs/` holds the study runs beside `classify/`, `study/`,
`confirm/` (outputs) and `attempts/`, `screens/` (folders of `bt sample` runs). `runs/*` then
named all of them: the worked example stopped at `runs/classify: not a run directory`, `bt
report study runs/*` took the sample stores for runs and its hints named `runs/classify`, and
`bt confirm RUN` did not find the labels `bt classify runs/` wrote."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bt_cli import assert_one_line_error, bt_env, bt_in_process, run_bt
from classify_fixture import cell_spec, write_store
from cli.test_confirm_cli import write_run
from cli.test_unfinished import _sample_run


def _notes(text: str) -> list[str]:
    return [
        line.strip()[len("note: ") :]
        for line in text.splitlines()
        if line.strip().startswith("note: ")
    ]


def _build_runs_folder(tmp_path: Path) -> Path:
    """runs/ as the README's pipeline leaves it: a study run, a `bt sample` run under
    attempts/, a screen's under screens/, and `bt classify runs/`'s output."""
    runs = tmp_path / "runs"
    write_store(runs / "math89-g", {c: s for c, s in cell_spec().items() if c.startswith("g:")})
    _sample_run(runs / "attempts" / "math500-g")
    _sample_run(runs / "screens" / "math500-g")
    proc = run_bt("classify", runs, "--draws", "0", "--no-cell-pages")
    assert proc.returncode == 0, proc.stderr
    assert (runs / "classify" / "labels.parquet").is_file()
    return runs


@pytest.fixture(scope="module")
def pipeline_runs(tmp_path_factory) -> Path:
    """`_build_runs_folder`, made once for the module's three tests that start from it (one
    `bt classify runs/` instead of three); read-only, each test copies it (`_runs_folder`)."""
    return _build_runs_folder(tmp_path_factory.mktemp("pipeline"))


def _runs_folder(pipeline_runs: Path, tmp_path: Path) -> Path:
    """TMP_PATH/runs: this test's own copy of `pipeline_runs` (bt finds runs and outputs by
    what a folder holds and labels by run name, so the copy reads as the original)."""
    return Path(shutil.copytree(pipeline_runs, tmp_path / "runs"))


def _star(runs: Path) -> list[Path]:
    """What the shell makes of `runs/*`."""
    return sorted(runs.iterdir())


@pytest.mark.heavy
def test_study_report_over_runs_star_skips_outputs_and_sample_runs(pipeline_runs, tmp_path):
    runs = _runs_folder(pipeline_runs, tmp_path)
    proc = run_bt("report", "study", *_star(runs), "--draws", "0", "--no-cell-pages")
    assert proc.returncode == 0, proc.stderr
    notes = _notes(proc.stdout)
    assert f"skipped {runs / 'classify'} (not a run: bt classify output)" in notes, proc.stdout
    sample = [n for n in notes if "`bt sample` run" in n]
    assert len(sample) == 1 and sample[0].startswith("skipped 2 `bt sample` runs"), notes
    doc = json.loads((runs / "study" / "headlines.json").read_text())
    assert doc["runs"] == [str(runs / "math89-g")]  # the sample stores are no continued run
    for m in doc["missing"]:  # every hint names the study run, never a folder that is none
        for folder in ("attempts", "screens", "classify", "study"):
            assert str(runs / folder) not in m["command"], m
    # a second report over runs/* also skips the first one's study/ folder
    proc = run_bt("report", "study", *_star(runs), "--draws", "0", "--no-cell-pages")
    assert proc.returncode == 0, proc.stderr
    assert f"skipped {runs / 'study'} (not a run: bt report study output)" in _notes(proc.stdout)


@pytest.mark.heavy
def test_status_and_verify_take_runs_star_with_one_note_per_folder(pipeline_runs, tmp_path):
    runs = _runs_folder(pipeline_runs, tmp_path)
    proc = run_bt("verify", *_star(runs))
    assert proc.returncode == 0, proc.stderr
    assert _notes(proc.stderr) == [f"skipped {runs / 'classify'} (not a run: bt classify output)"]
    assert proc.stdout.count(": intact:") == 3  # the study run and both sample runs
    proc = run_bt("status", runs / "classify")  # no run left: one line, nothing else
    assert_one_line_error(
        proc, 2, "no run directories", str(runs / "classify"), "not a run: bt classify output"
    )


@pytest.mark.heavy
def test_worked_example_runs_after_the_pipeline(pipeline_runs, tmp_path):
    runs = _runs_folder(pipeline_runs, tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "breakthrough.analyses.auroc_worked_example",
            *[f"{p}/" for p in _star(runs)],
            "--bootstrap",
            "0",
        ],
        capture_output=True,
        text=True,
        env=bt_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    notes = _notes(proc.stdout)
    assert any(n.startswith(f"skipped {runs / 'classify'} (not a run") for n in notes), notes
    assert any("`bt sample` run" in n for n in notes), notes
    assert f"Runs: {runs / 'math89-g'}\n" in proc.stdout


@pytest.mark.heavy
def test_confirm_finds_the_labels_classify_wrote_for_the_runs_folder(tmp_path):
    runs = tmp_path / "runs"
    run = write_run(runs / "math89-tiny")
    _sample_run(runs / "attempts" / "math500-tiny")
    bt_in_process("signals", run, "--window", "64")  # setup: confirm's summaries
    proc = run_bt("classify", runs, "--no-cell-pages", "--draws", "0")
    assert proc.returncode == 0, proc.stderr
    assert (runs / "classify" / "labels.parquet").is_file() and not (run / "classify").exists()
    proc = run_bt("confirm", run, "--forecast-token", "64", "--draws", "50")
    assert proc.returncode == 0, proc.stderr  # was: no classify labels: run bt classify first
    assert (runs / "confirm" / "confirm.json").is_file()  # beside the labels' classify folder
    report = json.loads((runs / "confirm" / "confirm.json").read_text())
    assert report["cells"]["labelled"] == 30
    # the whole folder, as the README's sweep gives it: the outputs and sample runs skipped
    proc = run_bt("confirm", *_star(runs), "--forecast-token", "64", "--draws", "50")
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stdout.split())
    assert f"skipped {runs / 'classify'} (not a run: bt classify output)" in said
    assert f"skipped {runs / 'confirm'} (not a run: bt confirm output)" in said

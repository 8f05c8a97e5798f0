"""Issue 29, item 9 and the classifier section's last point, through the installed `bt`:
unfinished work is never labelled as a result, and a `bt sample` run is no study run.

  * `bt classify` gave a cell with no probes and no restarts (a run never continued, an
    interrupted one) `unsolved_hard` without a word; now such a cell, and one whose owed
    restarts are missing, gets no regime, is listed apart (unfinished.csv, the summary, the
    printed table) and one note says how many were left unlabelled;
  * `bt status` said `done` for a cell whose restarts column was `-`;
  * `bt classify` and `bt report study` labelled a `bt sample` run's attempts as study cells."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from bt_cli import assert_one_line_error, run_bt
from classify_fixture import cell_spec, write_store

from breakthrough.protocol import DEFAULT
from breakthrough.store import RunStore, SampleRecord
from breakthrough.tasks.grade import Grade

ALL = "1024,2048,4096,8192"


def _base(cell: str, n: int = 40) -> SampleRecord:
    return SampleRecord(
        cell_id=cell,
        kind="base",
        anchor=-1,
        budget=0,
        branch=0,
        seed=11,
        prefix_len=0,
        token_ids=np.arange(n, dtype=np.int32),
        text="t",
        finish_reason="length",
    )


def _interrupted_run(path):
    """g:p1 finished (prefix-limited); g:p3 probed, its restarts never ran (an interrupted
    run); g:p7 a base trace and nothing else (never continued). Each has a base trace."""
    spec = cell_spec()
    probes_only = spec["g:p3"] | {"restarts": {}}
    run = write_store(path, {"g:p1": spec["g:p1"], "g:p3": probes_only})
    with RunStore(run) as store:
        store.add_cells(
            [
                {
                    "cell_id": "g:p7",
                    "model": "g",
                    "item": {"id": "p7", "answer": "1"},
                    "prompt_ids": [1, 2],
                }
            ]
        )
        store.add_samples(
            [_base(c) for c in ("g:p1", "g:p3", "g:p7")],
            [Grade(False, "wrong", "numeric", "math", "t")] * 3,
            reasoning_tokens={"g:p1": 9000, "g:p3": 9000, "g:p7": 9000},
        )
    return run


def _notes(stdout: str) -> list[str]:
    return [n.strip() for n in " ".join(stdout.split()).split("note: ")[1:]]


def test_classify_leaves_unfinished_cells_unlabelled_with_one_note(tmp_path):
    run = _interrupted_run(tmp_path / "r")
    proc = run_bt("classify", run, "--draws", "0", "--no-cell-pages")
    assert proc.returncode == 0, proc.stderr
    out = run / "classify"
    labels = pd.read_csv(out / "labels.csv")
    assert list(labels["cell_id"]) == ["g:p1"]  # g:p3 and g:p7 were unsolved_hard
    assert labels["regime"].tolist() == ["prefix_limited"]
    unfinished = pd.read_csv(out / "unfinished.csv").set_index("cell_id")
    assert unfinished.loc["g:p7", "status"] == "not continued"
    assert unfinished.loc["g:p3", "status"] == "incomplete"
    assert unfinished.loc["g:p3", "missing"] == f"restarts at {ALL}"
    assert "regime" not in unfinished.columns
    summary = json.loads((out / "summary.json").read_text())
    assert summary["unfinished_counts"] == {"g": {"incomplete": 1, "not continued": 1}}
    assert summary["regime_counts"]["g"]["unsolved_hard"] == 0 and summary["n_cells"] == {"g": 1}
    said = " ".join(proc.stdout.split())
    assert "g: 1 cell labelled, 2 unlabelled" in said
    assert "(not continued: no regime) │ 1" in said and "(incomplete: no regime) │ 1" in said
    notes = [n for n in _notes(proc.stdout) if "unlabelled" in n]
    assert len(notes) == 1 and notes[0].startswith(
        "left 2 cells unlabelled (1 not continued, 1 incomplete)"
    ), proc.stdout


def test_a_run_never_continued_is_not_labelled_at_all(tmp_path):
    run = tmp_path / "fresh"
    with RunStore(run, create=True) as store:
        store.update_manifest(
            {"protocol": DEFAULT.to_dict(), "model_id": "tiny", "cohort_digest": "fixture"}
        )
        store.add_cells(
            [
                {"cell_id": f"g:p{i}", "model": "g", "item": {"id": f"p{i}"}, "prompt_ids": [1]}
                for i in range(3)
            ]
        )
        store.add_samples([_base(f"g:p{i}") for i in range(3)])
    proc = run_bt("classify", run, "--draws", "0", "--no-cell-pages")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert (run / "classify" / "index.html").is_file()
    assert not pd.read_csv(run / "classify" / "unfinished.csv")["status"].ne("not continued").any()
    assert "unsolved_hard" not in proc.stdout
    assert [n for n in _notes(proc.stdout) if "unlabelled" in n][0].startswith(
        "left 3 cells unlabelled (3 not continued)"
    )


def test_status_never_says_done_for_a_cell_without_its_restarts(tmp_path):
    run = _interrupted_run(tmp_path / "runs" / "r")
    proc = run_bt("status", run)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    row = {c: next(line for line in lines if f"{c} " in line) for c in ("g:p1", "g:p3", "g:p7")}
    assert f"incomplete: restarts at {ALL}" in row["g:p3"] and "done" not in row["g:p3"]
    assert row["g:p7"].rstrip(" │|").endswith("not continued")
    assert "probe@112[ambiguity]" in row["g:p1"]  # finished: its planned top-up (whole)
    count = next(line for line in lines if line.startswith("3 cells:"))
    assert "1 not continued" in count and "1 incomplete" in count
    assert "2 not labelled by `bt classify`" in count


def _sample_run(path):
    """A `bt sample` run as bt writes one: run_kind "sample", attempts, no probes, no
    restarts."""
    with RunStore(path, create=True) as store:
        store.update_manifest(
            {
                "run_kind": "sample",
                "protocol": DEFAULT.to_dict(),
                "model_id": "tiny",
                "cohort_digest": "fixture",
                "attempts": {"kind": "attempt", "max_tokens": 16},
            }
        )
        store.add_cells(
            [
                {
                    "cell_id": "g:p1",
                    "model": "g",
                    "item": {"id": "p1", "answer": "1"},
                    "prompt_ids": [1],
                }
            ]
        )
        store.add_samples(
            [
                SampleRecord(
                    cell_id="g:p1",
                    kind="attempt",
                    anchor=-1,
                    budget=16,
                    branch=b,
                    seed=b,
                    prefix_len=0,
                    token_ids=np.arange(4, dtype=np.int32),
                    text="1",
                    finish_reason="eos",
                )
                for b in range(2)
            ],
            [Grade(True, "correct", "numeric", "math", "t")] * 2,
        )
    return path


@pytest.mark.heavy
def test_classify_and_study_report_skip_a_sample_run_with_one_note(tmp_path):
    runs = tmp_path / "runs"
    write_store(runs / "study", {c: s for c, s in cell_spec().items() if c.startswith("g:")})
    sample = _sample_run(runs / "attempts-g")
    assert_one_line_error(
        run_bt("classify", sample, "--draws", "0"),
        2,
        str(sample),
        "`bt sample` run",
        "not a study run",
    )
    assert not (sample / "classify").exists()

    proc = run_bt("classify", runs, "--draws", "0", "--no-cell-pages")
    assert proc.returncode == 0, proc.stderr
    notes = [n for n in _notes(proc.stdout) if "bt sample" in n]
    assert (
        len(notes) == 1
        and notes[0].startswith("skipped 1 `bt sample` run")
        and str(sample) in notes[0]
    ), proc.stdout
    labels = pd.read_csv(runs / "classify" / "labels.csv")
    assert set(labels["run"]) == {"study"}

    proc = run_bt("report", "study", runs, "--draws", "0", "--no-cell-pages")
    assert proc.returncode == 0, proc.stderr
    notes = [n for n in _notes(proc.stdout) if "bt sample" in n]
    assert len(notes) == 1 and notes[0].startswith("skipped 1 `bt sample` run"), proc.stdout
    doc = json.loads((runs / "study" / "headlines.json").read_text())
    assert doc["runs"] == [str(runs / "study")]


def test_a_lost_top_up_row_leaves_its_cell_unlabelled(tmp_path):
    """Issue 52: the last row a run writes leaves no id gap, and when it was a top-up branch
    the cell was still labelled, from a pooled count that depends on where the loss fell
    (README: `bt classify` leaves such a cell unlabelled either way). m:p2's A1 replication at
    8192 holds 7 of its 8 branches, as its lost last row leaves it."""
    spec = cell_spec()
    lost = spec["m:p2"]["probes"] | {8192: spec["m:p2"]["probes"][8192][:7]}
    run = write_store(
        tmp_path / "r", {"m:p2": spec["m:p2"] | {"probes": lost}, "m:p1": spec["m:p1"]}
    )
    proc = run_bt("status", run)
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if "m:p2 " in line)
    assert "incomplete: probes top-up at 8192 (7 of 8)" in row, proc.stdout
    proc = run_bt("classify", run, "--draws", "0", "--no-cell-pages")
    assert proc.returncode == 0, proc.stderr
    assert list(pd.read_csv(run / "classify" / "labels.csv")["cell_id"]) == ["m:p1"]
    unfinished = pd.read_csv(run / "classify" / "unfinished.csv").set_index("cell_id")
    assert unfinished.loc["m:p2", "missing"] == "probes top-up at 8192 (7 of 8)"

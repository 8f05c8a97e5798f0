"""The demonstration family `arith` through the real pipeline (bt base -> continue -> classify)
on the tiny random-weight model: its prompt reaches the model, its grader judges every sample,
and every cell gets a regime."""

from __future__ import annotations

import json
import sqlite3

from typer.testing import CliRunner

from breakthrough.cli import app
from breakthrough.store import RunStore
from breakthrough.tasks.arith.recipes import cohort_rows


def test_arith_cohort_runs_end_to_end(tmp_path, tiny_model_dir):
    runner = CliRunner()
    run = tmp_path / "a"
    res = runner.invoke(
        app,
        [
            "base",
            "--cohort",
            "arith",
            "--model",
            str(tiny_model_dir),
            "--limit",
            "2",
            "--max-tokens",
            "12",
            "--runs-dir",
            str(tmp_path),
            "--run",
            "a",
        ],
    )
    assert res.exit_code == 0, res.output
    res = runner.invoke(
        app,
        [
            "continue",
            str(run),
            "--anchors",
            "4,8",
            "--samples",
            "1",
            "--budget",
            "2",
            "--answer-budget",
            "2",
            "--restarts",
            "2,8",
            "--topup",
            "none",
        ],
    )
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["classify", str(run), "--no-cell-pages", "--draws", "0"])
    assert res.exit_code == 0, res.output

    rows = cohort_rows()[:2]
    with RunStore(run) as store:
        frame = store.samples_frame(arrays=False)
        cells = store.cells_frame()
        item, _prompt = store.cell_prompt(f"{cells.iloc[0]['cell_id']}")
    assert item in rows
    assert set(frame["kind"]) == {"base", "probe", "restart"}
    assert frame["grade_status"].notna().all()
    assert set(frame["grade_method"]) <= {"first_result", "boxed", "none"}
    assert sorted(cells["subject"]) == sorted(r["subject"] for r in rows)
    with sqlite3.connect(run / "store.sqlite") as db:
        graders = {g for (g,) in db.execute("SELECT DISTINCT grader FROM grades")}
    assert graders == {"arith"}
    table = json.loads((run / "classify" / "summary.json").read_text())
    assert sum(table["n_cells"].values()) == 2

"""`bt auroc` (breakthrough.analyses.auroc): output numbers and JSON, CSV/parquet input, clear
one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from breakthrough.analyses.auroc import auroc_table, decompose_table
from breakthrough.cli import app as bt_app
from breakthrough.errors import BtError


@pytest.fixture(scope="module")
def app():
    return bt_app


def _run(app, *args):
    return CliRunner().invoke(app, ["auroc", *map(str, args)])


def _worked_example() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "problem_id": ["A"] * 4 + ["C"] * 4,
            "correct": [True, True, True, False, True, False, False, False],
            "q": [0.75] * 4 + [0.25] * 4,
            "noise": [0.1, 0.5, 0.3, 0.2, 0.9, 0.4, 0.8, 0.6],
        }
    )


def test_worked_example_csv(app, tmp_path):
    path = tmp_path / "ex.csv"
    _worked_example().to_csv(path, index=False)
    res = _run(
        app,
        path,
        "--group",
        "problem_id",
        "--score",
        "q",
        "--score",
        "noise",
        "--label",
        "correct",
        "--bootstrap",
        "50",
    )
    assert res.exit_code == 0, res.output
    assert "discordant pairs 16: within groups 6, between 10" in res.output
    report = json.loads((tmp_path / "ex.auroc.json").read_text())
    sec = report["results"]["all"]
    q = sec["scores"]["q"]
    assert q["pooled"]["estimate"] == 0.75
    assert q["within_pair_weighted"]["estimate"] == 0.5
    assert q["within_failure_weighted"]["estimate"] == 0.5
    assert q["lam"]["estimate"] == 6 / 16
    assert q["between"]["estimate"] == pytest.approx(0.9)
    assert (q["n_pairs"], q["n_within_pairs"]) == (16, 6)
    assert len(q["pooled"]["ci"]) == 2
    assert sec["loo_reference"]["within_pair_weighted"]["estimate"] == 0.0
    diff = sec["differences"]["noise - q"]["pooled"]["estimate"]
    assert diff == pytest.approx(sec["scores"]["noise"]["pooled"]["estimate"] - 0.75)
    assert sec["success_rate"]["successes"] == 4
    lo, hi = sec["success_rate"]["wilson"]
    assert lo < 0.5 < hi


def test_parquet_by_and_out(app, tmp_path):
    rng = np.random.default_rng(0)
    n = 300
    problem = rng.integers(0, 20, n)
    df = pd.DataFrame(
        {
            "problem_id": [f"p{i}" for i in problem],
            "model": np.where(np.arange(n) % 2, "m1", "m2"),
            "correct": (rng.random(n) < 0.5).astype(int),
            "score": rng.normal(size=n),
        }
    )
    path = tmp_path / "t.parquet"
    df.to_parquet(path)
    out = tmp_path / "sub" / "r.json"
    res = _run(
        app,
        path,
        "-g",
        "problem_id",
        "-s",
        "score",
        "-l",
        "correct",
        "--by",
        "model",
        "-b",
        "40",
        "--seed",
        "3",
        "--out",
        out,
    )
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    assert set(report["by_results"]) == {"m1", "m2"}
    assert report["bootstrap_unit"] == "problem_id"
    assert report["results"]["all"]["n_groups"] == 40  # (model, problem) cells
    assert sum(s["n_rows"] for s in report["by_results"].values()) == n
    again = _run(
        app,
        path,
        "-g",
        "problem_id",
        "-s",
        "score",
        "-l",
        "correct",
        "--by",
        "model",
        "-b",
        "40",
        "--seed",
        "3",
        "--out",
        out,
    )
    assert again.exit_code == 0 and json.loads(out.read_text()) == report  # seeded


def test_report_functions_without_the_cli(tmp_path):
    path = tmp_path / "ex.csv"
    _worked_example().to_csv(path, index=False)
    res = auroc_table(path, group=["problem_id"], score=["q"], label="correct", bootstrap=0)
    assert res.out == tmp_path / "ex.auroc.json" and res.warnings == []
    assert json.loads(res.out.read_text()) == res.report
    assert res.report["results"]["all"]["scores"]["q"]["pooled"]["estimate"] == 0.75
    assert res.lines()[1] == "  discordant pairs 16: within groups 6, between 10"
    df = _worked_example()
    df.loc[0, "q"] = np.nan
    again = decompose_table(
        df, "frame", group=["problem_id"], score=["q"], label="correct", bootstrap=0
    )
    assert again.warnings == ["frame: dropped 1 of 8 rows (1 missing 'q')"]
    with pytest.raises(BtError, match="--score: column given twice"):
        decompose_table(df, "frame", group=["problem_id"], score=["q", "q"], label="correct")


def _error(app, tmp_path, df, *args) -> str:
    path = tmp_path / "bad.csv"
    df.to_csv(path, index=False)
    res = _run(app, path, *args)
    assert res.exit_code != 0
    assert isinstance(res.exception, BtError), res.output
    msg = str(res.exception)
    assert "\n" not in msg and "bad.csv" in msg
    return msg


def test_missing_column(app, tmp_path):
    msg = _error(app, tmp_path, _worked_example(), "-g", "problem", "-s", "q", "-l", "correct")
    assert "no column 'problem'" in msg and "problem_id" in msg


def test_non_binary_label(app, tmp_path):
    df = _worked_example().assign(correct=[0, 1, 2, 1, 0, 1, 0, 1])
    msg = _error(app, tmp_path, df, "-g", "problem_id", "-s", "q", "-l", "correct")
    assert "label column 'correct' is not binary" in msg and "2" in msg
    df = _worked_example().assign(correct=["yes", "no", "maybe"] + ["no"] * 5)
    msg = _error(app, tmp_path, df, "-g", "problem_id", "-s", "q", "-l", "correct")
    assert "maybe" in msg


def test_single_row_groups(app, tmp_path):
    df = pd.concat(
        [
            _worked_example(),
            pd.DataFrame({"problem_id": ["Z"], "correct": [True], "q": [0.5], "noise": [0.0]}),
        ]
    )
    msg = _error(app, tmp_path, df, "-g", "problem_id", "-s", "q", "-l", "correct")
    assert "single row" in msg and "Z" in msg and "--drop-singletons" in msg
    path = tmp_path / "bad.csv"
    res = _run(
        app, path, "-g", "problem_id", "-s", "q", "-l", "correct", "-b", "0", "--drop-singletons"
    )
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "bad.auroc.json").read_text())
    assert report["rows_dropped_single_row_groups"] == 1
    assert report["results"]["all"]["scores"]["q"]["pooled"]["estimate"] == 0.75


def test_missing_values_dropped_and_other_errors(app, tmp_path):
    df = _worked_example()
    df["correct"] = df["correct"].astype(object)
    df.loc[0, "correct"] = None
    df.loc[1, "q"] = np.nan
    extra = pd.DataFrame(
        {"problem_id": ["A"] * 2, "correct": [True, False], "q": [0.75] * 2, "noise": [0.0, 0.0]}
    )
    path = tmp_path / "na.csv"
    pd.concat([df, extra]).to_csv(path, index=False)
    res = _run(app, path, "-g", "problem_id", "-s", "q", "-l", "correct", "-b", "0")
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "na.auroc.json").read_text())
    assert report["rows_dropped_missing"] == {"correct": 1, "q": 1}
    one_class = _worked_example().assign(correct=True)
    msg = _error(app, tmp_path, one_class, "-g", "problem_id", "-s", "q", "-l", "correct")
    assert "only correct rows" in msg
    msg = _error(
        app,
        tmp_path,
        _worked_example().assign(q="high"),
        "-g",
        "problem_id",
        "-s",
        "q",
        "-l",
        "correct",
    )
    assert "not numeric" in msg
    res = _run(app, tmp_path / "nope.csv", "-g", "a", "-s", "b", "-l", "c")
    assert isinstance(res.exception, BtError) and "no such file" in str(res.exception)
    (tmp_path / "t.xlsx").write_text("x")
    res = _run(app, tmp_path / "t.xlsx", "-g", "a", "-s", "b", "-l", "c")
    assert isinstance(res.exception, BtError) and "unknown table format" in str(res.exception)


def _load_analysis():
    from breakthrough.analyses import auroc_worked_example

    return auroc_worked_example


def test_the_worked_example_refuses_a_missing_run_in_one_line(tmp_path):
    """`python -m breakthrough.analyses.auroc_worked_example` (the README's line) on a folder
    that is no run: exit 2 and one line on stderr, as bt says a mistake (no traceback)."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "breakthrough.analyses.auroc_worked_example", str(tmp_path / "no")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "no such run" in lines[0], lines


def test_analysis_worked_example(capsys):
    mod = _load_analysis()
    mod.main([])
    out = capsys.readouterr().out
    assert "pooled  = 12/16" in out and "within  = 1/2" in out and "6 inside a problem" in out
    ex = mod.worked_example()
    assert ex["decomposition"].pooled == 0.75 and ex["loo_decomposition"].within == 0.0


def test_analysis_on_a_run(tmp_path, capsys):
    from breakthrough.store import RunStore, SampleRecord
    from breakthrough.tasks.grade import Grade

    mod = _load_analysis()
    rng = np.random.default_rng(7)
    runs = []
    for model in ("m1", "m2"):
        run = tmp_path / model
        store = RunStore(run, create=True)
        cells = [
            {"cell_id": f"{model}:p{i}", "model": model, "item": {"id": f"p{i}"}, "prompt_ids": [1]}
            for i in range(12)
        ]
        store.add_cells(cells)
        recs, grades = [], []
        for i, cell in enumerate(cells):
            n = 300 if i else 100  # p0 is short: excluded at --tokens 256
            ok = bool(rng.random() < 0.5)
            recs.append(
                SampleRecord(
                    cell_id=cell["cell_id"],
                    kind="base",
                    anchor=-1,
                    budget=0,
                    branch=0,
                    seed=11,
                    prefix_len=0,
                    token_ids=np.arange(n, dtype=np.int32),
                    text="x",
                    finish_reason="eos",
                    entropies=(rng.random(n) + (0.0 if ok else 0.3)).astype(np.float32),
                )
            )
            grades.append(
                Grade(
                    correct=ok,
                    status="correct" if ok else "wrong",
                    method="numeric",
                    grader="math",
                    version="1",
                )
            )
        store.add_samples(recs, grades)
        store.close()
        runs.append(str(run))
    res = mod.analyse_runs(runs, tokens=256, n_boot=30, seed=1)
    out = capsys.readouterr().out
    assert "fewer than 256 generated tokens 2 (excluded)" in out
    d = res["all"]["decomposition"]
    assert d.n_rows == 22 and d.n_groups == 11
    assert d.pooled == pytest.approx(d.lam * d.within + (1 - d.lam) * d.between)
    assert "LOO pass rate" in out

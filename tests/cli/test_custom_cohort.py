"""A user's own cohort file: `{id, problem, answer}` per line is enough (family defaults to
math, provenance fields are optional), and every missing field of a row is named at once."""

from __future__ import annotations

import json

from bt_cli import assert_one_line_error, run_bt

from breakthrough.tasks.cohorts import load_cohort
from breakthrough.tasks.family import family_of


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_minimal_rows_are_a_math_cohort(tmp_path):
    mine = _write(
        tmp_path / "mine.jsonl",
        [
            {"id": "a", "problem": "What is 2+3?", "answer": "5"},
            {"id": "b", "problem": "What is 4*4?", "answer": "16"},
        ],
    )
    rows = load_cohort(mine)
    assert family_of(rows) == "math" and [r["id"] for r in rows] == ["a", "b"]
    proc = run_bt("cohorts", "show", mine)
    assert proc.returncode == 0, proc.stderr
    assert "rows=2" in proc.stdout and "Traceback" not in proc.stderr


def test_every_missing_field_is_reported_at_once(tmp_path):
    bad = _write(
        tmp_path / "bad.jsonl",
        [{"id": "a", "problem": "x", "answer": "1"}, {"family": "math", "level": 9}],
    )
    line = assert_one_line_error(run_bt("cohorts", "show", bad), 2, f"{bad}:2:")
    for fault in (
        "field 'id' is missing",
        "field 'problem' is missing",
        "field 'answer' is missing",
        "field 'level' must be 1-5",
    ):
        assert fault in line

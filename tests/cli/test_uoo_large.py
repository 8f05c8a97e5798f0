"""The real-size cohort through the installed `bt`: `bt cohorts build uoo-large --dry-run`
(the time a build and a recount take), `--check` (recounts; a tampered count or a malformed
row is caught with one line naming the row, nothing written), and `bt base --cohort uoo-large`
then `bt report uoo` end to end on the tiny model, with the by-size table and the figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bt_cli import assert_one_line_error, bt_in_process, run_bt, snapshot

LARGE = Path(__file__).resolve().parents[2] / "cohorts" / "uoo-large.jsonl"


def _rows() -> list[dict]:
    return [json.loads(line) for line in LARGE.read_text().splitlines()]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_dry_run_says_how_long_counting_takes() -> None:
    rows = _rows()
    proc = run_bt("cohorts", "build", "uoo-large", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    recount = sum(r["count_seconds"] for r in rows)
    assert f"{len(rows)} rows" in proc.stdout and f"took {recount:.0f} s" in proc.stdout


def test_check_catches_a_tampered_count_and_writes_nothing(tmp_path: Path) -> None:
    pytest.importorskip("pyganak")
    quick = sorted(_rows(), key=lambda r: r["count_seconds"])[:2]
    quick[1] = dict(quick[1], n_optima=quick[1]["n_optima"] + 1)
    _write(tmp_path / "uoo-large.jsonl", quick)
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = run_bt("cohorts", "build", "uoo-large", "--check", "--out", tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"same  {quick[0]['id']}" in proc.stdout
    assert f"DIFFERS  {quick[1]['id']}" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_malformed_row_is_one_line_naming_it(tmp_path: Path) -> None:
    row = dict(_rows()[0], seed="not-hex")
    _write(tmp_path / "uoo-large.jsonl", [row])
    proc = run_bt("cohorts", "build", "uoo-large", "--check", "--out", tmp_path)
    assert_one_line_error(proc, 2, row["id"], "seed")


@pytest.fixture(scope="module")
def large_run(tmp_path_factory, tiny_model_dir) -> Path:
    """A `bt base` run of three uoo-large items (three kinds and sizes) on the tiny model."""
    root = tmp_path_factory.mktemp("uoo-large") / "runs"
    picks = {}
    for r in _rows():
        picks.setdefault(r["kind"], r["id"])
    ids = ",".join(list(picks.values())[:3])
    bt_in_process(
        "base", "--cohort", "uoo-large", "--problems", ids, "--max-tokens", "8",
        "--model", tiny_model_dir, "--runs-dir", root, "--run", "large",
    )  # fmt: skip
    return root / "large"


def test_base_then_report_on_uoo_large(large_run: Path, tmp_path: Path) -> None:
    before = snapshot(large_run)
    fig = tmp_path / "claimed.png"
    proc = run_bt("report", "uoo", large_run, "--cohort", "uoo-large", "--figure", fig)
    assert proc.returncode == 0, proc.stderr
    assert "By problem size n" in proc.stdout
    assert fig.read_bytes()[:4] == b"\x89PNG"
    assert snapshot(large_run) == before  # the report regrades; it writes nothing in the run
    bad = run_bt("report", "uoo", large_run, "--cohort", "uoo-large", "--figure", tmp_path / "x")
    assert_one_line_error(bad, 2, "--figure")


def test_ctrl_c_during_a_recount_is_one_line_and_exit_130() -> None:
    """CP-SAT takes SIGINT for itself unless told not to; Ctrl-C in the middle of
    `--check`'s solving is bt's: one line and 130 (it died by the signal before)."""
    import os
    import signal

    from bt_cli import start_bt

    proc = start_bt("cohorts", "build", "uoo-large", "--check")
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # a row recounted: solving has started
        assert first.startswith("same"), first
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.strip() == "bt: interrupted, rerun to resume", err

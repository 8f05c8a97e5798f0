"""Rows deleted from a finished run (issue 40): deleted probe rows are caught
(tests/cli/test_crashes_and_refusals_keep_runs_whole.py); a deleted restart row passed `bt
verify` as intact. Sample ids only grow and bt never deletes a sample, so an id missing below
the largest is a deleted row (`pipeline.verify._check_gone`); the cell that now lacks what its
protocol owes is named, `bt classify` leaves it unlabelled, and the plain rerun makes it again.
Through the installed `bt`. (A deleted grade row is damage to its sample's checksum:
test_crashes_and_refusals_keep_runs_whole.test_4_a_deleted_grade_row_is_damage_not_ungraded.)"""

from __future__ import annotations

import sqlite3

from bt_cli import assert_one_line_error, run_bt

# the module-scoped run of the tiny model (a fixture found by pytest) and a copy of the worker's
# shared continuation of it (`_continued`: setup, the run whose rows the test deletes)
from cli.test_crashes_and_refusals_keep_runs_whole import _continued, _delete_samples, runs  # noqa: F401


def test_a_deleted_restart_row_is_reported_and_its_cell_left_unlabelled(runs, tmp_path):  # noqa: F811
    run = _continued(runs, tmp_path)
    conn = sqlite3.connect(run / "store.sqlite")
    sid, cell, budget = conn.execute(
        "SELECT sample_id, cell_id, budget FROM samples WHERE kind='restart' "
        "ORDER BY sample_id LIMIT 1"
    ).fetchone()
    (last,) = conn.execute("SELECT max(sample_id) FROM samples").fetchone()
    conn.close()
    assert sid < last  # a row written before others: its id leaves a gap
    assert _delete_samples(run, f"sample_id={sid}") == [sid]

    proc = run_bt("verify", run)
    assert_one_line_error(proc, 1, "damaged")
    lines = [line for line in proc.stdout.splitlines() if f"cell {cell}:" in line]
    assert len(lines) == 1, proc.stdout
    assert f"restart rows at C={budget} (1 of 2 stored)" in lines[0], lines[0]
    assert f"sample id {sid} is missing" in lines[0] and "rows were deleted" in lines[0]

    proc = run_bt("status", run)
    assert proc.returncode == 0 and f"incomplete: restarts at {budget}" in proc.stdout, proc.stdout
    out = tmp_path / "classify"
    proc = run_bt("classify", run, "--draws", "2", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert cell not in (out / "labels.csv").read_text()
    assert cell in (out / "unfinished.csv").read_text()

    # the plain rerun makes it again (same key, same seed): intact and labelled, though its old
    # id stays unused
    assert run_bt("continue", run).returncode == 0
    assert run_bt("verify", run).returncode == 0
    proc = run_bt("classify", run, "--draws", "2", "-o", tmp_path / "again")
    assert proc.returncode == 0 and cell in (tmp_path / "again" / "labels.csv").read_text()


def test_a_cell_whose_base_trace_is_gone_is_unfinished_in_status_and_classify(runs, tmp_path):  # noqa: F811
    """Issue 52: `bt status` said "done" and `bt classify` labelled a cell whose base trace was
    deleted (only `bt verify` caught it). Its probes were cut from that trace (their prefix
    is its first tokens), so the store proves it was written: the cell is incomplete."""
    run = _continued(runs, tmp_path)
    conn = sqlite3.connect(run / "store.sqlite")
    (cell,) = conn.execute("SELECT cell_id FROM samples WHERE kind='base' LIMIT 1").fetchone()
    conn.close()
    assert _delete_samples(run, f"kind='base' AND cell_id='{cell}'")
    _unfinished_and_named(run, cell, tmp_path)


def test_a_restart_only_cell_whose_base_trace_is_gone_is_unfinished_and_named(
    tiny_model_dir, tmp_path
):
    """A cell whose base trace is shorter than every anchor gets restarts alone: no probe was cut
    from its trace to prove it was written. With its base row deleted, `bt status` said "done",
    `bt classify` labelled it and `bt verify` said intact. `bt continue` works only cells with a
    stored base trace, so in a continued run its restarts are the proof."""
    from bt_cli import bt_in_process
    from continue_fixture import make_run

    run = tmp_path / "runs" / "r"
    make_run(run, tiny_model_dir, {"long": (100, 20), "short": (4, 4)}).close()
    bt_in_process(
        "continue", run, "--anchors", "64", "--budget", "4", "--answer-budget", "4",
        "--restarts", "4", "--samples", "2",
    )  # fmt: skip
    conn = sqlite3.connect(run / "store.sqlite")
    kinds = dict(
        conn.execute(
            "SELECT cell_id, group_concat(DISTINCT kind) FROM samples WHERE kind != 'base' "
            "GROUP BY cell_id"
        ).fetchall()
    )
    conn.close()
    (short,) = [cell for cell in kinds if cell.endswith(":short")]
    assert kinds[short] == "restart", kinds  # restarts alone: its trace is below anchor 64
    assert _delete_samples(run, f"kind='base' AND cell_id='{short}'")

    _unfinished_and_named(run, short, tmp_path)


def _unfinished_and_named(run, cell: str, tmp_path) -> None:
    """The cell whose base trace is gone is incomplete in `bt status` and `bt classify` alike
    (unlabelled, listed as unfinished) and `bt verify` names it (before issue 52 it named an
    orphan hidden-vector file at most, not the lost row)."""
    proc = run_bt("status", run)
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if f"{cell} " in line)
    assert "incomplete: base trace" in row and "done" not in row, proc.stdout
    out = tmp_path / "classify"
    proc = run_bt("classify", run, "--draws", "2", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert cell not in (out / "labels.csv").read_text()
    assert f"{cell},incomplete,base trace" in (out / "unfinished.csv").read_text().replace(
        f"{cell.split(':')[0]},{cell.split(':', 1)[1]},", ""
    )
    proc = run_bt("verify", run)
    assert_one_line_error(proc, 1, "damaged")
    assert f"cell {cell}: its base trace is gone" in proc.stdout, proc.stdout

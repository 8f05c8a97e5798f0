"""A crash at start-up and a refused setting leave a run as it was (issue 40, items 2-4),
through the installed `bt`: exit code, the one line, what is and is not on disk, and that a
plain rerun afterwards works. Also the refusals around it: a cohorts folder that is no folder,
a model named twice through a link, memory budgets, deleted rows, read-only runs, run names.

A crash at start-up (item 2) is made by a `sitecustomize` on PYTHONPATH that replaces the
function running the scheduler (or, for `bt base`, the grader's constructor) with one that
raises: the same place the `--kv-bits` crash of item 1 surfaced, independent of that bug."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from bt_cli import assert_one_line_error, freeze, run_bt, snapshot, stored_manifest, thaw
from shared_runs import ARITH_BASE, SMALL_CONTINUE, continued_arith_base, copy_of_arith_base

BASE = ARITH_BASE  # the session's shared run's arguments
CONTINUE = ("--answer-budget", "4", "--anchors", "4,8", "--restarts", "4", "--samples", "2")

CRASH_HOOK = """
import os
where = os.environ.get("BT_TEST_CRASH_AT_START")
if where:
    def _crash(*args, **kwargs):
        raise RuntimeError("simulated crash at start-up")
    if where == "continue":
        import breakthrough.pipeline.cell_loop as module
        module.run_scheduled = _crash
    elif where in ("base", "sample"):  # both drive their model through one module
        import breakthrough.pipeline.trajectories as module
        module.make_grader = _crash
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir, arith_base_run):
    """A `bt base` run of the tiny model (`BASE`, the session's shared one copied), the same
    run continued at B = 4 (`_continued`: the worker's shared one, read-only), and the folder
    holding the crash hook."""
    root = tmp_path_factory.mktemp("trust3")
    copy_of_arith_base(arith_base_run, root)
    hook = root / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(CRASH_HOOK)
    cont = continued_arith_base(arith_base_run, tmp_path_factory)
    return {
        "root": root,
        "base": root / "base",
        "model": tiny_model_dir,
        "hook": hook,
        "cont": cont,
    }


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _crashed(proc) -> None:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "simulated crash at start-up" in proc.stderr, proc.stderr


# ---- 2: a run's identity is committed with its first sample -----------------------------------


def test_2_a_crash_at_start_up_leaves_the_run_as_it_was_and_a_rerun_runs(runs, tmp_path):
    run = _copy(runs["base"], tmp_path / "run")
    before = snapshot(run)
    proc = run_bt(
        "continue",
        run,
        "--budget",
        "4",
        *CONTINUE,
        "--instrument",
        BT_TEST_CRASH_AT_START="continue",
        PYTHONPATH=str(runs["hook"]),
    )
    _crashed(proc)
    # no protocol, continuation setting, engine or top-up rules recorded: nothing ran under them
    assert snapshot(run) == before
    # a plain rerun with other settings is not refused ("a run never mixes them") and runs
    proc = run_bt("continue", run, "--budget", "6", *CONTINUE)
    assert proc.returncode == 0, proc.stderr
    man = stored_manifest(run)
    assert man["protocol"]["budget"] == 6
    assert man["continuation"]["signals"] == "logprobs+entropy"
    conn = sqlite3.connect(run / "store.sqlite")
    budgets = {b for (b,) in conn.execute("SELECT DISTINCT budget FROM samples WHERE kind='probe'")}
    conn.close()
    assert budgets == {6}
    assert run_bt("verify", run).returncode == 0


@pytest.mark.parametrize("command", ["base", "sample"])
def test_2_a_new_run_that_crashes_at_start_up_is_not_left_behind(runs, tmp_path, command):
    extra = ("--attempts", "1") if command == "sample" else ()
    args = (command, *BASE, *extra, "--model", runs["model"], "--runs-dir", tmp_path)
    args += ("--run", "new")
    proc = run_bt(
        *args, "--hidden-stride", "4", BT_TEST_CRASH_AT_START=command, PYTHONPATH=str(runs["hook"])
    )
    _crashed(proc)
    where = tmp_path / "attempts" / "new" if command == "sample" else tmp_path / "new"
    assert not where.exists()
    proc = run_bt(*args)  # the default stride: not refused by a run that holds nothing
    assert proc.returncode == 0, proc.stderr
    assert stored_manifest(where)["hidden_stride"] == 8


# ---- 3: weak spots from last round -------------------------------------------------------------


def test_3_bt_cohorts_dir_that_is_no_folder_is_one_line(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder\n")
    cases = {tmp_path / "nonexistent": "no such folder", a_file: "a file, not a folder"}
    for where, why in cases.items():
        for args in (("cohorts", "list"), ("base", *BASE, "--dry-run")):
            proc = run_bt(*args, cwd=tmp_path, BT_COHORTS_DIR=str(where))
            assert_one_line_error(proc, 2, f"BT_COHORTS_DIR={where}", why)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
    proc = run_bt("cohorts", "list", cwd=tmp_path, BT_COHORTS_DIR=str(tmp_path))
    assert proc.returncode == 0 and "no cohort files" in proc.stdout, proc.stderr


def test_3_cohorts_build_check_compares_the_working_cohorts_folder(tmp_path):
    assert run_bt("cohorts", "build", "arith", cwd=tmp_path).returncode == 0
    mine = tmp_path / "cohorts" / "arith.jsonl"
    proc = run_bt("cohorts", "build", "arith", "--check", cwd=tmp_path)
    assert proc.returncode == 0 and f"same  {mine}" in proc.stdout, proc.stdout
    edited = mine.read_bytes().replace(b'"answer": ', b'"answer": 1', 1)
    mine.write_bytes(edited)
    proc = run_bt("cohorts", "build", "arith", "--check", cwd=tmp_path)
    assert proc.returncode == 1 and f"DIFFERS  {mine}" in proc.stdout, proc.stdout
    assert mine.read_bytes() == edited  # --check writes nothing
    assert run_bt("cohorts", "build", "arith", cwd=tmp_path).returncode == 0
    assert run_bt("cohorts", "build", "arith", "--check", cwd=tmp_path).returncode == 0
    # a name without a working copy is checked where bt base reads it: the built-in file
    proc = run_bt("cohorts", "build", "demo", "--check", cwd=tmp_path)
    assert proc.returncode == 0 and "same" in proc.stdout, proc.stdout


def test_3_a_model_named_twice_through_a_link_is_one_run(runs, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(runs["model"], target_is_directory=True)
    both = f"{runs['model']},{link}"
    args = ("base", *BASE, "--model", both, "--runs-dir", tmp_path / "runs", "--run", "r")
    proc = run_bt(*args, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "the same model as" in proc.stdout and proc.stdout.count("base ") == 1, proc.stdout
    proc = run_bt(*args)
    assert proc.returncode == 0, proc.stderr
    assert f"--model {link}: the same model as {runs['model']}" in proc.stdout, proc.stdout
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["r"]  # not r-tiny twice
    proc = run_bt(*args)  # the plain rerun: nothing to do
    assert proc.returncode == 0 and "nothing to do" in proc.stdout, proc.stdout


def _continued(runs, tmp_path: Path) -> Path:
    """A copy of `runs["base"]` continued with `bt continue --budget 4 CONTINUE`: a copy of
    the worker's shared continuation of that run (shared_runs.SMALL_CONTINUE, the same
    arguments), which is setup here, not the behaviour under test."""
    assert SMALL_CONTINUE == ("--budget", "4", *CONTINUE)
    return _copy(runs["cont"], tmp_path / "cont")


def test_3_and_4_add_budget_refuses_run_settings_that_differ_from_the_run(runs, tmp_path):
    """`--add-budget` runs under the run's protocol, KV cache and signals: a `--budget` (3),
    `--kv-bits` or `--instrument` (4) typed beside it that differs was silently ignored."""
    run = _continued(runs, tmp_path)
    before = snapshot(run)
    for extra, needles in (
        (("--budget", "16"), ["--budget 4", "--budget 16"]),
        (("--kv-bits", "8"), ["--kv-bits 8", "no --kv-bits"]),
        (("--instrument",), ["--instrument", "without it"]),
    ):
        for dry in ((), ("--dry-run",)):
            proc = run_bt("continue", run, "--add-budget", "8", *extra, *dry)
            assert_one_line_error(proc, 2, str(run), *needles)
    assert snapshot(run) == before
    for extra in (("--budget", "4"), ()):  # the run's own B, and the plain rerun
        proc = run_bt("continue", run, "--add-budget", "8", *extra)
        assert proc.returncode == 0 and "arm B=8" in proc.stderr, proc.stderr


# ---- 4: new surfaces ------------------------------------------------------------------------


def test_4_a_memory_budget_under_one_byte_is_refused_not_no_cap(runs, tmp_path):
    run = _copy(runs["base"], tmp_path / "run")
    before = snapshot(run)
    for value in ("1e-300", "1e-10"):
        for dry in ((), ("--dry-run",)):
            proc = run_bt("continue", run, "--budget", "4", *CONTINUE, "--memory-gb", value, *dry)
            assert_one_line_error(proc, 2, f"--memory-gb {value}", "less than one byte")
    assert snapshot(run) == before
    proc = run_bt("continue", run, "--budget", "4", *CONTINUE)  # the plain rerun
    assert proc.returncode == 0, proc.stderr


def _needed(text: str) -> str:
    """The 'N GB needed' a memory refusal names."""
    return text.split(" GB needed")[0].rsplit(" ", 1)[1]


def test_4_dry_run_and_real_run_agree_on_the_smallest_memory_budget(runs, tmp_path):
    """The dry run counted the cache in the config's (absent: bfloat16) dtype, half the bytes
    of the tiny model's float32 files: it admitted rows at budgets the run then refused."""
    run = _copy(runs["base"], tmp_path / "run")
    args = ("continue", run, "--budget", "4", *CONTINUE, "--memory-gb")
    real = run_bt(*args, "0.0001")
    line = assert_one_line_error(real, 2, "--memory-gb", "cannot hold one row")
    need = _needed(line)
    dry = run_bt(*args, "0.0001", "--dry-run")
    assert dry.returncode == 0 and "bt continue will refuse it" in dry.stdout, dry.stdout
    assert _needed(dry.stdout) == need, (dry.stdout, line)
    enough = f"{float(need) * 1.05:.6f}"
    dry = run_bt(*args, enough, "--dry-run")
    assert dry.returncode == 0 and "admits" in dry.stdout, dry.stdout
    assert run_bt(*args, enough).returncode == 0


def _delete_samples(run: Path, where: str) -> list[int]:
    """Delete the samples `where` selects with their grade, signals and hidden-vector rows, as a
    user editing the store would; returns their ids."""
    conn = sqlite3.connect(run / "store.sqlite")
    with conn:
        ids = [i for (i,) in conn.execute(f"SELECT sample_id FROM samples WHERE {where}")]
        marks = ",".join("?" * len(ids))
        for table in ("grades", "signals", "hidden_vectors", "samples"):
            conn.execute(f"DELETE FROM {table} WHERE sample_id IN ({marks})", ids)
    conn.close()
    return ids


def test_4_deleted_probe_rows_unlabel_the_cell_and_verify_notices(runs, tmp_path):
    run = _continued(runs, tmp_path)
    conn = sqlite3.connect(run / "store.sqlite")
    cell, deepest = conn.execute(
        "SELECT cell_id, max(anchor) FROM samples WHERE kind='probe' GROUP BY cell_id"
    ).fetchone()
    conn.close()
    assert _delete_samples(run, f"kind='probe' AND cell_id='{cell}' AND anchor={deepest}")
    proc = run_bt("verify", run)
    assert_one_line_error(proc, 1, "damaged")
    assert f"cell {cell}: probe rows at B=4 are gone at anchor {deepest}" in proc.stdout
    proc = run_bt("status", run)
    assert proc.returncode == 0 and f"incomplete: probes at {deepest} (0 of 2)" in proc.stdout
    out = tmp_path / "classify"
    proc = run_bt("classify", run, "--draws", "2", "-o", out)
    assert proc.returncode == 0, proc.stderr
    labels = (out / "labels.csv").read_text()
    assert cell not in labels and cell in (out / "unfinished.csv").read_text(), labels
    # the plain rerun makes them again: intact, done, labelled
    assert run_bt("continue", run).returncode == 0
    assert run_bt("verify", run).returncode == 0
    proc = run_bt("classify", run, "--draws", "2", "-o", tmp_path / "again")
    assert proc.returncode == 0 and cell in (tmp_path / "again" / "labels.csv").read_text()


def test_4_a_deleted_grade_row_is_damage_not_ungraded(runs, tmp_path):
    """Held already (schema-3 checksums cover the grade); kept beside the deleted probes."""
    run = _continued(runs, tmp_path)
    ((sid,),) = _rows(run, "SELECT max(sample_id) FROM samples WHERE kind='restart'")
    conn = sqlite3.connect(run / "store.sqlite")
    with conn:
        conn.execute("DELETE FROM grades WHERE sample_id=?", (sid,))
    conn.close()
    proc = run_bt("verify", run)
    assert proc.returncode == 1 and f"sample {sid} " in proc.stdout, proc.stdout
    assert "its grade row was removed" in proc.stdout
    assert_one_line_error(run_bt("status", run), 2, "its grade row was removed", "bt verify")


def _rows(run: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(run / "store.sqlite")
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_4_writing_into_a_read_only_run_says_so_and_that_nothing_was_lost(runs, tmp_path):
    run = _continued(runs, tmp_path)
    before = snapshot(run)
    freeze(run)
    try:
        procs = [
            run_bt("grade", run, "--again"),
            run_bt("continue", run),  # nothing to do
            run_bt("continue", run, "--add-budget", "8"),
        ]
    finally:
        thaw(run)
    for proc in procs:
        line = assert_one_line_error(
            proc, 2, "the run is read-only", "nothing it holds was lost", "make it writable"
        )
        assert "disk is full" not in line, line
    assert snapshot(run) == before
    assert run_bt("grade", run, "--again").returncode == 0  # writable again: the plain rerun
    assert run_bt("continue", run).returncode == 0


def test_4_run_names_that_are_an_option_or_a_reserved_folder_are_refused(runs, tmp_path):
    for command, extra in (("base", ()), ("sample", ("--attempts", "1"))):
        for name, needle in (("-x", "not starting with '.' or '-'"), ("attempts", "bt sample")):
            args = (command, *BASE, *extra, "--model", runs["model"], "--runs-dir", tmp_path)
            for dry in ((), ("--dry-run",)):
                proc = run_bt(*args, "--run", name, *dry)
                assert_one_line_error(proc, 2, f"--run '{name}'", needle)
    assert not list(tmp_path.iterdir())
    proc = run_bt("base", *BASE, "--model", runs["model"], "--runs-dir", tmp_path, "--run", "x")
    assert proc.returncode == 0, proc.stderr


def test_4_completion_for_a_shell_bt_does_not_know_is_refused(tmp_path):
    for option in ("--show-completion", "--install-completion"):
        proc = run_bt(option, "nosuchshell", HOME=str(tmp_path))
        assert_one_line_error(proc, 2, f"{option} nosuchshell", "bash, zsh, fish")
        assert not proc.stdout
    assert not list(tmp_path.iterdir())
    proc = run_bt("--show-completion", "zsh")  # the shell named, not the one detected
    assert proc.returncode == 0 and proc.stdout.startswith("#compdef bt"), proc.stdout

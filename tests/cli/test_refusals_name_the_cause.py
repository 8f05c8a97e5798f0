"""Refusals that named a symptom instead of their cause (issue 52, weak spots), through the
installed `bt`: one line, exit 2, nothing written, and the line names the real cause.

A run held by "another bt" is held here by this test process through `runlock.run_lock`, the
same lock and holder line every writing bt takes: the line must name this process's pid."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from bt_cli import assert_one_line_error, freeze, run_bt, snapshot, thaw
from engine.serve_procs import bt_serve
from shared_runs import copy_of_arith_base

from breakthrough.runlock import run_lock


def test_add_budget_on_a_run_never_continued_says_so(arith_base_run, tmp_path):
    """It said "--anchors 64,128,...,8192: beyond every base trace" (the default grid of a run
    that records none yet), with or without --dry-run."""
    run = copy_of_arith_base(arith_base_run, tmp_path)
    before = snapshot(run)
    for extra in ((), ("--dry-run",)):
        proc = run_bt("continue", run, "--add-budget", "8", *extra)
        line = assert_one_line_error(proc, 2, "never continued", f"bt continue {run}")
        assert "beyond every base" not in line
    assert snapshot(run) == before


def test_add_budget_while_another_bt_holds_the_run_names_the_holder(arith_base_run, tmp_path):
    run = copy_of_arith_base(arith_base_run, tmp_path)
    before = snapshot(run)
    with run_lock(run):
        for extra in ((), ("--dry-run",)):
            proc = run_bt("continue", run, "--add-budget", "8", *extra)
            assert_one_line_error(proc, 2, f"pid {os.getpid()}", "never continued")
    assert snapshot(run) == before


def test_continue_on_a_run_its_first_bt_base_is_making_names_the_holder(tmp_path):
    """`bt continue runs/r` while the first `bt base` of runs/r holds it (no store yet) said
    "no store.sqlite"."""
    run = tmp_path / "runs" / "r"
    with run_lock(run):
        proc = run_bt("continue", run, "--budget", "4")
        assert_one_line_error(proc, 2, f"{run}: not a run yet", f"pid {os.getpid()}")
        proc = run_bt("status", run)
        assert_one_line_error(proc, 2, "not a run yet", f"pid {os.getpid()}")
    assert not run.exists()  # the lock's folder went with it; bt made nothing


def test_a_run_whose_store_its_first_bt_base_just_made_names_the_holder(tmp_path):
    """The moment after: its first `bt base` has made store.sqlite and not yet written the
    manifest. `bt continue` and `bt status` said "the manifest is empty: ... damaged"; named,
    such a run is refused naming the holder, and inside a folder it is skipped with a note."""
    from breakthrough.store import RunStore

    run = tmp_path / "runs" / "r"
    with run_lock(run):
        RunStore(run, create=True).close()  # as `bt base` makes it, before its manifest
        for args in (("continue", run, "--budget", "4"), ("status", run)):
            proc = run_bt(*args)
            line = assert_one_line_error(proc, 2, f"{run}: not a run yet", f"pid {os.getpid()}")
            assert "manifest" not in line
        proc = run_bt("status", run.parent)
        assert_one_line_error(proc, 2, "no run directories", f"skipped {run}: not a run yet")


def test_a_request_beyond_a_servers_context_says_so_and_that_a_rerun_cannot_help(
    tiny_model_dir, tmp_path
):
    """It exited 3 ("rerun to retry"): the server answers 400 to every such request."""
    with bt_serve(tiny_model_dir, extra=("--max-model-len", "256")) as (srv,):
        proc = run_bt(
            "base", "--cohort", "arith", "--limit", "1", "--max-tokens", "400",
            "--model", tiny_model_dir, "--runs-dir", tmp_path / "runs",
            "--backend", "vllm", "--endpoint", srv.url, "--retries", "0",
        )  # fmt: skip
    assert_one_line_error(
        proc, 2, srv.url, "+ 400 new tokens", "context of 256 tokens", "a rerun cannot help"
    )
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_grade_with_nothing_to_grade_answers_alike_on_any_archived_run(arith_base_run, tmp_path):
    """It exited 2 on an immutable run and 0 on a `chmod a-w` one: nothing to grade is read
    read-only, so both say so and exit 0, and nothing is written."""
    run = copy_of_arith_base(arith_base_run, tmp_path)
    before = snapshot(run)
    subprocess.run(["chmod", "-R", "a-w", str(run)], check=True)
    try:
        proc = run_bt("grade", run)
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(run)], check=True)
    assert proc.returncode == 0 and f"{run}: nothing to grade" in proc.stdout, proc.stderr
    freeze(run)
    try:
        proc = run_bt("grade", run)
    finally:
        thaw(run)
    assert proc.returncode == 0 and f"{run}: nothing to grade" in proc.stdout, proc.stderr
    assert proc.stderr == ""
    assert snapshot(run) == before


def _as_unprivileged(*args: object, **env: str) -> subprocess.CompletedProcess:
    """`bt ARGS` as a user permission bits apply to: root reads any folder, so as root the
    command runs as nobody (setpriv), otherwise as this user."""
    import shutil

    from bt_cli import BT, bt_env

    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            import pytest

            pytest.skip("running as root without setpriv: no user the folder is unreadable to")
        prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    return subprocess.run(
        [*prefix, str(BT), *map(str, args)],
        capture_output=True,
        text=True,
        env=bt_env(HOME="/tmp", **env),
        cwd="/tmp",
        timeout=120,
    )


def test_an_unreadable_cohorts_folder_is_one_line_for_list_and_base():
    """`bt cohorts list` said "no cohort files" and exited 0, `bt base` "Permission denied"."""
    import shutil
    import tempfile

    from breakthrough.tasks.cohorts import builtin_cohorts_dir

    root = Path(tempfile.mkdtemp(prefix="bt-cohorts-", dir="/tmp"))  # reachable by nobody
    try:
        root.chmod(0o755)
        folder = root / "cohorts"
        folder.mkdir()
        shutil.copy(builtin_cohorts_dir() / "arith.jsonl", folder / "arith.jsonl")
        folder.chmod(0o000)
        env = {"BT_COHORTS_DIR": str(folder)}
        for args in (("cohorts", "list"), ("base", "--cohort", "arith", "--dry-run")):
            proc = _as_unprivileged(*args, **env)
            assert_one_line_error(
                proc, 2, f"BT_COHORTS_DIR={folder}: cannot read the folder (Permission denied)"
            )
    finally:
        (root / "cohorts").chmod(0o755)
        shutil.rmtree(root)

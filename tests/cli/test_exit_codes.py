"""Exit codes and messages of the real `bt` console script (typer 0.29 bundles its own click,
which the entry point must handle): a usage error is one line and exit 2, plain `bt` is help,
Ctrl-C is "interrupted, rerun to resume" and exit 130 with the store intact (SIGTERM the same,
"terminated", 143), and a failed
`--check` is exit 1."""

from __future__ import annotations

import os
import signal
import sqlite3
import time

import pytest
from bt_cli import assert_one_line_error, run_bt, start_bt


def test_usage_error_is_one_line_and_exit_2():
    proc = run_bt("continue", "--budget", "abc")
    assert_one_line_error(proc, 2, "--budget", "bt continue --help")


def test_unknown_command_and_option_are_usage_errors():
    assert_one_line_error(run_bt("nosuch"), 2, "nosuch")
    assert_one_line_error(run_bt("status", "--nosuch"), 2, "--nosuch")


def test_version_and_top_level_usage_error_without_a_doubled_prefix():
    import breakthrough

    proc = run_bt("--version")
    assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (
        0,
        f"bt {breakthrough.__version__}",
        "",
    )
    line = assert_one_line_error(run_bt("--nosuch"), 2, "--nosuch")
    assert line.startswith("bt: error: No such option"), line  # not "bt: error: bt: ..."
    line = assert_one_line_error(run_bt("status", "--nosuch"), 2)
    assert line.startswith("bt: error: bt status: No such option"), line


def test_plain_bt_prints_help_without_traceback():
    proc = run_bt()
    assert proc.returncode == 0, proc.stderr
    assert "Usage: bt" in proc.stdout and "continue" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    proc = run_bt("cohorts")
    assert proc.returncode == 0 and "build" in proc.stdout and not proc.stderr


def test_check_mismatch_exits_1(tmp_path):
    proc = run_bt("cohorts", "build", "demo", "--check", "--out", tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "DIFFERS" in proc.stdout and "Traceback" not in proc.stderr
    assert not list(tmp_path.iterdir())  # --check writes nothing


def _wait_for_cells(store, proc, limit_s: float = 120.0) -> None:
    """Poll (bounded) until `bt base` has written its cells: generation starts right after."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if store.is_file():
            try:
                with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as c:
                    if c.execute("SELECT count(*) FROM cells").fetchone()[0]:
                        return
            except sqlite3.OperationalError:
                pass  # schema not written yet
        time.sleep(0.2)
    raise AssertionError("bt base wrote no cells in time")


@pytest.mark.parametrize(
    ("sig", "code", "line"),
    [
        (signal.SIGINT, 130, "bt: interrupted, rerun to resume"),
        # `kill`, a batch system's time limit: it exited 143 without a word before
        (signal.SIGTERM, 143, "bt: terminated, rerun to resume"),
    ],
    ids=["ctrl-c", "sigterm"],
)
def test_a_signal_during_generation_is_one_line_and_keeps_the_store(
    tmp_path, tiny_model_dir, sig, code, line
):
    run = tmp_path / "runs" / "r"
    args = (
        "base",
        "--cohort",
        "demo",
        "--model",
        tiny_model_dir,
        "--limit",
        "2",
        "--max-tokens",
        "16000",
        "--runs-dir",
        tmp_path / "runs",
        "--run",
        "r",
    )
    proc = start_bt(*args)
    try:
        _wait_for_cells(run / "store.sqlite", proc)
        time.sleep(1.0)  # let it generate for a moment (not an assertion on time)
        os.killpg(proc.pid, sig)  # the whole group, as Ctrl-C in a terminal or a job's end
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, (out, err)
    assert err.strip().splitlines()[-1] == line and "Traceback" not in err, err
    with sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True) as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        keys = {k for (k,) in c.execute("SELECT key FROM manifest")}
        assert {"model_revision", "protocol"} <= keys
        assert c.execute("SELECT count(*) FROM cells").fetchone()[0] == 2

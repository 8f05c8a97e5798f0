"""Runs several test files build with the same `bt` command line, made once per worker (a
session fixture) and copied by each module before it writes into one."""

from __future__ import annotations

import shutil
from pathlib import Path

from bt_cli import run_bt

ARITH_BASE = ("--cohort", "arith", "--limit", "1", "--max-tokens", "24")


def build_arith_base(folder: Path, model: Path) -> None:
    """FOLDER/base: `bt base` `ARITH_BASE` of `model`, through the installed `bt`."""
    proc = run_bt("base", *ARITH_BASE, "--model", model, "--runs-dir", folder, "--run", "base")
    assert proc.returncode == 0, proc.stderr


def copy_of_arith_base(shared: Path, runs_dir: Path) -> Path:
    """RUNS_DIR/base: a module's own copy of the session's `arith_base_run`."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copytree(shared, runs_dir / "base"))


# The continuation the CLI tests run on such a run: B = 4, answer 4, anchors 4 and 8, one
# restart budget, 2 samples (every phase of the protocol, at a few tokens each).
SMALL_CONTINUE = (
    *("--budget", "4", "--answer-budget", "4", "--anchors", "4,8"),
    *("--restarts", "4", "--samples", "2"),
)

"""Runs several test files build with the same `bt` command line, made once per worker (a
session fixture) and copied by each module before it writes into one.

These runs are *setup*: the state a test reads or copies, never the behaviour it checks. So
they are made by `bt_in_process`, the same typer app the console script runs, called in the
test process: a `bt` subprocess that loads a model pays about 2 s of CPU to import mlx-lm and
transformers before its first token, and the test process has them loaded already (the tiny
model's fixtures import them). Every `bt` whose exit code, output or effect a test checks still
runs the installed console script (bt_cli.run_bt)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from bt_cli import bt_in_process

ARITH_BASE = ("--cohort", "arith", "--limit", "1", "--max-tokens", "24")


def build_arith_base(folder: Path, model: Path) -> None:
    """FOLDER/base: `bt base` `ARITH_BASE` of `model` (through the app in this process)."""
    bt_in_process("base", *ARITH_BASE, "--model", model, "--runs-dir", folder, "--run", "base")


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

_CONTINUED: dict[Path, Path] = {}


def continued_arith_base(shared: Path, factory: pytest.TempPathFactory) -> Path:
    """A copy of the session's `arith_base_run` (`shared`) continued with `SMALL_CONTINUE`,
    named `cont`: made once per worker (like `arith_base_run`, whose model registration is the
    worker's own) and shared by every module that asks; read-only, a test copies it before it
    writes into it."""
    if shared not in _CONTINUED:
        cont = Path(shutil.copytree(shared, factory.mktemp("arith-cont") / "cont"))
        bt_in_process("continue", cont, *SMALL_CONTINUE)
        _CONTINUED[shared] = cont
    return _CONTINUED[shared]

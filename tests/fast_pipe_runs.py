"""Setup state several pipeline tests build the same way, built once and copied.

`two_cell_copy`: the pipeline tests' `fixture_run` (continue_fixture.TWO_CELLS, made without
generating anything) built once per test session across workers (tests/build_once.py) and
copied into each test's own folder, so a test that writes into it writes into its copy.

`in_process_bt`: a `bt` command line run in the test process (typer's CliRunner on the same
`app` the console script runs), for reference runs a test only compares against (the run an
uninterrupted `bt sample` makes, say): the test's subject is elsewhere, so the ~2 s a fresh
process spends importing mlx-lm and transformers buys nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from build_once import build_once
from continue_fixture import two_cell_run


def two_cell_copy(factory: pytest.TempPathFactory, model_dir: Path, root: Path) -> Path:
    """ROOT/runs/fx: a copy of the session's two-cell run (what `two_cell_run(ROOT, model_dir)`
    makes; it generates nothing, so every build is the same)."""
    built = build_once(factory, "fast-pipe-two-cell-run", lambda f: two_cell_run(f, model_dir))
    dest = root / "runs" / "fx"
    dest.parent.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copytree(built / "runs" / "fx", dest))


def in_process_bt(*args: object) -> None:
    """`bt ARGS` in this process; fails the test (with bt's output) unless it exits 0."""
    from typer.testing import CliRunner

    from breakthrough.cli import app

    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, (res.output, res.exception)

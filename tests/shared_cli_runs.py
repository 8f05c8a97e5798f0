"""Setup state for CLI tests, made in the test process instead of an installed `bt` subprocess.

A test whose subject is one `bt` command often first needs a run that other commands made (a
base run to continue, a continued run to damage, signals for `bt confirm` to read). Made by the
installed console script, each such step pays a fresh interpreter, the mlx-lm / transformers
imports and a model load (~2-3 s of CPU) before it does a few milliseconds of work. Here the
same typer app the console script runs (`breakthrough.cli.app`, as tests/report/conftest.py
does) makes that state in this process: the same code and arguments, so the same run on disk.

Only for setup: a command whose exit code, output or effect a test checks still runs through
the installed script (tests/bt_cli.run_bt)."""

from __future__ import annotations

from typing import Any

from typer.testing import CliRunner


def bt_in_process(*args: object) -> Any:
    """`bt ARGS`, run in this process to completion; fails the test unless it exits 0.
    Returns click's `Result` (its `output` holds what the command printed)."""
    from breakthrough.cli import app

    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, (args, res.exit_code, res.output, res.exception)
    return res

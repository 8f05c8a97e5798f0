"""Run the installed `bt` console script in a subprocess, as a user does: exit codes, stdout and
stderr exactly as a shell sees them (an in-process runner would hide a traceback or an exit
code that only the real entry point produces)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BT = Path(sys.executable).parent / "bt"


def require_bt() -> None:
    """Fail (never skip) without the installed console script: a missing script is a broken
    install, and a test that skipped for it would let a green suite hide that."""
    if not BT.is_file():
        pytest.fail(
            f"no installed console script at {BT}: a broken install "
            "(pip install -e . puts it there)",
            pytrace=False,
        )


def bt_env(**extra: str) -> dict[str, str]:
    """The test process's environment (HF_HUB_OFFLINE, BT_CACHE_DIR) plus `extra`."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200", **extra}


def run_bt(
    *args: object, cwd: Path | None = None, timeout: float = 300, **env: str
) -> subprocess.CompletedProcess:
    """`bt ARGS` to completion (bounded by `timeout`), text output captured."""
    return subprocess.run(
        [str(BT), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=bt_env(**env),
        timeout=timeout,
    )


def bt_in_process(*args: object) -> Any:
    """`bt ARGS` through the same typer app in this process (typer's CliRunner); fails the test
    unless it exits 0; returns click's `Result` (`.output` holds what it printed).

    For *setup* only: a run a test reads, copies or compares against, while its subject is
    another command. A `bt` subprocess that loads a model spends ~2 s of CPU importing mlx-lm and
    transformers before its first token, which this process has loaded already; the same code
    and arguments make the same run on disk, and a model it registers goes to this process's
    BT_CACHE_DIR, as a `bt` started from here would. A `bt` whose exit code, output or effect the
    test checks runs the installed script (`run_bt`)."""
    from typer.testing import CliRunner

    from breakthrough.cli import app

    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, (args, res.exit_code, res.output, repr(res.exception))
    return res


def start_bt(*args: object, cwd: Path | None = None, **env: str) -> subprocess.Popen:
    """`bt ARGS` started in the background in its own session, so a signal can go to its whole
    process group as Ctrl-C in a terminal does (the caller stops it by its PID)."""
    return subprocess.Popen(
        [str(BT), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=bt_env(**env),
        start_new_session=True,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, code: int = 2, *needles: str) -> str:
    """Exit `code`, no traceback, exactly one line on stderr containing every needle; returns
    the line."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def snapshot(run: Path) -> dict[str, bytes]:
    """Every file of a run directory (store, WAL, hidden vectors) by relative path; not the
    -shm file, SQLite's shared-memory index, which readers update by design, nor an empty
    -wal (a reader of a WAL store opens one; it holds nothing)."""
    return {
        str(p.relative_to(run)): p.read_bytes()
        for p in sorted(run.rglob("*"))
        if p.is_file()
        and not p.name.endswith("-shm")
        and not (p.name.endswith("-wal") and p.stat().st_size == 0)
    }


def freeze(run: Path) -> None:
    """`run` read-only as an archive is: `chattr -R +i` when root (a root process writes
    through permission bits), else `chmod -R a-w`; skips where the filesystem refuses."""
    if os.geteuid() == 0:
        done = subprocess.run(["chattr", "-R", "+i", str(run)], capture_output=True)
        if done.returncode != 0:
            subprocess.run(["chattr", "-R", "-i", str(run)], capture_output=True)
            pytest.skip(f"chattr +i is not supported here: {done.stderr.decode().strip()}")
    else:
        subprocess.run(["chmod", "-R", "a-w", str(run)], check=True)


def thaw(run: Path) -> None:
    """Undo `freeze`."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-R", "-i", str(run)], check=True)
    else:
        subprocess.run(["chmod", "-R", "u+w", str(run)], check=True)


def stored_manifest(run: Path) -> dict:
    """A run's manifest as the store holds it (read with sqlite3, not through bt: what a
    command left on disk)."""
    conn = sqlite3.connect(run / "store.sqlite")
    try:
        return {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM manifest")}
    finally:
        conn.close()

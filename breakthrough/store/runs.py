"""Runs named on a command line: which folders are runs, and the name each run has in a table
of several runs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from breakthrough.errors import BtError
from breakthrough.store.records import STORE_FILE


def run_names(dirs: Sequence[str | Path]) -> list[str]:
    """The names of these runs in every multi-run table (`bt classify`'s `run` column, which
    `bt confirm` joins its labels on): a run's folder name, a repeated one with -2, -3, ... in
    argument order."""
    names: list[str] = []
    for d in map(Path, dirs):
        name, i = d.name, 2
        while name in names:
            name, i = f"{d.name}-{i}", i + 1
        names.append(name)
    return names


def run_dirs(paths: Sequence[str | Path]) -> list[Path]:
    """Expand arguments into run directories: a run dir itself, or a folder of run dirs."""
    found: list[Path] = []
    for p in map(Path, paths):
        if (p / STORE_FILE).exists():
            found.append(p)
        elif p.is_dir():
            found.extend(sorted(d for d in p.iterdir() if (d / STORE_FILE).exists()))
        else:
            raise BtError(f"{p}: no such run directory")
    if not found:
        raise BtError(f"no run directories (with {STORE_FILE}) under {', '.join(map(str, paths))}")
    seen: set[Path] = set()  # a run named twice (`bt continue r r`, or `r` and `./r`) is one run
    unique = []
    for run in found:
        key = run.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(run)
    return unique

"""Runs named on a command line: which folders are runs (`find_runs`, the one test of what a
run is), and the name each run has in a table of several runs (`run_names`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from breakthrough.errors import BtError
from breakthrough.runlock import held_by
from breakthrough.store.core import RunStore
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


# The files that mark a folder as the output of an analysis command (never a run: no store).
OUTPUT_MARKERS = (
    ("labels.parquet", "bt classify output"),
    ("headlines.json", "bt report study output"),
    ("confirm.json", "bt confirm output"),
    ("sweep.json", "bt confirm output"),
    ("probe_summary.json", "bt probe output"),
    ("index.html", "a report"),
)


def is_run_dir(path: str | Path) -> bool:
    """The one test of what a run is: a folder holding bt's store (`store.sqlite`). Analysis
    outputs (`classify/`, `study/`, `confirm/`, `probe/`) hold none, so they are never runs."""
    return (Path(path) / STORE_FILE).is_file()


def _not_a_run(path: Path) -> str:
    """Why `path` is no run, in a few words (the output it is, when it is one)."""
    what = next((w for f, w in OUTPUT_MARKERS if (path / f).is_file()), None)
    return f"not a run: {what}" if what else f"not a run: no {STORE_FILE}"


@dataclass
class FoundRuns:
    """What `find_runs` made of the paths given: the runs, and one note per path skipped."""

    runs: list[Path]
    notes: list[str] = field(default_factory=list)


def _in_the_making(run: Path) -> str | None:
    """Why `run` is not a run yet when its first `bt base` has made the store and not yet
    given it a manifest (the moment between the two), naming that bt as the folder before it
    is named, never "the manifest is empty" (damage); None otherwise. The store is read only
    when another bt holds the run."""
    holder = held_by(run)
    if holder is None:
        return None
    with RunStore(run, readonly=True, check_manifest=False) as store:
        if store.raw_manifest():
            return None
    return f"{run}: not a run yet: another bt is making it ({holder}); let it finish, then rerun"


def find_runs(paths: Sequence[str | Path], *, study: bool = False) -> FoundRuns:
    """Expand the paths a command was given (`runs/`, `runs/*`, run folders) into runs: a run
    folder (`is_run_dir`) is kept; a folder holding runs stands for them; any other folder
    (an analysis output such as `runs/classify`, an empty folder) is skipped with one note.
    With `study`, a `bt sample` / `bt cohorts screen` run (independent attempts: no probes, no
    restarts) is skipped too, with one note naming them; it is a run, but not of the study.
    A run its first `bt base` is still making (`_in_the_making`) is refused naming that bt
    when named, skipped with one note inside a folder. Refused (one line) when a path does
    not exist or no run is left."""
    found: list[Path] = []
    notes: list[str] = []
    for p in map(Path, paths):
        if is_run_dir(p):
            if making := _in_the_making(p):
                raise BtError(making)
            found.append(p)
        elif p.is_dir():
            inside = []
            for d in sorted(d for d in p.iterdir() if is_run_dir(d)):
                if making := _in_the_making(d):  # the others are read as they are
                    notes.append(f"skipped {making}")
                else:
                    inside.append(d)
            if inside:
                found.extend(inside)
            elif holder := held_by(p):  # its first `bt base` has not made the store yet
                raise BtError(
                    f"{p}: not a run yet: another bt is making it ({holder}); let it "
                    f"finish, then rerun"
                )
            else:
                notes.append(f"skipped {p} ({_not_a_run(p)})")
        else:
            raise BtError(f"{p}: no such run directory")
    seen: set[Path] = set()  # a run named twice (`bt continue r r`, or `r` and `./r`) is one run
    unique = []
    for run in found:
        key = run.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(run)
    skipped: list[Path] = []
    if study:
        kept: list[Path] = []
        for d in unique:
            with RunStore(d, readonly=True) as store:
                (kept if store.run_kind() == "base" else skipped).append(d)
        if skipped and not kept:
            raise BtError(
                f"{', '.join(map(str, skipped))}: `bt sample` run"
                f"{'s' if len(skipped) > 1 else ''} (independent attempts), not a study "
                f"run of `bt base` + `bt continue`; nothing to label"
            )
        unique = kept
    if not unique:
        raise BtError(
            f"no run directories (with {STORE_FILE}) under {', '.join(map(str, paths))}"
            + (f" ({'; '.join(notes)})" if notes else "")
        )
    if skipped:
        notes.append(
            f"skipped {len(skipped)} `bt sample` run{'s' if len(skipped) > 1 else ''} "
            f"(independent attempts, not a study run): {', '.join(map(str, skipped))}"
        )
    return FoundRuns(unique, notes)


def run_dirs(paths: Sequence[str | Path]) -> list[Path]:
    """`find_runs(paths).runs`, for a caller with no one to tell what was skipped."""
    return find_runs(paths).runs

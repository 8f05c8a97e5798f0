"""Which runs `bt continue` works on: the study runs it was given, and of the runs it found by
looking inside a folder (a plain `bt continue` looks in `--runs-dir`), only those of a task
family the prefix study continues.

A run of the optimum family (`bt base --cohort uoo29`) is made for `bt report uoo`, which reads
its base samples only; probing and restarting it is minutes of generation nobody asked for. So a
run of such a family found inside a folder is skipped with one note naming it and how to
continue it anyway (name its folder); a run named on the command line is continued whatever its
family. Only when no run is left is it an error, before anything is generated."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from breakthrough.errors import BtError
from breakthrough.store import FoundRuns, RunStore, find_runs, is_run_dir

# Task families whose runs a plain `bt continue` takes: the study's (math) and its
# demonstration (arith, `make demo`). Runs made before `task_family` was recorded are math.
CONTINUED_FAMILIES = ("math", "arith")


def task_family_of(run_dir: Path) -> str:
    """The task family a run's manifest records (math when it records none)."""
    with RunStore(run_dir, readonly=True) as store:
        return str(store.manifest().get("task_family") or "math")


def continue_targets(paths: Sequence[str | Path]) -> FoundRuns:
    """`find_runs(paths, study=True)`, less the runs found inside a folder whose task family
    is not in `CONTINUED_FAMILIES` (one note for them); refused in one line when none is
    left."""
    found = find_runs(paths, study=True)
    named = {Path(p).resolve() for p in paths if is_run_dir(p)}
    kept: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    for run in found.runs:
        family = task_family_of(run)
        if run.resolve() in named or family in CONTINUED_FAMILIES:
            kept.append(run)
        else:
            skipped.append((run, family))
    if not skipped:
        return found
    what = ", ".join(f"{run} ({family} task family)" for run, family in skipped)
    why = (
        "is continued only when named (an optimum run is made for `bt report uoo`, which reads "
        f"its base samples only); to probe it anyway: bt continue {skipped[0][0]}"
    )
    if not kept:
        raise BtError(f"{what}: not a study run of `bt continue`: a run found in a folder {why}")
    return FoundRuns(kept, [*found.notes, f"skipped {what}: a run of that family {why}"])

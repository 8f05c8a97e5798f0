"""`bt grade`: (re)grade stored samples without regenerating them (design decision 6)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from breakthrough.store import RunStore
from breakthrough.tasks.family import family_of, make_grader


@dataclass
class GradeReport:
    run_dir: Path
    graded: int
    correct: int
    version: str


def regrade_run(run_dir: Path, *, again: bool = False) -> GradeReport:
    """Grade the samples of a run that have no grade (every sample with `again`). Whether
    there is anything to grade is read first, read-only: a run with nothing to grade is
    answered alike whether its folder can be written or not (an archived, immutable run too);
    only grading opens it for writing."""
    with RunStore(run_dir, readonly=True) as store:
        if not store.ungraded(include_graded=again):
            return GradeReport(run_dir, 0, 0, "")
    with RunStore(run_dir) as store:
        todo = store.ungraded(include_graded=again)
        if not todo:
            return GradeReport(run_dir, 0, 0, "")
        items = store.items()
        grader = make_grader(family_of(list(items.values())), run_dir)
        try:
            grades = grader.grade_many([(text, items[cid], fin) for _, cid, text, fin in todo])
        finally:
            getattr(grader, "close", lambda: None)()
        store.set_grades([(sid, g) for (sid, *_), g in zip(todo, grades, strict=True)])
    return GradeReport(run_dir, len(grades), sum(g.correct for g in grades), grades[0].version)

"""`bt grade`: (re)grade stored samples without regenerating them (design decision 6)."""

from __future__ import annotations

from pathlib import Path

import typer


def grade(
    runs: list[Path] = typer.Argument(..., help="Run directories (or a folder of runs)."),
    again: bool = typer.Option(
        False, "--again", help="Regrade every sample, not only the ungraded ones (e.g. after a grader update)."
    ),
) -> None:
    """Grade the samples of RUN that have no grade (or all of them with --again)."""
    from rich.console import Console

    from breakthrough.scheduler import grader_for
    from breakthrough.store import RunStore, run_dirs

    console = Console()
    for run_dir in run_dirs(runs):
        with RunStore(run_dir) as store:
            todo = store.ungraded(include_graded=again)
            items = store.items()
            if not todo:
                console.print(f"{run_dir}: nothing to grade")
                continue
            grader = grader_for(list(items.values()), run_dir)
            try:
                grades = grader.grade_many([(text, items[cid], fin) for _, cid, text, fin in todo])
            finally:
                getattr(grader, "close", lambda: None)()
            store.set_grades([(sid, g) for (sid, *_), g in zip(todo, grades)])
            solved = sum(g.correct for g in grades)
            console.print(f"{run_dir}: graded {len(grades)} samples ({solved} correct) with {grades[0].version}")


def register(app: typer.Typer) -> None:
    app.command("grade")(grade)

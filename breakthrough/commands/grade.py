"""`bt grade`: (re)grade stored samples without regenerating them (design decision 6)."""

from __future__ import annotations

from pathlib import Path

import typer

from breakthrough.commands.options import count


def grade(
    runs: list[Path] = typer.Argument(..., help="Run directories (or a folder of runs)."),
    again: bool = typer.Option(
        False,
        "--again",
        help="Regrade every sample, not only the ungraded ones (e.g. after a grader update).",
    ),
) -> None:
    """Grade the samples of RUN that have no grade (or all of them with --again)."""
    from rich.console import Console

    from breakthrough.pipeline.grading import regrade_run
    from breakthrough.store import find_runs

    console = Console()
    found = find_runs(runs)
    for note in found.notes:  # folders that are no run
        typer.echo(f"note: {note}", err=True)
    for run_dir in found.runs:
        rep = regrade_run(run_dir, again=again)
        if not rep.graded:
            console.print(f"{run_dir}: nothing to grade")
        else:
            console.print(
                f"{run_dir}: graded {count(rep.graded, 'sample')} ({rep.correct} correct) "
                f"with {rep.version}"
            )


def register(app: typer.Typer) -> None:
    app.command("grade", short_help="Grade a run's stored samples without regenerating them.")(
        grade
    )

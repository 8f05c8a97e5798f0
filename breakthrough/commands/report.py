"""`bt report ...`: reports over finished runs. `bt report uoo RUN...` prints the
Uniqueness-of-Optimum leaderboard and count metrics.

Parses the options, calls `breakthrough.report.uoo_report.uoo_report` and prints its tables."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from breakthrough.errors import BtError


def _print(tables: list, console: Console) -> None:
    """Each `TextTable` as a rich table, its note after it."""
    for tt in tables:
        t = Table(title=tt.title)
        for col in tt.columns:
            t.add_column(col, justify="left" if col in tt.left else "right")
        for row in tt.rows:
            t.add_row(*row)
        console.print(t)
        if tt.note:
            console.print(tt.note)


def uoo(
    runs: list[Path] = typer.Argument(..., help="Run directories (or folders of run dirs)."),
    cohort: str = typer.Option(
        "uoo87", "--cohort", help="Cohort holding the items (uoo87 covers uoo29)."
    ),
    variant: Optional[str] = typer.Option(
        None, "--variant", help="Prompt variant label for runs that do not record one."
    ),
    ci: str = typer.Option("wilson", "--ci", help="Leaderboard interval: wilson | exact."),
) -> None:
    """Uniqueness-of-Optimum report: leaderboard over the 29, count accuracy by bin and kind,
    under/over-counts, Fisher / exact McNemar between runs, run-to-run count agreement."""
    from breakthrough.report.uoo_report import uoo_report  # imported when run, not at start-up

    if ci not in ("wilson", "exact"):
        raise BtError(f"--ci: expected wilson or exact, got {ci!r}")
    _print(uoo_report(runs, cohort=cohort, variant=variant, ci=ci), Console(width=160))


def register(app: typer.Typer) -> None:
    report_app = typer.Typer(
        help="Reports over finished runs.", no_args_is_help=True, add_completion=False
    )
    report_app.command("uoo")(uoo)
    app.add_typer(report_app, name="report")

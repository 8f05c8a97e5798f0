"""`bt status`: what is done and what remains per cell."""

from __future__ import annotations

from pathlib import Path

import typer

from breakthrough.commands.options import json_option, print_json


def status(
    runs: list[Path] = typer.Argument(
        ..., metavar="RUN", help="Run directories, or folders of runs (e.g. runs/)."
    ),
    tau: float = typer.Option(
        None, help="Solve-rate threshold used to plan what remains (default: the run's)."
    ),
    as_json: bool = json_option(),
) -> None:
    """What is done and what remains per cell: base, probes (anchors, k/n) at the run's B,
    restarts, and the samples still planned under the run's --topup rules; a cell that has not
    run its protocol says `not continued` or `incomplete` (what it lacks), and a count line
    closes each run. Reads the protocol and the top-up rules stored in the run. With --json:
    a list with one object per run (run, title, cells, counts)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from breakthrough.pipeline.status import run_status
    from breakthrough.store import find_runs

    if tau is not None:  # nan or 2 would plan nothing sensible: refused in one line
        from breakthrough.protocol import DEFAULT

        DEFAULT.with_overrides(tau=tau).validate()
    found = find_runs(runs)
    for note in found.notes:  # folders that are no run
        typer.echo(f"note: {note}", err=True)
    if as_json:
        print_json([run_status(run_dir, tau).as_dict(run_dir) for run_dir in found.runs])
        return
    console = Console()
    if not console.is_terminal:  # piped: whole lines (a pipe has no width to fold cell ids to)
        console = Console(width=100_000)
    for run_dir in found.runs:
        status = run_status(run_dir, tau)
        title, rows = status.title, status.cells
        table = Table(title=escape(title))
        table.add_column("cell", no_wrap=True)
        for col in ("base", "reasoning", "probes t:k/n", "restarts C:k/n", "next"):
            table.add_column(col, overflow="fold")
        for r in rows:
            # escaped: rich would take a plan's "[ambiguity]" for markup and drop it
            table.add_row(
                *map(escape, (r.cell_id, r.base, r.reasoning, r.probes, r.restarts, r.next))
            )
        console.print(table)
        console.print(status.count_line(), highlight=False)


def register(app: typer.Typer) -> None:
    app.command("status", short_help="Show what is done and what remains per cell.")(status)

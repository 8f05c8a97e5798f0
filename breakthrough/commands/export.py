"""`bt export`: flat tables of a run for pandas users (samples with grades, and cells).

Parses the options, calls `breakthrough.report.export.export_run` and prints what it wrote."""

from __future__ import annotations

from pathlib import Path

import typer

from breakthrough.errors import BtError


def export(
    run: Path = typer.Argument(..., help="Run directory (holding store.sqlite)."),
    format: str = typer.Option("parquet", "--format", "-f", help="parquet or csv."),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Output folder (default: RUN/export)."
    ),
    arrays: bool = typer.Option(
        True, help="Include per-token arrays (token ids, segments, log-probs, entropies)."
    ),
) -> None:
    """Write RUN's samples (joined with grades and cells) and cells as flat tables."""
    from breakthrough.report.export import export_run  # imported when run, not at `bt` start-up

    if format not in ("parquet", "csv"):
        raise BtError(f"--format: expected parquet or csv, got {format!r}")
    for path in export_run(run, out, format=format, arrays=arrays):
        typer.echo(f"wrote {path}")


def register(app: typer.Typer) -> None:
    app.command("export", short_help="Write a run's samples and cells as flat tables.")(export)

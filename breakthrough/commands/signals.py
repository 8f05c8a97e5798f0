"""`bt signals`: protocol 9.5's 15 frozen per-trajectory summaries and 9.8's 8-feature stream
summary of a run, to parquet.

Parses the options, calls `breakthrough.signals.run_signals.run_signals` and prints what it
wrote."""

from __future__ import annotations

from pathlib import Path

import typer

from breakthrough.errors import BtError


def signals(
    run: Path = typer.Argument(..., help="Run directory (holding store.sqlite)."),
    window: int = typer.Option(
        512, help="Summarise each trajectory's first WINDOW generated tokens (protocol 9.5: 512)."
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Output parquet file (default: RUN/signals.parquet)."
    ),
) -> None:
    """Write one row per trajectory of RUN: the 15 frozen summaries (9.5) and the stream summary
    (9.8)."""
    if window < 2:
        raise BtError(f"--window: must be at least 2 tokens, got {window}")
    if out is not None and out.suffix != ".parquet":
        raise BtError(f"--out: expected a .parquet file, got {out}")
    from breakthrough.signals.run_signals import run_signals  # imported when run, not at start-up

    path, rows = run_signals(run, out, window=window)
    typer.echo(f"wrote {path} ({rows:,} trajector{'y' if rows == 1 else 'ies'})")
    if rows:
        from breakthrough.signals.coverage import table_coverage

        for line in table_coverage(path):  # what the run holds and what it lacks
            typer.echo(f"  {line}")


def register(app: typer.Typer) -> None:
    app.command("signals", short_help="Write one row of frozen summaries per trajectory.")(signals)

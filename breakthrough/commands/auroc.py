"""`bt auroc`: pooled / within / between AUROC decomposition of a score on any table.

Parses the options, calls `breakthrough.analyses.auroc.auroc_table` (reading, checks,
decomposition, JSON) and prints its summary; warnings about dropped rows go to stderr.
"""

from __future__ import annotations

from pathlib import Path

import typer

from breakthrough.commands.options import MAX_DRAWS


def auroc(
    table: Path = typer.Argument(..., help="CSV, TSV or parquet table (e.g. `bt export` output)."),
    group: list[str] = typer.Option(
        ...,
        "--group",
        "-g",
        help="Group column (problem, or cell); repeat to key groups on several columns.",
    ),
    score: list[str] = typer.Option(
        ...,
        "--score",
        "-s",
        help="Score column, read as higher = more likely correct; repeat for a second score "
        "(differences are reported as second - first on the same rows).",
    ),
    label: str = typer.Option(..., "--label", "-l", help="Outcome column: 1/true = correct."),
    by: str | None = typer.Option(
        None,
        "--by",
        help="Also report each value of this column on its own; groups are then keyed on "
        "(BY, GROUP...) while the bootstrap still resamples GROUP... units.",
    ),
    bootstrap: int = typer.Option(
        2000,
        "--bootstrap",
        "-b",
        min=0,
        max=MAX_DRAWS,
        help="Group-clustered bootstrap draws (0: no intervals).",
    ),
    seed: int | None = typer.Option(
        None, "--seed", help="Bootstrap seed (numpy Generator; default: the seed of protocol 9.8)."
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="JSON output (default: TABLE's name + .auroc.json beside it)."
    ),
    drop_singletons: bool = typer.Option(
        False,
        "--drop-singletons",
        help="Drop groups holding a single row (with a warning) instead of stopping.",
    ),
) -> None:
    """Pooled / within / between AUROC decomposition with the LOO reference and bootstrap CIs.

    Over all success/failure pairs: pooled = lambda * within + (1 - lambda) * between.

    lambda is the share of those pairs that lie inside a group.

    Rows missing the label, a score or a group value are dropped with a warning.

    LOO reference: each row scored by the mean correctness of the other rows of its group.
    """
    from breakthrough.analyses.auroc import auroc_table  # pandas and scipy: not at `bt` start-up
    from breakthrough.errors import BtError

    if seed is not None and not 0 <= seed < 2**63:  # numpy's Generator takes no negative seed
        raise BtError(f"--seed: expected an integer in 0..{2**63 - 1}, got {seed}")

    result = auroc_table(
        table,
        group=group,
        score=score,
        label=label,
        by=by,
        bootstrap=bootstrap,
        seed=seed,
        out=out,
        drop_singletons=drop_singletons,
    )
    for warning in result.warnings:
        typer.echo(f"bt: warning: {warning}", err=True)
    for line in result.lines():
        typer.echo(line)
    typer.echo(f"wrote {result.out}")


def register(app: typer.Typer) -> None:
    app.command("auroc", short_help="Pooled, within- and between-problem AUROC of a score column.")(
        auroc
    )

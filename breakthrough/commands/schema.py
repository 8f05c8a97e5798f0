"""`bt schema [TABLE]`: what each table bt writes holds (columns, types, units, when a value is
empty, what it means), from the declarations every writer is checked against.

Parses the options, calls `breakthrough.schemas.docs.describe` and prints the text."""

from __future__ import annotations

import typer


def schema(
    table: str | None = typer.Argument(
        None, help="A table's name (e.g. labels, curves, signals); none: list them all."
    ),
    markdown: bool = typer.Option(
        False, "--markdown", help="Print every table's section: docs/outputs.md as generated."
    ),
) -> None:
    """Describe the tables bt writes: their columns, types, units, when a value is empty and
    what each means, with an example row (docs/outputs.md holds them all)."""
    from breakthrough.schemas import docs  # imported when run, not at `bt` start-up

    typer.echo(docs.describe(table, everything=markdown), nl=not markdown)


def register(app: typer.Typer) -> None:
    app.command("schema", short_help="Describe the tables bt writes (columns, types, units).")(
        schema
    )

"""`bt verify RUN`: is this run intact? Everything it holds is checked, nothing is written;
logic in breakthrough.pipeline.verify."""

from __future__ import annotations

from pathlib import Path

import typer

from breakthrough.commands.options import count, json_option, print_json

DAMAGED = 1  # exit status when damage was found (2 stays "could not check": a usage error)


def verify(
    runs: list[Path] = typer.Argument(
        ..., metavar="RUN", help="Run directories, or folders of runs (e.g. runs/)."
    ),
    as_json: bool = json_option(),
) -> None:
    """Check a run whole, read-only: the SQLite file (integrity_check, foreign keys), the
    manifest against its schema (types, required keys, a schema this bt reads, a whole
    protocol), every sample against its checksum (naming the fields that changed), and every
    hidden-vector file against its recorded size and sha256 (and files no sample names). The
    summary line says what the store's checksums cover (schema 3: every field a label or signal
    is computed from; schema 2, stores made before: token ids, text, finish reason, seed and
    prefix length only). Prints one line per problem; exit 0 when intact, 1 when damage was
    found, 2 when the store cannot be opened at all. With --json: a list with one object per
    run (run, intact, problems, the counts checked, schema, coverage), the same exit status."""
    from breakthrough.pipeline.verify import verify_run
    from breakthrough.store import COVERAGE, find_runs

    damaged = []
    reports = []
    found = find_runs(runs)
    for note in found.notes:  # folders that are no run
        typer.echo(f"note: {note}", err=True)
    for run_dir in found.runs:
        rep = verify_run(run_dir)
        if not rep.ok:
            damaged.append(run_dir)
        if as_json:
            reports.append(
                {
                    "run": str(run_dir),
                    "intact": rep.ok,
                    "problems": rep.problems,
                    "samples": rep.samples,
                    "hidden_files": rep.hidden_files,
                    "manifest_keys": rep.manifest_keys,
                    "schema": rep.schema,
                    "coverage": None if rep.schema is None else COVERAGE.get(rep.schema),
                }
            )
            continue
        for line in rep.problems:
            typer.echo(line)
        state = "intact" if rep.ok else f"DAMAGED ({count(len(rep.problems), 'problem')})"
        typer.echo(
            f"{run_dir}: {state}: {count(rep.samples, 'sample')}, "
            f"{count(rep.hidden_files, 'hidden-vector file')}, "
            f"{count(rep.manifest_keys, 'manifest key')} checked; checksums cover "
            + (
                f"{COVERAGE[rep.schema]} (schema {rep.schema})"
                if rep.schema in COVERAGE
                else "what each row's checksum form says (the manifest names no schema)"
            )
        )
    if as_json:
        print_json(reports)
    if damaged:
        typer.echo(
            f"bt: error: {', '.join(map(str, damaged))}: damaged (listed above); restore "
            "from a copy",
            err=True,
        )
        raise typer.Exit(DAMAGED)


def register(app: typer.Typer) -> None:
    app.command("verify", short_help="Check that runs are intact, read-only.")(verify)

"""`bt report ...`: reports over finished runs. `bt report uoo RUN...` prints the
Uniqueness-of-Optimum leaderboard and count metrics; `bt report study RUN...` writes the one
page across both halves of the study (figures, headline sentences, tables, what is missing).

Parses the options, calls `breakthrough.analyses.uoo.uoo_report` or
`breakthrough.analyses.study.study_report` and prints what they return."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from breakthrough.classify.settings import DRAWS, SEED
from breakthrough.commands.options import MAX_DRAWS
from breakthrough.errors import BtError
from breakthrough.protocol import MAX_SEED

if TYPE_CHECKING:
    from rich.console import Console


def _print(tables: list, console: Console) -> None:
    """Each `TextTable` as a rich table, its note after it."""
    from rich.table import Table

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
    variant: str | None = typer.Option(
        None, "--variant", help="Prompt variant label for runs that do not record one."
    ),
    ci: str = typer.Option("wilson", "--ci", help="Leaderboard interval: wilson | exact."),
    figure: Path | None = typer.Option(
        None,
        "--figure",
        help="Also write the claimed-vs-true count figure (log axes, one colour per size) "
        "to this .png file.",
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        help="Also write the report as a page: OUT/index.html with every table and the "
        "claimed-vs-true figure (OUT/figures/). Nothing is written into the runs.",
    ),
) -> None:
    """Uniqueness-of-Optimum report: leaderboard over the 29, count accuracy by bin, kind and
    size, under/over-counts, the thinking arms (runs made with --thinking off against their
    on runs, exact McNemar), Fisher / exact McNemar between runs, run-to-run count agreement.
    With --out, the same as an HTML page with the figure."""
    from rich.console import Console

    from breakthrough.analyses.uoo import uoo_report  # imported when run, not at start-up

    if ci not in ("wilson", "exact"):
        raise BtError(f"--ci: expected wilson or exact, got {ci!r}")
    if figure is not None and figure.suffix.lower() != ".png":
        raise BtError(f"--figure: expected a .png file name, got {str(figure)!r}")
    if out is not None and out.exists() and not out.is_dir():
        raise BtError(f"--out {out}: a file, not a folder")
    tables = uoo_report(runs, cohort=cohort, variant=variant, ci=ci, figure=figure, out=out)
    _print(tables, Console(width=160))
    if figure is not None:
        Console(width=160).print(f"wrote {figure}")
    if out is not None:
        Console(width=160).print(f"wrote {out / 'index.html'}", highlight=False)


def study(
    runs: list[Path] = typer.Argument(
        ..., help="Run directories (or folders of them, e.g. runs/*), every model of the study."
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Output folder (default RUN/study, or <common parent>/study)."
    ),
    confirm: Path | None = typer.Option(
        None,
        "--confirm",
        help="`bt confirm` output folder (confirm.json, sweep.json, figures/; "
        "default: the `confirm` folder `bt confirm RUN...` writes).",
    ),
    probe: list[Path] | None = typer.Option(
        None,
        "--probe",
        help="`bt probe` output folder; repeat for several (default: RUN/probe "
        "of each run that has one).",
    ),
    draws: int = typer.Option(
        DRAWS,
        min=0,
        max=MAX_DRAWS,
        help="Posterior redraws for regime survival (as `bt classify`).",
    ),
    seed: int = typer.Option(SEED, min=0, max=MAX_SEED, help="Seed of the posterior redraws."),
    cell_pages: bool = typer.Option(
        True, help="Write one HTML page per cell (under OUT/classify/cells)."
    ),
) -> None:
    """One self-contained HTML page for the study: every figure of protocol 10 the runs have
    data for, every headline number of protocol 9 as the sentence it supports (matched
    compute, δ sensitivity, conservative and cross-model agreement, top-up resolution, label
    hardening, T_V events, A2, probe dissection, the confirmatory result), their tables as
    CSV/parquet, and what is missing with the command that would produce it."""
    from rich.console import Console

    from breakthrough.analyses.study import study_report  # pandas, matplotlib: not at start-up

    rep = study_report(
        runs, out, confirm=confirm, probes=probe, draws=draws, seed=seed, cell_pages=cell_pages
    )
    console = Console(width=160)
    for h in rep.headlines:
        console.print(f"[bold]{h.title}[/bold]: {h.sentences[0]}", highlight=False)
    for m in rep.missing:
        console.print(f"missing: {m.what}: {m.command}", highlight=False)
    for note in rep.notes:
        console.print(f"note: {note}", highlight=False)
    console.print(
        f"report: {rep.index} ({len(rep.figures)} figures, {len(rep.tables) // 2} tables)",
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    report_app = typer.Typer(
        help="Reports over finished runs.", no_args_is_help=True, add_completion=False
    )
    report_app.command("uoo", short_help="Uniqueness-of-Optimum leaderboard and counts.")(uoo)
    report_app.command("study", short_help="Write the study's one HTML page across runs.")(study)
    app.add_typer(report_app, name="report")

"""`bt sample`: N independent seeded attempts per problem x model, the within-problem
data an early-signal dissection needs; logic in breakthrough.pipeline.sample."""

from __future__ import annotations

from pathlib import Path

import typer

from breakthrough.commands.engine_options import HttpOptions, with_http_options
from breakthrough.commands.options import (
    EXIT_FAILURES,
    check_engine_options,
    check_wait,
    count,
    dry_run_option,
    hidden_stride_for,
    hidden_stride_option,
    model_names,
    problems_option,
    runs_dir_option,
    wait_option,
)
from breakthrough.errors import BtError
from breakthrough.protocol import DEFAULT


@with_http_options
def sample(
    *,
    cohort: str = typer.Option(..., help="Cohort name (see `bt cohorts list`) or a .jsonl path."),
    attempts: int = typer.Option(
        ...,
        help="Independent attempts per problem x model (a rerun "
        "with a larger N adds only the new ones).",
    ),
    model: str | None = typer.Option(
        None,
        help="Comma-separated model aliases, local mlx-lm folders or "
        "hub ids. Default: the offline smollm2-135m.",
    ),
    max_tokens: int = typer.Option(
        3072, help="Generated-token cap per attempt (the study's screen budget is 3,072)."
    ),
    max_prompt_tokens: int = typer.Option(
        DEFAULT.max_prompt_tokens, help="Longest chat prompt accepted, in tokens."
    ),
    runs_dir: Path = runs_dir_option(
        "Runs folder; attempts go to RUNS/attempts/COHORT-MODEL (out of the way of bt continue)."
    ),
    run: str | None = typer.Option(
        None, help="Run name under RUNS/attempts (default COHORT-MODEL)."
    ),
    limit: int | None = typer.Option(None, help="Only the first N problems of the cohort."),
    problems: str | None = problems_option(),
    batch_size: int = typer.Option(8, help="Rows generated together at most."),
    dry_run: bool = dry_run_option(
        "Print the attempts and tokens still to generate and an ETA; load no model, write nothing."
    ),
    http: HttpOptions,  # --backend, --endpoint ... --api-key (with_http_options)
    hidden_stride: int | None = hidden_stride_option(),
    wait: float = wait_option(),
) -> None:
    """Generate, grade and store N seeded from-scratch attempts per problem x model.

    Attempt b of a cell has the seed of its identity (cell, b); every attempt is committed when it
    finishes, so a killed run resumes with exactly the missing ones. Each attempt also stores
    every 8th token's hidden vector (protocol 2.2; see --hidden-stride)."""
    from rich.console import Console

    from breakthrough.commands.progress import drive_samples
    from breakthrough.models.registry import OFFLINE_DEFAULT
    from breakthrough.pipeline.sample import SampleRequest, plan_sample, sample_runs

    console = Console(stderr=True)  # notes and warnings
    status = Console()  # what is about to run, on stdout: a refusal after it is stderr's one line
    check_engine_options(http.backend, batch_size)
    models = model_names(model, problems, run, cohort)
    http.check()
    if limit is not None and limit < 1:
        raise BtError(f"--limit: expected a positive integer, got {limit}")
    if max_tokens < 1:
        raise BtError(f"--max-tokens: expected a positive integer, got {max_tokens}")
    protocol = DEFAULT.with_overrides(
        base_max_tokens=max_tokens, max_prompt_tokens=max_prompt_tokens
    ).validate()
    if models is None:  # --model not given
        status.print(f"using the offline default model {OFFLINE_DEFAULT}", soft_wrap=True)
        models = (OFFLINE_DEFAULT,)
    req = SampleRequest(
        cohort=cohort,
        models=models,
        attempts=attempts,
        protocol=protocol,
        engine=http.engine(batch_size),
        runs_dir=runs_dir,
        run=run,
        limit=limit,
        problems=problems,
        hidden_stride=hidden_stride_for(hidden_stride, http.backend),
        lock_wait=check_wait(wait),
    )
    if dry_run:
        for plan in plan_sample(req):
            typer.echo("\n".join(plan.lines()))
        return
    failed = False
    for rep in sample_runs(
        req,
        announce=status.print,
        drive=lambda run: drive_samples(console, run, "attempts", max_tokens),
    ):
        typer.echo(
            f"{rep.run_dir}: {count(rep.generated, 'attempt')} generated "
            f"({rep.tokens:,} tokens, {rep.solved} solved), {rep.skipped} already done"
            + (f", {rep.failed} failed on request errors (rerun to retry)" if rep.failed else "")
        )
        failed = failed or bool(rep.failed)
        for note in rep.notes:
            console.print(f"note: {note}")
    if failed:
        raise typer.Exit(EXIT_FAILURES)  # finished with failures: the run is incomplete


def register(app: typer.Typer) -> None:
    app.command("sample", short_help="Generate N seeded from-scratch attempts per problem.")(sample)

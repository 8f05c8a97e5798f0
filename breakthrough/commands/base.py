"""`bt base`: one long base solution per problem x model cell (protocol section 2)."""

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
from breakthrough.protocol import DEFAULT, THINKING

STUDY_MODELS = "gemma4-e4b,ministral3-3b"


@with_http_options
def base(
    *,
    cohort: str = typer.Option(
        "math89", help="Cohort name (see `bt cohorts list`) or a .jsonl path."
    ),
    model: str | None = typer.Option(
        None,
        help="Comma-separated model aliases, local mlx-lm folders or hub ids "
        "(see `bt models list`). "
        f"Default: the offline smollm2-135m; the study's models are --model {STUDY_MODELS}.",
    ),
    max_tokens: int = typer.Option(
        DEFAULT.base_max_tokens, help="Generated-token cap per base solution."
    ),
    max_prompt_tokens: int = typer.Option(
        DEFAULT.max_prompt_tokens,
        help="Longest chat prompt accepted, in tokens (protocol 1.5); "
        "a longer one is refused before anything is written.",
    ),
    runs_dir: Path = runs_dir_option("Folder that holds run directories."),
    dry_run: bool = dry_run_option(),
    run: str | None = typer.Option(
        None, help="Run name (default COHORT-MODEL); with several models, NAME-MODEL per model."
    ),
    limit: int | None = typer.Option(None, help="Only the first N problems of the cohort."),
    problems: str | None = problems_option(),
    batch_size: int = typer.Option(
        8, help="Rows (sequences) generated together at most (continuous batching)."
    ),
    prompt_variant: str = typer.Option(
        "plain", help="Optimum-benchmark prompt variant: plain or explicit (ignored for math)."
    ),
    seed: int = typer.Option(
        DEFAULT.base_seed, help="Base seed (the protocol uses 11 for every cell)."
    ),
    thinking: str | None = typer.Option(
        None,
        "--thinking",
        metavar="on|off",
        show_default=False,
        help="The chat template's thinking switch, for models whose template has one (Qwen3's "
        "enable_thinking): off renders the prompt with it off (Qwen3 pre-fills an empty "
        "<think></think> block; the trace is all answer), on as bt renders it anyway. A run "
        "made with thinking off never mixes with one made with it on (another run directory: "
        "--run). Refused in one line for a model whose template has no switch. Default: the "
        "template as bt's family renders it (thinking on for Qwen3 and Gemma 4).",
    ),
    http: HttpOptions,  # --backend, --endpoint ... --api-key (with_http_options)
    hidden_stride: int | None = hidden_stride_option(),
    wait: float = wait_option(),
) -> None:
    """Generate, grade and store one base solution per problem x model cell.

    Resumable: rerunning the same command generates only the cells that are missing. A run
    directory made with another model, protocol, cohort, prompt, --thinking or --hidden-stride
    is refused.
    Each trace also stores every 8th token's hidden vector (protocol 2.2; see --hidden-stride)."""
    from rich.console import Console

    from breakthrough.models.registry import OFFLINE_DEFAULT
    from breakthrough.pipeline.base import BaseRequest, base_runs

    console = Console(stderr=True)  # the progress display, notes, warnings
    status = Console()  # what is about to run, on stdout: a refusal after it is stderr's one line
    check_engine_options(http.backend, batch_size)
    models = model_names(model, problems, run, cohort)
    http.check()
    if thinking is not None and thinking not in THINKING:
        raise BtError(f"--thinking: expected {' or '.join(THINKING)}, got {thinking!r}")
    protocol = DEFAULT.with_overrides(
        base_max_tokens=max_tokens,
        base_seed=seed,
        max_prompt_tokens=max_prompt_tokens,
        thinking=thinking,
    ).validate()
    if limit is not None and limit < 1:
        raise BtError(f"--limit: expected a positive integer, got {limit}")
    if models is None:  # --model not given
        status.print(
            f"using the offline default model {OFFLINE_DEFAULT} (a plumbing model, not a solver); "
            f"the study's models: --model {STUDY_MODELS}",
            soft_wrap=True,
        )
        models = (OFFLINE_DEFAULT,)
    req = BaseRequest(
        cohort=cohort,
        models=models,
        protocol=protocol,
        engine=http.engine(batch_size),
        runs_dir=runs_dir,
        run=run,
        limit=limit,
        problems=problems,
        variant=prompt_variant,
        hidden_stride=hidden_stride_for(hidden_stride, http.backend),
        lock_wait=check_wait(wait),
    )
    if dry_run:
        from breakthrough.pipeline.base import plan_base

        for plan in plan_base(req, say=typer.echo):
            typer.echo("\n".join(plan.lines()))
        return
    reports = base_runs(
        req, announce=status.print, drive=lambda run: _run_with_progress(console, run, max_tokens)
    )
    for rep in reports:
        _print_summary(rep.run_dir)
        if rep.failed:
            console.print(
                f"{rep.run_dir.name}: {count(rep.failed, 'cell')} failed on request errors "
                "(stored in the run's errors table); rerun to retry them"
            )
        for note in rep.notes:
            console.print(f"note: {note}")
    if any(rep.failed for rep in reports):
        raise typer.Exit(EXIT_FAILURES)  # finished with failures: the run is incomplete


def _run_with_progress(console, run, max_tokens: int):
    """Drive `run(on_start, on_sample)` under the samples/tokens display (commands.progress)."""
    from breakthrough.commands.progress import drive_samples

    rep = drive_samples(console, run, "base", max_tokens)
    if rep.skipped:
        console.print(f"{count(rep.skipped, 'cell')} already done (resumed)")
    return rep


def _print_summary(run_dir: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    from breakthrough.store import RunStore

    with RunStore(run_dir, readonly=True) as store:
        df = store.samples_frame(arrays=False, kind="base")
        alias = store.manifest().get("model_alias", "?")
    table = Table(title=f"base solutions: {run_dir}")
    for col in (
        "model",
        "cells",
        "solved",
        "finish reasons",
        "tokens (mean / max)",
        "grade statuses",
    ):
        table.add_column(col)
    if len(df):
        fin = ", ".join(f"{k} {v}" for k, v in df["finish_reason"].value_counts().items())
        stat = ", ".join(f"{k} {v}" for k, v in df["grade_status"].value_counts().items())
        table.add_row(
            alias,
            str(len(df)),
            str(int(df["correct"].fillna(False).astype(bool).sum())),
            fin,
            f"{df['n_tokens'].mean():.0f} / {df['n_tokens'].max()}",
            stat,
        )
    Console().print(table)


def register(app: typer.Typer) -> None:
    app.command("base", short_help="Generate one long base solution per problem x model.")(base)

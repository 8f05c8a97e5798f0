"""`bt continue`: prefix continuations, restarts and top-ups of `bt base` runs."""

from __future__ import annotations

from pathlib import Path

import typer

from breakthrough.classify.topup import TOPUP_DEFAULT, TOPUP_HELP, parse_topup
from breakthrough.commands.options import (check_engine_options, count, backend_option,
                                          endpoint_option, max_inflight_option, processed_logprobs_option)
from breakthrough.errors import BtError
from breakthrough.protocol import DEFAULT


def _ints(text: str, option: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise BtError(f"{option}: expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise BtError(f"{option}: expected positive integers, got {text!r}")
    return vals


def continue_(
    runs: list[Path] = typer.Argument(None, help="Run directories (default: every run under --runs-dir)."),
    budget: int = typer.Option(DEFAULT.budget, help="B: reasoning tokens per continuation."),
    answer_budget: int = typer.Option(DEFAULT.answer_budget, help="Answer tokens after the forced close."),
    samples: int = typer.Option(DEFAULT.samples, help="Continuations per anchor (and restarts per budget)."),
    restarts: str = typer.Option(",".join(map(str, DEFAULT.restart_budgets)),
                                 help="Restart reasoning budgets C (comma-separated)."),
    topup: str = typer.Option(TOPUP_DEFAULT, help=TOPUP_HELP),
    anchors: str = typer.Option(",".join(map(str, DEFAULT.anchors)), help="Anchor grid (reasoning tokens)."),
    tau: float = typer.Option(DEFAULT.tau, help="Solve-rate threshold for a crossing."),
    runs_dir: Path = typer.Option(Path("runs"), help="Where runs live (used when no RUN is given)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the samples and tokens each "
                                 "phase would generate and an ETA from this machine's measured "
                                 "tokens/s; load no model, write nothing."),
    batch_size: int = typer.Option(32, help="Rows (sequences) generated together at most "
                                   "(continuous batching; also capped by --memory-gb)."),
    memory_gb: float = typer.Option(4.0, help="KV-cache memory budget that bounds the rows per batch."),
    backend: str = backend_option(),
    endpoint: str = endpoint_option(),
    max_inflight: int = max_inflight_option(),
    accept_processed_logprobs: bool = processed_logprobs_option(),
    instrument: bool = typer.Option(False, "--instrument", help="Also store the protocol 2.2 "
                                    "per-token signals of every continuation and restart "
                                    "(default: token ids, log-probs and entropies only; base "
                                    "traces always hold them). Part of the run's identity: a "
                                    "run never mixes the two."),
) -> None:
    """Probe every base trace (anchors, 2 rounds of bisection), run restarts and the top-ups.

    Resumable: rerunning completes the missing samples only (seeds come from each sample's
    identity, so the result equals an uninterrupted run)."""
    from rich.console import Console

    from breakthrough.engine import EngineSpec, http_options
    from breakthrough.pipeline.cell_loop import ContinueOptions, continue_runs
    from breakthrough.store import run_dirs

    console = Console(stderr=True)
    rules = parse_topup(topup)
    check_engine_options(backend, batch_size, memory_gb)
    remote = http_options(backend, endpoint, max_inflight, accept_processed_logprobs)
    settings = dict(budget=budget, answer_budget=answer_budget, samples=samples, restart_samples=samples,
                    topup_samples=2 * samples, restart_budgets=_ints(restarts, "--restarts"),
                    anchors=_ints(anchors, "--anchors"), tau=tau)
    DEFAULT.with_overrides(**settings).validate()  # every option, before any store is touched
    engine = EngineSpec(backend=backend, batch_size=batch_size, memory_budget_bytes=int(memory_gb * 2**30),
                        **remote)
    opts = ContinueOptions(topup=rules, engine=engine, instrument=instrument)
    dirs = run_dirs(runs or [runs_dir])
    if dry_run:
        from breakthrough.pipeline.dry_run import plan_continue

        for plan in plan_continue(dirs, settings, batch_size):
            typer.echo("\n".join(plan.lines()))
        return
    for rep in continue_runs(dirs, settings, opts, progress=lambda run_dir, man: _announce(console, run_dir, man, topup),
                             drive=lambda run: _with_progress(console, run)):
        if rep.nothing_to_do:
            console.print(f"{rep.run_dir.name}: nothing to do: every sample the protocol asks for "
                          "is stored (no model loaded)")
            continue
        occupancy = (f"; batch occupancy {rep.occupancy:.0%} of {rep.batch_size}"
                     if rep.occupancy is not None else "")
        console.print(
            f"{rep.run_dir.name}: {count(rep.cells, 'cell')}; samples " +
            ", ".join(f"{k} {v}" for k, v in rep.samples.items()) +
            f"; prefill {rep.prefill_tokens:,} tokens for {rep.trace_tokens:,} prompt+trace tokens; "
            f"{rep.generated_tokens:,} generated in {rep.elapsed_s:.1f}s{occupancy}"
        )
        if rep.failed_cells:
            console.print(f"{rep.run_dir.name}: {count(rep.failed_cells, 'cell')} stopped on request "
                          "errors (stored in the run's errors table); rerun to retry them")
        for note in rep.notes:
            console.print(f"note: {note}")


def _announce(console, run_dir: Path, man: dict, topup: str) -> None:
    p = man["protocol"]
    console.print(
        f"[bold]{run_dir.name}[/]: {count(man['base_traces'], 'base trace')} of {man.get('model_alias')}; "
        f"probes at B={p['budget']}, answer {p['answer_budget']}, {count(p['samples'], 'sample')}; restarts at "
        f"{','.join(map(str, p['restart_budgets']))}; top-ups: {topup}"
    )


def _with_progress(console, run):
    """Drive `run(on_start, on_sample)` under a rich progress display."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    from breakthrough.commands.progress import TokensPerSecond

    rate = TokensPerSecond()

    with Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("samples"), rate, TimeElapsedColumn(), TextColumn("ETA"),
                  TimeRemainingColumn(), console=console) as progress:
        tasks = {}

        def on_start(totals: dict, engine) -> None:
            rate.attach(engine)
            tasks["probes"] = progress.add_task("probes", total=totals["probes"])
            for phase in ("refinement", "restarts", "topups"):
                tasks[phase] = progress.add_task(phase, total=None)

        def on_sample(phase: str, n: int) -> None:
            progress.update(tasks[phase], advance=n)

        return run(on_start, on_sample)


def register(app: typer.Typer) -> None:
    app.command("continue")(continue_)

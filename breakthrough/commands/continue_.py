"""`bt continue`: prefix continuations, restarts and top-ups of `bt base` runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from breakthrough.classify.topup import TOPUP_DEFAULT, TOPUP_HELP, parse_topup
from breakthrough.commands.engine_options import HttpOptions, with_http_options
from breakthrough.commands.options import (
    EXIT_FAILURES,
    MEMORY_GB_HELP,
    check_engine_options,
    check_wait,
    count,
    dry_run_option,
    int_list,
    memory_budget,
    runs_dir_option,
    wait_option,
)
from breakthrough.errors import BtError
from breakthrough.protocol import DEFAULT

RUNS_SETTING = (
    "Default: the run's own setting once it was continued, else {default}. A run "
    "holds one protocol: another value on a continued run is refused."
)


@with_http_options
def continue_(
    *,
    runs: list[Path] = typer.Argument(
        None, help="Run directories (default: every run under --runs-dir)."
    ),
    budget: int = typer.Option(
        None,
        show_default=False,
        help="B: reasoning tokens per continuation. "
        + RUNS_SETTING.format(default=DEFAULT.budget)
        + " (A second probe budget is its own arm, added by a separate "
        "explicit operation, never by --budget.)",
    ),
    answer_budget: int = typer.Option(
        None,
        show_default=False,
        help="Answer tokens after the forced close. "
        + RUNS_SETTING.format(default=DEFAULT.answer_budget),
    ),
    samples: int = typer.Option(
        None,
        show_default=False,
        help="Continuations per anchor (and restarts per budget). "
        + RUNS_SETTING.format(default=DEFAULT.samples),
    ),
    restarts: str = typer.Option(
        None,
        show_default=False,
        help="Restart reasoning budgets C (comma-separated, increasing, "
        "each once). " + RUNS_SETTING.format(default=",".join(map(str, DEFAULT.restart_budgets))),
    ),
    topup: str = typer.Option(
        None,
        show_default=False,
        help=TOPUP_HELP + " Default: the "
        "rules the run was continued under; a run that records none (never "
        f"continued, or continued by an older bt) runs {TOPUP_DEFAULT}. "
        "A run's rules are only added to: a rule named beyond them is "
        "added and recorded; none, or a rule that cannot join them, is "
        "refused.",
    ),
    anchors: str = typer.Option(
        None,
        show_default=False,
        help="Anchor grid in reasoning tokens (comma-separated, increasing, "
        "each once). " + RUNS_SETTING.format(default=",".join(map(str, DEFAULT.anchors))),
    ),
    tau: float = typer.Option(
        None,
        show_default=False,
        help="Solve-rate threshold for a crossing. " + RUNS_SETTING.format(default=DEFAULT.tau),
    ),
    runs_dir: Path = runs_dir_option("Where runs live (used when no RUN is given)."),
    dry_run: bool = dry_run_option(),
    batch_size: int = typer.Option(
        32,
        help="Rows (sequences) generated together at most "
        "(continuous batching; also capped by --memory-gb).",
    ),
    memory_gb: str = typer.Option("auto", help=MEMORY_GB_HELP),
    http: HttpOptions,  # --backend, --endpoint ... --api-key (with_http_options)
    add_budget: int | None = typer.Option(
        None,
        "--add-budget",
        help="Add a second probe arm at this continuation budget B2 "
        "(protocol 3.6, A2: e.g. 4096 beside the run's B=1024): the trajectories with a "
        "non-instant T_F event are re-probed at every anchor up to their stability anchor, "
        "with the identical branch seeds; stored with B2, recorded in the run's manifest as an "
        "arm; the run's B, restarts and top-ups are untouched. Uses the run's stored protocol "
        "(the protocol options above are not read).",
    ),
    wait: float = wait_option(),
    kv_bits: int | None = typer.Option(
        None,
        "--kv-bits",
        show_default=False,
        help="Quantize the KV cache to 8 or 4 bits (mlx-lm's quantized cache: about 0.53x or "
        "0.28x the memory of bfloat16, so more rows fit; MLX backends). It changes tokens, so it "
        "is part of the run's identity: default the run's own setting once it was continued, "
        "else off; another value on a continued run is refused.",
    ),
    attention: str = typer.Option(
        "auto",
        "--attention",
        help="How rows that share a base trace attend (--backend mlx): auto (on a GPU a cell's "
        "rows in one buffer per layer, one fused attention call per chunk of rows, once the "
        "shared prefix is long enough; on the CPU shared-prefix attention or per-row copies, "
        "whichever is faster), or group, shared or copies to force one. The closing line says "
        "which path served how many rows.",
    ),
    instrument: bool = typer.Option(
        False,
        "--instrument",
        help="Also store the protocol 2.2 "
        "per-token signals of every continuation and restart "
        "(default: token ids, log-probs and entropies only; base "
        "traces always hold them). Part of the run's identity: a "
        "run never mixes the two.",
    ),
) -> None:
    """Probe every base trace (anchors, 2 rounds of bisection), run restarts and the top-ups.

    Resumable: rerunning completes the missing samples only (seeds come from each sample's
    identity, so the result equals an uninterrupted run)."""
    from dataclasses import replace

    from rich.console import Console

    from breakthrough.pipeline.cell_loop import (
        ContinueOptions,
        continue_runs,
        plan_continue_runs,
    )
    from breakthrough.pipeline.targets import continue_targets

    console = Console(stderr=True)
    http.check()
    rules = None if topup is None else parse_topup(topup)
    check_engine_options(http.backend, batch_size, memory_gb)
    if kv_bits is not None and kv_bits not in (4, 8):
        raise BtError(f"--kv-bits: expected 4 or 8, got {kv_bits}")
    if kv_bits is not None and http.backend not in ("mlx", "mlx-fresh"):
        raise BtError(f"--kv-bits applies to --backend mlx or mlx-fresh, not {http.backend}")
    settings = dict(
        budget=budget,
        answer_budget=answer_budget,
        samples=samples,
        restart_samples=samples,
        topup_samples=None if samples is None else 2 * samples,
        restart_budgets=int_list(restarts, "--restarts"),
        anchors=int_list(anchors, "--anchors"),
        tau=tau,
    )
    DEFAULT.with_overrides(**settings).validate()  # every option, before any store is touched
    if add_budget is not None:  # the arm runs under the run's protocol, KV and signal settings:
        _add_budget(  # one asked for that differs from them is refused, never ignored
            console,
            runs or [runs_dir],
            add_budget,
            dry_run,
            http,
            batch_size,
            memory_gb,
            check_wait(wait),
            (settings, kv_bits, instrument),
        )
        return
    engine = replace(http.engine(batch_size, memory_budget(memory_gb)), attention=attention)
    opts = ContinueOptions(
        topup=rules,
        engine=engine,
        lock_wait=check_wait(wait),
        instrument=instrument,
        kv_bits=kv_bits,
    )
    found = continue_targets(runs or [runs_dir])  # study runs; a folder's uoo runs skipped
    for note in found.notes:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)
    dirs = found.runs
    if dry_run:  # refused as the real command refuses, before any plan is printed
        for plan in plan_continue_runs(dirs, settings, opts):
            typer.echo("\n".join(plan.lines()))
        return
    failed = False
    status = Console()  # what is about to run, on stdout: a refusal after it is stderr's one line
    for rep in continue_runs(
        dirs,
        settings,
        opts,
        progress=lambda run_dir, man: _announce(status, run_dir, man),
        drive=lambda run: _with_progress(console, run),
    ):
        added = rep.topup.added_note() if rep.topup else ""
        if rep.nothing_to_do:
            console.print(
                f"{rep.run_dir.name}: nothing to do: every sample the protocol asks for "
                f"is stored, top-ups {rep.topup.text if rep.topup else '?'} (no model "
                f"loaded)" + (f"; {added}" if added else "")
            )
            continue
        occupancy = (
            f"; batch occupancy {rep.occupancy:.0%} of {rep.batch_size}"
            if rep.occupancy is not None
            else ""
        )
        if rep.rows_in_flight_max:
            occupancy += f", at most {rep.rows_in_flight_max} rows in flight"
        if rep.rows_by_attention:
            occupancy += "; attention " + ", ".join(
                f"{path} {n} rows" for path, n in sorted(rep.rows_by_attention.items())
            )
        if rep.peak_memory_bytes:
            occupancy += (
                f"; peak memory {rep.peak_memory_bytes / 2**30:.2f} GB (MLX, weights included)"
            )
        console.print(
            f"{rep.run_dir.name}: {count(rep.cells, 'cell')}; samples "
            + ", ".join(f"{k} {v}" for k, v in rep.samples.items())
            + f"; prefill {rep.prefill_tokens:,} tokens for {rep.trace_tokens:,} "
            + "prompt+trace tokens; "
            f"{rep.generated_tokens:,} generated in {rep.elapsed_s:.1f}s{occupancy}; "
            f"top-ups {rep.topup.text if rep.topup else '?'}" + (f"; {added}" if added else "")
        )
        if rep.failed_cells:
            failed = True
            console.print(
                f"{rep.run_dir.name}: {count(rep.failed_cells, 'cell')} stopped on request "
                "errors (stored in the run's errors table); rerun to retry them"
            )
        if rep.memory:
            console.print(f"{rep.run_dir.name}: {rep.memory}")
        for note in rep.notes:
            console.print(f"note: {note}")
    if failed:
        raise typer.Exit(EXIT_FAILURES)  # finished with failures: the runs are incomplete


def _add_budget(
    console,
    paths: list[Path],
    budget: int,
    dry_run: bool,
    http: HttpOptions,
    batch_size: int,
    memory_gb: str,
    lock_wait: float,
    asked: tuple[dict[str, Any], int | None, bool] | None = None,
) -> None:
    """`--add-budget B2`: the second probe arm of every run (pipeline.budget_arm) on the engine
    `http` names (`--backend` and the HTTP backends' settings); `asked` the run settings
    typed beside it (protocol settings, --kv-bits, --instrument: `budget_arm.ArmAsked`),
    refused where they differ from the run's."""
    from rich.console import Console

    from breakthrough.pipeline.budget_arm import ArmAsked, add_budget_runs
    from breakthrough.pipeline.targets import continue_targets

    if budget < 1:
        raise BtError(f"--add-budget: expected a positive number of tokens, got {budget}")
    arm_asked = ArmAsked(*asked) if asked is not None else None
    check_engine_options(http.backend, batch_size, memory_gb)
    found = continue_targets(paths)  # study runs; a folder's uoo runs skipped
    for note in found.notes:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)
    if dry_run:
        from breakthrough.pipeline.budget_arm import plan_add_budget

        for plan in plan_add_budget(found.runs, budget, batch_size, http.backend, asked=arm_asked):
            typer.echo("\n".join(plan.lines()))
        return
    engine = http.engine(batch_size, memory_budget(memory_gb))

    status = Console()  # on stdout, as `bt continue`'s announcement

    def announce(run_dir: Path, man: dict) -> None:
        status.print(
            f"[bold]{run_dir.name}[/]: probe arm at B={budget} beside the run's "
            f"probes, {count(man['base_traces'], 'base trace')} of "
            f"{man.get('model_alias')}"
        )
        if man.get("large_run"):
            status.print(man["large_run"], soft_wrap=True)

    for rep in add_budget_runs(
        found.runs,
        budget,
        engine,
        progress=announce,
        drive=lambda run: _with_progress(console, run),
        lock_wait=lock_wait,
        asked=arm_asked,
    ):
        if rep.nothing_to_do:
            console.print(
                f"{rep.run_dir.name}: arm B={budget}: nothing to do: {rep.notes[0]} "
                f"(no model loaded)",
                highlight=False,
                soft_wrap=True,
            )
            continue
        console.print(
            f"{rep.run_dir.name}: arm B={budget}: {count(rep.cells, 'cell')}, "
            f"{count(rep.samples['probes'], 'probe sample')}; "
            f"{rep.generated_tokens:,} tokens generated in {rep.elapsed_s:.1f}s"
        )
        for note in rep.notes:
            console.print(f"note: {note}")


def _announce(console, run_dir: Path, man: dict) -> None:
    p = man["protocol"]
    console.print(
        f"[bold]{run_dir.name}[/]: {count(man['base_traces'], 'base trace')} of "
        f"{man.get('model_alias')}; probes at B={p['budget']}, answer {p['answer_budget']}, "
        f"{count(p['samples'], 'sample')}; restarts at "
        f"{','.join(map(str, p['restart_budgets']))}; top-ups: {man['topup_choice'].describe()}"
    )
    if man.get("large_run"):
        console.print(man["large_run"], soft_wrap=True)


def _with_progress(console, run):
    """Drive `run(on_start, on_sample)` under the display (commands.progress): one metered row
    (tokens against the run's bound, tok/s, ETA) and the samples of each phase. Drawn from
    on_start on: a refusal before it (e.g. no endpoint answers) stays one line."""
    from breakthrough.commands.progress import Meter, erase_on_stop, sample_progress

    meter = Meter()
    progress = sample_progress(console, meter)
    try:
        tasks = {}

        def on_start(totals: dict, engine) -> None:
            meter.attach(engine, totals.get("max_tokens", 0))
            tasks["all"] = progress.add_task("all", total=None, meter=True)
            tasks["probes"] = progress.add_task("probes", total=totals["probes"])
            for phase in ("refinement", "restarts", "topups"):
                tasks[phase] = progress.add_task(phase, total=None)
            progress.start()

        def on_sample(phase: str, n: int) -> None:
            progress.update(tasks[phase], advance=n)
            progress.update(tasks["all"], advance=n)

        return run(on_start, on_sample)
    except BtError:
        erase_on_stop(progress)
        raise
    finally:
        if progress.live.is_started:
            progress.stop()


def register(app: typer.Typer) -> None:
    app.command("continue", short_help="Probe prefixes of every base trace, run restarts.")(
        continue_
    )

"""`bt continue` and `bt status`: prefix continuations, restarts and top-ups of `bt base` runs."""

from __future__ import annotations

from pathlib import Path

import typer

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


def _topup(text: str) -> tuple[str, ...]:
    if text == "none":
        return ()
    rules = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [r for r in rules if r not in ("terminal", "ambiguous", "posterior")]
    if bad or not rules:
        raise BtError(f"--topup: expected terminal,ambiguous | posterior | none, got {text!r}")
    return rules


def continue_(
    runs: list[Path] = typer.Argument(None, help="Run directories (default: every run under --runs-dir)."),
    budget: int = typer.Option(DEFAULT.budget, help="B: reasoning tokens per continuation."),
    answer_budget: int = typer.Option(DEFAULT.answer_budget, help="Answer tokens after the forced close."),
    samples: int = typer.Option(DEFAULT.samples, help="Continuations per anchor (and restarts per budget)."),
    restarts: str = typer.Option(",".join(map(str, DEFAULT.restart_budgets)),
                                 help="Restart reasoning budgets C (comma-separated)."),
    topup: str = typer.Option("terminal,ambiguous",
                              help="Top-up rules: terminal,ambiguous (the study's 4->8), posterior "
                                   "(cells whose P(rate>=tau) is uncertain), or none."),
    anchors: str = typer.Option(",".join(map(str, DEFAULT.anchors)), help="Anchor grid (reasoning tokens)."),
    tau: float = typer.Option(DEFAULT.tau, help="Solve-rate threshold for a crossing."),
    runs_dir: Path = typer.Option(Path("runs"), help="Where runs live (used when no RUN is given)."),
    batch_size: int = typer.Option(32, help="Rows generated together (also capped by --memory-gb)."),
    memory_gb: float = typer.Option(4.0, help="KV-cache memory budget that bounds the rows per batch."),
) -> None:
    """Probe every base trace (anchors, 2 rounds of bisection), run restarts and the top-ups.

    Resumable: rerunning completes the missing samples only (seeds come from each sample's
    identity, so the result equals an uninterrupted run)."""
    from rich.console import Console

    from breakthrough.continue_run import ContinueOptions, continue_run
    from breakthrough.models import load_model
    from breakthrough.store import RunStore, run_dirs

    console = Console(stderr=True)
    rules = _topup(topup)
    if samples < 1 or budget < 1 or answer_budget < 1 or batch_size < 1 or memory_gb <= 0:
        raise BtError("--samples, --budget, --answer-budget, --batch-size and --memory-gb must be positive")
    protocol = DEFAULT.with_overrides(
        budget=budget, answer_budget=answer_budget, samples=samples, restart_samples=samples,
        topup_samples=2 * samples, restart_budgets=_ints(restarts, "--restarts"),
        anchors=_ints(anchors, "--anchors"), tau=tau,
    )
    dirs = run_dirs(runs or [runs_dir])
    for run_dir in dirs:
        with RunStore(run_dir) as store:
            # Continuation samples at another answer budget would not be comparable.
            store.ensure_manifest({"continue_answer_budget": answer_budget})
            man = store.manifest()
            # Record the labelling constants, so `bt classify` reads B, anchors and budgets.
            store.update_manifest({"protocol": {**man.get("protocol", {}), **{
                k: (list(v) if isinstance(v, tuple) else v) for k, v in protocol.to_dict().items()
                if k in ("budget", "answer_budget", "anchors", "restart_budgets", "samples",
                         "restart_samples", "topup_samples", "refinement_rounds")}}})
            n_base = len(store.existing_keys("base"))
        console.print(
            f"[bold]{run_dir.name}[/]: {n_base} base traces of {man.get('model_alias')}; probes at "
            f"B={budget}, answer {answer_budget}, {samples} samples; restarts at {restarts}; "
            f"top-ups: {topup}"
        )
    for run_dir in dirs:
        with RunStore(run_dir) as store:
            man = store.manifest()
        loaded = load_model(man["model_id"], family=man.get("family"))
        opts = ContinueOptions(protocol=protocol, topup=rules, batch_size=batch_size,
                               memory_budget_bytes=int(memory_gb * 2**30))
        rep = _with_progress(console, run_dir, loaded, opts, continue_run)
        console.print(
            f"{run_dir.name}: {rep.cells} cells; samples " +
            ", ".join(f"{k} {v}" for k, v in rep.samples.items()) +
            f"; prefill {rep.prefill_tokens:,} tokens for {rep.trace_tokens:,} prompt+trace tokens; "
            f"{rep.generated_tokens:,} generated in {rep.elapsed_s:.1f}s"
        )


def _with_progress(console, run_dir, loaded, opts, continue_run):
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

        return continue_run(run_dir, loaded, opts, on_start=on_start, on_sample=on_sample)


def status(
    run: Path = typer.Argument(..., help="Run directory."),
    tau: float = typer.Option(DEFAULT.tau, help="Solve-rate threshold used to plan what remains."),
    budget: int = typer.Option(DEFAULT.budget, help="Continuation budget B of the probes to show."),
) -> None:
    """What is done and what remains per cell: base, probes (anchors, k/n), restarts, planned top-ups."""
    from rich.console import Console
    from rich.table import Table

    from breakthrough.classify import plan_next
    from breakthrough.panels import probe_panel, restart_panel
    from breakthrough.store import RunStore

    protocol = DEFAULT.with_overrides(budget=budget, tau=tau)
    with RunStore(run) as store:
        df = store.samples_frame(arrays=False)
        cells = store.cells_frame()
        man = store.manifest()
    probes, rests = probe_panel(df, protocol), restart_panel(df, protocol)
    plan = plan_next(probes, rests, protocol=protocol)
    table = Table(title=f"{run} ({man.get('model_alias')}, {man.get('cohort')})")
    for col in ("cell", "base", "reasoning", "probes t:k/n", "restarts C:k/n", "next"):
        table.add_column(col)
    base = df[df["kind"] == "base"].set_index("cell_id")
    for cell in cells["cell_id"]:
        b = base.loc[cell] if cell in base.index else None
        p = probes[probes["cell_id"] == cell]
        r = rests[rests["cell_id"] == cell]
        nxt = [f"{i.kind}@{i.anchor if i.kind == 'probe' else i.budget}[{i.reason}]" for i in plan if i.cell_id == cell]
        rt = cells.loc[cells["cell_id"] == cell, "reasoning_tokens"].iloc[0]
        table.add_row(
            cell,
            "-" if b is None else f"{'solved' if b['correct'] == True else 'unsolved'} ({b['n_tokens']})",  # noqa: E712
            "-" if rt != rt or rt is None else str(int(rt)),
            " ".join(f"{a}:{k}/{n}" for a, k, n in zip(p["anchor"], p["k"], p["n"])) or "-",
            " ".join(f"{c}:{k}/{n}" for c, k, n in zip(r["budget"], r["k"], r["n"])) or "-",
            ", ".join(nxt) or ("done" if len(p) else "probes"),
        )
    Console().print(table)


def register(app: typer.Typer) -> None:
    app.command("continue")(continue_)
    app.command("status")(status)

"""`bt classify RUN...`: labels, regimes, plan of next work, tables, figures and HTML report.

Parses the options, calls `breakthrough.analyses.classify_run.classify_runs` and prints the
regime tables. The labels are `breakthrough.classify` (pure); reading the runs is
`breakthrough.analyses`, writing the outputs `breakthrough.report`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import typer

from breakthrough.classify.settings import DEFAULT_SETTINGS, ClassifySettings
from breakthrough.classify.topup import TOPUP_HELP
from breakthrough.commands.options import MAX_DRAWS, count
from breakthrough.protocol import MAX_SEED


def _print_tables(
    summary: dict, index: Path, plan_items: int, topup: str, notes: Sequence[str] = ()
) -> None:
    """Regime counts per model (in 5.3 precedence order, as the summary holds them), the cells
    left unlabelled apart, δ sensitivity, agreement, plan sizes, the notes and the report's
    path."""
    from rich.console import Console  # rich is imported when a command prints, not at start-up
    from rich.table import Table

    console = Console()
    counts = summary.get("regime_counts", {})
    unfinished = summary.get("unfinished_counts") or {}
    for model in list(counts) + [m for m in unfinished if m not in counts]:
        c = counts.get(model, {})
        apart = unfinished.get(model, {})
        left = f", {sum(apart.values())} unlabelled" if apart else ""
        labelled = (summary.get("n_cells") or {}).get(model, 0)
        console.print(
            f"[bold]{model}[/bold]: {count(labelled, 'cell')} labelled{left} "
            f"(τ = {summary['tau']}, δ = {summary['primary_delta']})"
        )
        t = Table()
        t.add_column("regime")
        t.add_column("cells", justify="right")
        for regime, n in c.items():
            if n:
                t.add_row(regime, str(n))
        for status, n in apart.items():
            t.add_row(f"({status}: no regime)", str(n), style="dim")
        console.print(t)
    if counts:
        console.print(
            f"δ sensitivity (non-instant cells with T_V): "
            f"{summary.get('delta_sensitivity_counts')}; conservative disagreements: "
            f"{len(summary.get('conservative_disagreements', []))}; cross-model "
            f"agreement: {summary.get('cross_model_agreement', {}).get('text')}"
        )
    for b2, v in (summary.get("a2") or {}).items():
        console.print(
            f"second probe arm B = {b2} (A2): re-probed {v['trajectories']}, "
            f"{v['earlier_by_2b']} earlier by >= 2B, median shift "
            f"{v['median_shift_steps']} anchor steps: {v['verdict']}"
        )
    for row in summary.get("label_hardening", []):
        console.print(
            f"label hardening {row['model']} {row['when']}: "
            + ", ".join(f"{c} {row[c]}" for c in ("instant", "interior", "A1 event", "censored"))
        )
    plans = summary.get("plans", {})
    console.print(
        "next work: "
        + "; ".join(
            f"--topup {rule}: {count(p['items'], 'item')} ({count(p['samples'], 'sample')})"
            for rule, p in plans.items()
        )
        + f" → plan.json holds --topup {topup} ({count(plan_items, 'item')})"
    )
    for note in notes:
        console.print(f"note: {note}", highlight=False)
    console.print(f"report: {index}")


def register(app: typer.Typer) -> None:
    @app.command(
        "classify", short_help="Label every cell (T_F, adv(t), T_V, regime); write reports."
    )
    def classify_cmd(
        runs: list[Path] = typer.Argument(
            ..., help="Run directories (with store.sqlite) or folders of them, e.g. runs/."
        ),
        tau: float | None = typer.Option(None, help="Solve-rate threshold τ (default: the run's)."),
        delta: float | None = typer.Option(
            None, help="Primary prefix-value margin δ (default: the run's)."
        ),
        topup: str = typer.Option(
            DEFAULT_SETTINGS.topup,
            help="The plan of next work written to "
            "plan.json, as `bt continue --topup` would run it. " + TOPUP_HELP,
        ),
        out: Path | None = typer.Option(
            None,
            "--out",
            "-o",
            help="Output folder (default RUN/classify, or <common parent>/classify).",
        ),
        prior: str | None = typer.Option(
            None, help="Beta prior: 'jeffreys' or 'uniform' (default: the run's)."
        ),
        band_lo: float | None = typer.Option(
            None,
            help="--topup posterior: lower P(rate≥τ) bound (default: the run's posterior band).",
        ),
        band_hi: float | None = typer.Option(
            None,
            help="--topup posterior: upper P(rate≥τ) bound (default: the run's posterior band).",
        ),
        draws: int = typer.Option(
            DEFAULT_SETTINGS.draws,
            min=0,
            max=MAX_DRAWS,
            help="Posterior redraws for regime survival.",
        ),
        seed: int = typer.Option(
            DEFAULT_SETTINGS.seed, min=0, max=MAX_SEED, help="Seed of the posterior redraws."
        ),
        cell_pages: bool = typer.Option(True, help="Write one HTML page per cell."),
    ) -> None:
        """Label every cell (T_F, R̂, adv, T_V, regime) under the protocol stored in its run,
        plan the next work, and write the per-cell table, summary JSON, figures and HTML
        report."""
        from breakthrough.analyses.classify_run import classify_runs  # not at `bt` start-up

        settings = ClassifySettings(
            topup=topup,
            tau=tau,
            delta=delta,
            prior=prior,
            band=(band_lo, band_hi),
            draws=draws,
            seed=seed,
        ).check()  # before any read
        report = classify_runs(runs, out, settings=settings, cell_pages=cell_pages)
        _print_tables(
            report.summary, report.index, report.plan_items, report.summary["topup"], report.notes
        )

"""`bt confirm RUN...`: protocol 9.5's confirmatory early-signal test (does the start of a base
trajectory forecast the cell's outcome beyond the problem's difficulty?).

Parses the options, calls `breakthrough.analyses.confirm.run_confirm` and prints its results
table. The labels are the ones `bt classify` wrote for the same runs (its default folder, or
--labels); the summaries are `bt signals` tables (RUN/signals.parquet, or --signals)."""

from __future__ import annotations

from pathlib import Path

import typer

from breakthrough.commands.options import MAX_DRAWS
from breakthrough.errors import BtError


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def _print(report) -> None:  # report: analyses.confirm.ConfirmReport
    """The results table (9.5's layout), what was excluded and where the outputs are."""
    from rich.console import Console
    from rich.table import Table

    s = report.summary
    console = Console(width=160)
    ex = s["excluded"]
    console.print(
        f"{s['cells']['included']} of {s['cells']['labelled']} labelled cells at forecast "
        f"token {s['forecast_token']}; splits: {s['splits']['source']}"
    )
    console.print(
        f"excluded: {ex['short_base_run']} ({ex['rule']}; by split "
        f"{ex['short_base_run_by_split']}), {ex['no_base_run']} without a base run"
    )
    for note in s["notes"]:
        console.print(f"note: {note}")
    t = Table()
    for col in (
        "endpoint",
        "variant",
        "test rows (problems)",
        "class 0/1",
        "baseline",
        "+early",
        "ΔAUROC [95% CI]",
        "skipped",
        "OOF base/early",
        "result",
    ):
        t.add_column(col, justify="left" if col in ("endpoint", "variant", "result") else "right")
    for r in report.results:
        fit = r["status"] == "fit"
        delta = f"{r['delta_auroc']:+.4f} [{_fmt(r['ci'][0])}, {_fmt(r['ci'][1])}]" if fit else "-"
        oof = r["oof_auroc"]
        t.add_row(
            r["endpoint"],
            r["variant"],
            f"{r['test_rows']} ({r['test_problems']})",
            f"{r['class_counts'][0]} / {r['class_counts'][1]}",
            _fmt(r["baseline_auroc"]),
            _fmt(r["early_auroc"]),
            delta,
            "-" if r["skipped_draws"] is None else str(r["skipped_draws"]),
            f"{_fmt(oof['baseline'])} / {_fmt(oof['early_blocks'])}",
            ("success" if r["success"] else "no success") if fit else f"not fit: {r['reason']}",
        )
    console.print(t)
    forest = report.json_path.parent / "figures" / "confirmatory_forest.png"
    console.print(
        f"wrote {report.json_path} and {report.csv_path}"
        + (f"; figure {forest}" if forest.is_file() else "")
    )


def _print_sweep(sweep) -> None:  # sweep: analyses.confirm.SweepReport
    """One row per forecast point (9.5's post-hoc table) and where the outputs are."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    t = Table(title="forecast-point sweep (main variant; * pre-registered)")
    for col in ("t", "primary Δ [95% CI]", "n", "secondary Δ [95% CI]", "n "):
        t.add_column(col, justify="right")

    def cell(row, e: str) -> str:
        if row.get(f"{e}_status") != "fit":
            return "not fit"
        return f"{row[f'{e}_delta']:+.3f} [{_fmt(row[f'{e}_ci_low'])}, {_fmt(row[f'{e}_ci_high'])}]"

    for row in sweep.table.to_dict(orient="records"):
        t.add_row(
            f"{row['forecast_token']:,}" + ("*" if row["preregistered"] else ""),
            cell(row, "primary"),
            str(row.get("primary_n", "-")),
            cell(row, "secondary"),
            str(row.get("secondary_n", "-")),
        )
    console.print(t)
    console.print(
        f"wrote {sweep.csv_path}, {sweep.json_path}, "
        + ", ".join(str(p) for p in sweep.figures.values())
    )


def confirm(
    runs: list[Path] = typer.Argument(
        ...,
        help="Run directories (with store.sqlite) or folders of them, as given to `bt classify`.",
    ),
    signals: list[Path] | None = typer.Option(
        None,
        "--signals",
        help="`bt signals` table of each run, in the runs' order; repeat "
        "(default: RUN/signals.parquet).",
    ),
    labels: Path | None = typer.Option(
        None,
        "--labels",
        help="`bt classify` labels table (default: the labels `bt classify` wrote "
        "for these runs: in the folder the same arguments give it, "
        "RUN/classify/ or the runs' folder's classify/).",
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        help="Output folder for confirm.json and confirm.csv (default: "
        "beside the labels' classify folder, named confirm).",
    ),
    forecast_token: str = typer.Option(
        "512",
        "--forecast-token",
        help="Forecast point t: summaries of the base run's first t "
        "tokens; cells whose base run is shorter are excluded "
        "(protocol 9.5: 512). Several, comma-separated (e.g. "
        "128,256,512,1024,2048): the post-hoc sweep in one call "
        "(OUT/t_<t>/ per t, OUT/sweep.csv one row per t, the "
        "sweep and forest figures in OUT/figures/); a run's "
        "signals table is used where it holds window t, else "
        "the summaries are computed from its store.",
    ),
    split_seed: int | None = typer.Option(
        None,
        "--split-seed",
        help="Assign train/validation/test by hashing problem ids with "
        "this seed (54/18/17 of 89) instead of the cohort's `split`.",
    ),
    draws: int = typer.Option(
        2000, "--draws", min=1, max=MAX_DRAWS, help="Problem-clustered bootstrap draws."
    ),
) -> None:
    """Confirmatory early-signal test (protocol 9.5): ΔAUROC of baseline + 15 frozen summaries
    over the difficulty baseline, on the test split, for the primary (base-run success) and
    secondary (R(4096) >= 0.75) endpoints and their level-free variants."""
    from breakthrough.signals.confirm import check_options, parse_forecast_tokens  # not at start-up

    tokens = parse_forecast_tokens(forecast_token)
    for t in tokens:
        check_options(t, draws)
    if labels is None or out is None:
        from breakthrough.analyses.classify_run import labels_dir

        classify_dir = labels_dir(runs)
        labels = labels or classify_dir / "labels.parquet"
        out = out or classify_dir.parent / "confirm"
    if labels.suffix not in (".parquet", ".csv"):
        raise BtError(f"--labels: expected a .parquet or .csv labels table, got {labels}")
    if signals and any(p.suffix != ".parquet" for p in signals):
        bad = next(p for p in signals if p.suffix != ".parquet")
        raise BtError(f"--signals: expected a .parquet file, got {bad}")
    if len(tokens) > 1:
        from breakthrough.analyses.confirm import run_confirm_sweep

        _print_sweep(
            run_confirm_sweep(
                runs,
                labels,
                out,
                tokens=tokens,
                signals=signals,
                split_seed=split_seed,
                draws=draws,
            )
        )
        return
    from breakthrough.analyses.confirm import run_confirm

    _print(
        run_confirm(
            runs,
            labels,
            out,
            signals=signals,
            forecast_token=tokens[0],
            split_seed=split_seed,
            draws=draws,
        )
    )


def register(app: typer.Typer) -> None:
    app.command("confirm", short_help="Confirmatory early-signal test (protocol 9.5).")(confirm)
